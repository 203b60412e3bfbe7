"""Real SGLang logs posted in public bug reports parse to the right outcome, format and numbers.

Fixtures: tests/unit/fixtures/public_logs/*.log, excerpts of logs from sgl-project/sglang issues and pull requests;
each file names its source URL and the release it came from in its first lines.
"""

import json
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.sglang_log import StartupLog

LOGS = Path(__file__).parent / "fixtures" / "public_logs"


def parse(name):
    log = StartupLog()
    log.feed((LOGS / name).read_bytes())
    log.finish()
    return log, log.result()


# name -> (outcome, phase, format window, {rank: {field: value}})
EXPECTED = {
    "pr11716_8rank_kv_capture_begin.log": (
        "incomplete",
        "cuda_graph_capturing",
        "0.4.6.post2-0.5.12.post1",
        {"TP5": {"kv_tokens": 2795207, "k_size_gb": 53.31, "kv_size_gb": 106.62, "avail_after_pool_gb": 11.87}},
    ),
    "pr15909_4rank_capturing.log": (
        "incomplete",
        "cuda_graph_capturing",
        "0.4.8.post1-0.5.12.post1",
        {"TP2": {"kv_tokens": 2090351, "kv_size_gb": 47.84, "avail_after_pool_gb": 12.45}},
    ),
    "pr22537_qwen3_load_end_elapsed.log": (
        "incomplete",
        "memory_pool_ready",
        "0.5.10-0.5.12.post1",
        {"TP0": {"weights_gb": 15.5, "avail_after_weights_gb": 160.78, "kv_tokens": 2206208}},
    ),
    "pr11830_single_gpu_capture_end.log": (
        "incomplete",
        "cuda_graph_captured",
        "0.4.8.post1-0.5.12.post1",
        {"": {"kv_tokens": 2243474, "cuda_graph_mem_gb": 1.44, "avail_after_graph_gb": 38.05}},
    ),
    "issue10088_eagle_target_and_draft_capture.log": (
        "incomplete",
        "cuda_graph_captured",
        "0.4.6.post1-0.5.13.post1",
        {"TP0": {"cuda_graph_mem_gb": 0.54, "avail_after_graph_gb": 16.74}, "TP6": {"cuda_graph_mem_gb": None}},
    ),
    "issue4417_mtp_deepseek_load_and_pool.log": (
        "incomplete",
        "memory_pool_ready",
        "0.4.4-0.5.8.post1",
        {"TP0": {"weights_gb": 40.46, "avail_after_weights_gb": 35.52, "avail_after_pool_gb": 16.08}},
    ),
    "issue4233_capture_end_then_draft_init.log": (
        "incomplete",
        "cuda_graph_captured",
        "0.3.6-0.4.3.post4",
        {"TP4": {"cuda_graph_seconds": 1334.38}},
    ),
    "issue7691_negative_profiled_tokens.log": (
        "oom_kv_pool",
        "weights_loaded",
        "0.4.4-0.5.8.post1",
        {"DP0 TP0": {"weights_gb": 166.59, "avail_after_weights_gb": 21.73}},
    ),
    "issue5285_capture_failed_oom.log": ("oom_cuda_graph", None, "unknown", {}),
    "issue4205_capture_failed_gloo.log": ("crash", None, "unknown", {}),
    "issue29562_prefill_capture_failed.log": ("crash", None, "0.5.14+", {}),
    "pr27650_piecewise_failed.log": ("crash", None, "0.5.10-0.5.14", {}),
    "issue1751_cut_in_capture_traceback.log": ("crash", "cuda_graph_capturing", "0.3.4+", {"TP0": {}}),
    "pr11275_capture_hang_dp.log": ("incomplete", "cuda_graph_capturing", "0.4.8.post1-0.5.13.post1", {"DP0 TP0": {}}),
    "pr17356_capture_small_bs.log": (
        "incomplete",
        "cuda_graph_capturing",
        "0.4.8.post1-0.5.12.post1",
        {"": {"kv_tokens": 671362, "kv_size_gb": 35.86, "avail_after_pool_gb": 27.47}},
    ),
    "pr27537_kv_dtype_musa.log": (
        "incomplete",
        "cuda_graph_capturing",
        "0.5.13-0.5.13.post1",
        {"TP0": {"kv_tokens": 1106304, "kv_size_gb": 50.64, "avail_after_pool_gb": 12.05}},
    ),
    "issue32105_draft_capture_traceback_cut.log": ("crash", None, "0.3.4+", {}),
}


