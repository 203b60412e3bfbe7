"""Utilities (``sglang.srt.utils`` re-exports ``sglang.srt.utils.common`` like SGLang >= 0.5.x)."""

from sglang.srt.utils.common import (
    configure_logger,
    get_exception_traceback,
    kill_itself_when_parent_died,
    kill_process_tree,
    sim_sleep,
    time_scale,
)

__all__ = [
    "configure_logger",
    "get_exception_traceback",
    "kill_itself_when_parent_died",
    "kill_process_tree",
    "sim_sleep",
    "time_scale",
]
