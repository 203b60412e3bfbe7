"""Common helpers: logging set-up, process-tree handling, simulated time."""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import sys
import time
import traceback

LOG_FORMAT_ENV = "SGLANG_SIM_LOG_FORMAT"
FAMILY_MAIN = "main-2026-02"
FAMILY_0514 = "0.5.14"
FAMILIES = (FAMILY_MAIN, FAMILY_0514)


def log_family(value: str | None = None) -> str:
    raw = (value or os.environ.get(LOG_FORMAT_ENV) or FAMILY_MAIN).strip()
    if raw in ("0.5.14", "0514", "v0.5.14", "0.5.14+"):
        return FAMILY_0514
    return FAMILY_MAIN


def time_scale() -> float:
    raw = os.environ.get("SGLANG_SIM_TIME_SCALE", "")
    try:
        return max(0.0, float(raw)) if raw != "" else 1.0
    except ValueError:
        return 1.0


def sim_sleep(seconds: float) -> None:
    """Sleep ``seconds`` of simulated time (scaled by SGLANG_SIM_TIME_SCALE; 0 = do not sleep)."""
    s = seconds * time_scale()
    if s > 0:
        time.sleep(s)


def configure_logger(log_level: str = "info", prefix: str = "") -> None:
    """``[%(asctime)s{prefix}] %(message)s`` like sglang's configure_logger (ms with SGLANG_LOG_MS)."""
    if os.environ.get("SGLANG_LOG_MS", "").lower() in ("1", "true", "yes"):
        fmt = f"[%(asctime)s.%(msecs)03d{prefix}] %(message)s"
    else:
        fmt = f"[%(asctime)s{prefix}] %(message)s"
    level = getattr(logging, str(log_level).upper(), logging.INFO)
    logging.basicConfig(level=level, format=fmt, datefmt="%Y-%m-%d %H:%M:%S", stream=sys.stderr, force=True)


def get_exception_traceback() -> str:
    return "".join(traceback.format_exception(*sys.exc_info()))


def write_stderr(text: str) -> None:
    """One write per call, so that lines of several processes interleave but do not tear."""
    try:
        os.write(sys.stderr.fileno(), text.encode("utf-8", "replace"))
    except OSError:
        pass


def kill_itself_when_parent_died() -> None:
    """prctl(PR_SET_PDEATHSIG, SIGKILL): the scheduler dies with its parent (no orphans)."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGKILL)
    except OSError:
        pass


def set_process_name(name: str) -> None:
    """Best effort: what ``ps -o comm`` shows (15 bytes), e.g. ``sglang::schedul``."""
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(15, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)
    except OSError:
        pass


# Child processes started by this process (scheduler ranks); kill_process_tree kills them.
CHILD_PROCESSES: list = []


def kill_process_tree(parent_pid: int | None, include_parent: bool = True, children: list | None = None) -> None:
    """Kill our child processes (SIGKILL), then ourselves if asked (like sglang's kill_process_tree)."""
    if children is None:
        children = CHILD_PROCESSES
    if parent_pid is None:
        parent_pid = os.getpid()
        include_parent = False
    for proc in children or []:
        pid = getattr(proc, "pid", proc)
        try:
            os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, TypeError):
            pass
    for proc in children or []:
        try:
            proc.join(timeout=5)
        except (AttributeError, AssertionError):
            pass
    if include_parent:
        logging.shutdown()
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        except (OSError, ValueError):
            pass
        os.kill(parent_pid, signal.SIGKILL)
        time.sleep(5)
        sys.exit(0)


def format_interval(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    h, m = divmod(m, 60)
    return f"{h:d}:{m:02d}:{s:02d}" if h else f"{m:02d}:{s:02d}"


class Tqdm:
    """Enough of tqdm's bar (``\\r`` updates on stderr) for the logs to look real."""

    def __init__(self, total: int, desc: str = "", bar_format: str | None = None):
        self.total = total
        self.n = 0
        self.desc = desc
        self.bar_format = bar_format
        self.start = time.monotonic()
        self._render()

    def set_description(self, desc: str) -> None:
        self.desc = desc
        self._render()

    def update(self, n: int = 1) -> None:
        self.n += n
        self._render()

    def close(self) -> None:
        self._render(final=True)

    def _render(self, final: bool = False) -> None:
        elapsed = time.monotonic() - self.start
        rate = self.n / elapsed if elapsed > 0 and self.n else 0.0
        remaining = (self.total - self.n) / rate if rate else 0.0
        pct = int(100 * self.n / self.total) if self.total else 100
        if self.bar_format == "sglang-shards":
            body = (
                f"{self.desc}: {pct:3d}% Completed | {self.n}/{self.total} "
                f"[{format_interval(elapsed)}<{format_interval(remaining) if rate else '?'}, "
                f"{(1 / rate if rate else 0):.2f}s/it]"
            )
        else:
            width = 10
            filled = int(width * self.n / self.total) if self.total else width
            bar = "█" * filled + " " * (width - filled)
            rate_s = f"{rate:.2f}it/s" if rate else "?it/s"
            rem_s = format_interval(remaining) if rate else "?"
            body = f"{self.desc}: {pct:3d}%|{bar}| {self.n}/{self.total} [{format_interval(elapsed)}<{rem_s}, {rate_s}]"
        write_stderr("\r" + body + ("\n" if final else ""))