def test_at_least_fifteen_public_logs_each_citing_its_source():
    names = sorted(p.name for p in LOGS.glob("*.log"))
    assert names == sorted(EXPECTED) and len(names) >= 15
    for name in names:
        head = (LOGS / name).read_text().splitlines()[:2]
        assert head[0].startswith("# source: https://github.com/sgl-project/sglang/"), name
        assert head[1].startswith("# release: "), name


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_public_log_outcome_format_and_numbers(name):
    outcome, phase, fmt, ranks = EXPECTED[name]
    _log, res = parse(name)
    assert (res["outcome"], res["phase"], res["format"]) == (outcome, phase, fmt)
    for label, fields in ranks.items():
        assert label in res["ranks"], (label, list(res["ranks"]))
        for key, value in fields.items():
            assert res["ranks"][label][key] == value, (label, key)
    json.dumps(res, allow_nan=False)  # what --json prints: never NaN/Infinity


def test_eagle_draft_capture_is_the_draft_runners_not_the_target():
    _log, res = parse("issue10088_eagle_target_and_draft_capture.log")
    assert "draft" not in res["ranks"]["TP0"]
    assert res["ranks"]["TP6"]["draft"]["cuda_graph_mem_gb"] == 0.21
    assert res["ranks"]["TP6"]["draft"]["cuda_graph_seconds"] == 62.67
    assert res["ranks"]["TP6"]["cuda_graph_mem_gb"] is None  # the target's graphs are not the draft's
    assert res["ranks"]["TP6"]["avail_after_graph_gb"] == 15.31  # free memory is the GPU's


def test_negative_profiled_tokens_is_a_kv_pool_failure():
    log, res = parse("issue7691_negative_profiled_tokens.log")
    assert log.kv_fail["profiled_tokens"] == -561981
    assert "-561981" in res["diagnosis"] and res["failure"]["rank"] == "DP0 TP0"


def test_capture_oom_from_an_exception_line_keeps_the_allocation():
    log, res = parse("issue5285_capture_failed_oom.log")
    assert log.oom["tried_gb"] == 0.438 and log.oom["gpu"] == 7
    assert res["suggestion"]["action"] == "lower_mem_fraction_static"


def test_prefill_graph_failure_is_not_blamed_on_decode_graphs():
    _log, res = parse("issue29562_prefill_capture_failed.log")
    assert res["suggestion"]["stage"] == "prefill"
    assert res["suggestion"]["args"] == ["--cuda-graph-backend-prefill", "disabled"]
    assert "cuda-graph-max-bs" not in res["diagnosis"] and "prefill graph" in res["diagnosis"]


def test_piecewise_failure_0_5_10_to_0_5_14_suggests_disable_piecewise():
    _log, res = parse("pr27650_piecewise_failed.log")
    assert res["failure"]["rank"] == "TP7"
    assert res["suggestion"]["args"] == ["--disable-piecewise-cuda-graph"]


def test_gloo_capture_failure_is_a_capture_crash_with_its_text():
    _log, res = parse("issue4205_capture_failed_gloo.log")
    assert res["suggestion"]["stage"] == "decode" and "gloo" in res["diagnosis"]


def test_log_cut_inside_a_capture_traceback_says_so():
    _log, res = parse("issue1751_cut_in_capture_traceback.log")
    assert res["suggestion"] == {"action": "read_traceback", "cut": True, "during_capture": True}
    assert "ends inside a traceback while CUDA graphs were being captured" in res["diagnosis"]


def test_draft_capture_traceback_cut_is_a_crash_on_its_rank():
    _log, res = parse("issue32105_draft_capture_traceback_cut.log")
    assert res["failure"]["rank"] == "DP0 TP0"
