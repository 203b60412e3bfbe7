"""The SGLang stand-in launched with the flags the server role plans for each release window, playing that release.

The stand-in knows which options a release accepts only from that release's wheel (sim/mirrors/sglang_cli.py reads
its server_args.py at test time here, at mirror-build time for the nodes) and lets argparse judge, prefix matching
included. The argv comes from plugins/module_utils/sglang_flags.server_argv, which the server role calls through the
llmops.sglang.sglang_server_argv filter (roles/server/tasks/attempt.yml), including on a capture-OOM retry.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_flags as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sim" / "mirrors"))
import sglang_cli  # noqa: E402
import sglang_releases  # noqa: E402

READY = "The server is fired up and ready to roll!"
# The first and last release of each window of the flag whose spelling changes (cuda_graph_max_bs).
WINDOW_EDGES = [
    (first or F.OLDEST_CHECKED, last or F.NEWEST_CHECKED)
    for first, last, _flag, _ev in F.SERVER_FLAGS["cuda_graph_max_bs"]
]
# ... and 0.5.20, from which the old spelling is refused.
RELEASES = sorted({v for edge in WINDOW_EDGES for v in edge} | {"0.5.20"}, key=F.release_key)


@pytest.fixture(scope="module")
def table(tmp_path_factory):
    try:
        wheels = [
            sglang_releases.cached_wheels().get(v) or sglang_releases.download_wheel(f"sglang=={v}") for v in RELEASES
        ]
    except (RuntimeError, OSError) as e:  # no network and no cache: say so, do not pretend
        pytest.skip(f"real SGLang wheels not available: {e}")
    path = tmp_path_factory.mktemp("options") / "sim_release_options.json"
    path.write_text(json.dumps(sglang_cli.table(wheels)))
    return path


def planned(release, graph_bs=64):
    """The role's argv for a single-GPU server at fraction 0.8 with metrics, as in attempt.yml."""
    return F.server_argv(
        release,
        {
            "model_path": "MODEL",
            "served_model_name": "m",
            "tp_size": 1,
            "mem_fraction_static": 0.8,
            "host": "127.0.0.1",
            "max_running_requests": 8,
            "cuda_graph_max_bs": graph_bs,
            "enable_metrics": True,
        },
    )


def _launch(launch, models, table, release, argv):
    argv = [str(models["llama3-8b"]) if a == "MODEL" else a for a in argv]
    return launch(
        argv,
        profile="rtx-pro-6000-x8.json",
        env={"SGLANG_SIM_RELEASE": release, "SGLANG_SIM_RELEASE_OPTIONS": str(table)},
    )


def test_the_windows_cover_the_spelling_change():
    assert [F.server_flag(first, "cuda_graph_max_bs") for first, _last in WINDOW_EDGES] == [
        "--cuda-graph-max-bs",
        "--cuda-graph-max-bs-decode",
    ]


@pytest.mark.parametrize("release", RELEASES)
def test_the_planned_flags_start_the_release(launch, models, table, release):
    s = _launch(launch, models, table, release, planned(release))
    assert s.wait_for(READY), s.log
    flag = F.server_flag(release, "cuda_graph_max_bs")
    assert flag in planned(release)
    assert "cuda_graph_max_bs=64" in s.log or "cuda_graph_max_bs_decode=64" in s.log, s.log


@pytest.mark.parametrize("release", [r for r in RELEASES if F.release_key(r) >= F.release_key("0.5.20")])
def test_the_old_graph_flag_fails_from_020_as_argparse_does(launch, models, table, release):
    old = planned(F.OLDEST_CHECKED)
    assert "--cuda-graph-max-bs" in old
    s = _launch(launch, models, table, release, old)
    assert s.wait_exit() == 2
    assert (
        "sglang serve: error: ambiguous option: --cuda-graph-max-bs could match --cuda-graph-max-bs-decode, "
        "--cuda-graph-max-bs-prefill" in s.log
    ), s.log
    assert READY not in s.log


def test_the_new_graph_flag_is_unknown_before_014(launch, models, table):
    release = WINDOW_EDGES[0][1]
    s = _launch(launch, models, table, release, planned(F.NEWEST_CHECKED))
    assert s.wait_exit() == 2
    assert "error: unrecognized arguments: --cuda-graph-max-bs-decode 64" in s.log, s.log


def test_a_release_without_a_table_is_refused(launch, models, table):
    s = _launch(launch, models, table, "0.5.7", planned("0.5.7"))
    assert s.wait_exit() == 2
    assert "stand-in: no option table for SGLang 0.5.7" in s.log
