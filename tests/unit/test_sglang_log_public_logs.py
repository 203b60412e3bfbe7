"""Real SGLang logs posted in public bug reports parse to the right outcome, format and numbers.

Fixtures: tests/unit/fixtures/public_logs/*.log, excerpts of logs from public GitHub issues, pull requests and
repositories (sgl-project/sglang and projects that run SGLang); each file names its source URL and the release it came
from in its first lines, and says what was left out when the excerpt is not contiguous.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.sglang_log import StartupLog, parse_text

LOGS = Path(__file__).parent / "fixtures" / "public_logs"
ROOT = Path(__file__).resolve().parents[2]
DOCTOR = ROOT / "bin" / "sglang-doctor"


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
        "0.4.3.post3-0.5.8.post1",
        {"TP0": {"weights_gb": 40.46, "avail_after_weights_gb": 35.52, "avail_after_pool_gb": 16.08}},
    ),
    "issue4233_capture_end_then_draft_init.log": (
        "incomplete",
        "cuda_graph_captured",
        "0.4.0-0.4.3.post2",
        {"TP4": {"cuda_graph_seconds": 1334.38}},
    ),
    "issue7691_negative_profiled_tokens.log": (
        "oom_kv_pool",
        "weights_loaded",
        "0.4.3.post3-0.5.8.post1",
        {"DP0 TP0": {"weights_gb": 166.59, "avail_after_weights_gb": 21.73}},
    ),
    "issue5285_capture_failed_oom.log": ("oom_cuda_graph", None, "0.1.22+", {}),
    "issue4205_capture_failed_gloo.log": ("crash", None, "0.1.22+", {}),
    "issue29562_prefill_capture_failed.log": ("crash", None, "0.5.14+", {}),
    "pr27650_piecewise_failed.log": ("crash", None, "0.5.10-0.5.13.post1", {}),
    "issue1751_cut_in_capture_traceback.log": ("crash", "cuda_graph_capturing", "0.3.4-0.4.3.post2", {"TP0": {}}),
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
    # -- issue 26: logs of 0.5.9 and later (two main builds just before 0.5.9), classes the doctor used to refuse or
    #    misread: a traceback before SGLang's first line, frames without their header, wrapper prefixes (Ray, CRI),
    #    uvicorn and aiter "LEVEL file:line:" formats, serving logs, SWA/DeepSeek-V4 pools, decode then piecewise
    "issue23142_glm5_mtp_draft_init_crash.log": ("crash", None, "0.3.4+", {}),
    "issue23602_dsv4_capture_crash_ep.log": ("crash", None, "0.4.8.post1+", {}),
    "issue28659_glm52_pp_cri_prefixed.log": ("incomplete", "weights_loading", "0.3.4+", {"PP1": {}}),
    "issue29796_npu_uvicorn_startup_lines.log": ("incomplete", "http_up", "0.3.4+", {}),
    "issue29801_npu_http_up_then_scheduler_exception.log": ("crash", "http_up", "0.3.4+", {}),
    "issue7888_nvshmem_connect_eps_failed.log": ("crash", None, "unknown", {}),
    "issue30082_dsv4_serving_decode_batches.log": ("incomplete", "http_up", "0.3.4+", {}),
    "issue32830_dsv4_pool_end_swa_pool.log": (
        "incomplete",
        "memory_pool_ready",
        "0.5.12+",
        {"TP1": {"avail_after_pool_gb": 3.05}, "TP3": {"avail_after_pool_gb": 3.29}},
    ),
    "kvcache_ai_pr50_ready_line_only.log": ("ready", "ready", "unknown", {}),
    "pr17392_dp_ep_capture_progress.log": (
        "incomplete",
        "cuda_graph_capturing",
        "0.4.8.post1-0.5.13.post1",
        {"DP3 TP3 EP3": {}},
    ),
    "pr18039_swa_pool_main_build.log": (
        "incomplete",
        "kv_allocated",
        "0.4.9.post3-0.5.12.post1",
        {"TP1": {"kv_tokens": 300288, "k_size_gb": 8.38, "v_size_gb": 5.59, "kv_size_gb": 13.97}},
    ),
    "pr20758_musa_decode_then_piecewise_capture.log": (
        "incomplete",
        "cuda_graph_captured",
        "0.5.6-0.5.13.post1",
        {"TP0": {"cuda_graph_seconds": 27.41, "cuda_graph_mem_gb": 0.83}, "TP1": {"avail_after_graph_gb": 10.88}},
    ),
    "pr23600_dsv4_traceback_frames_only.log": ("crash", None, "unknown", {}),
    "pr26437_musa_piecewise_capture_end.log": (
        "incomplete",
        None,
        "0.5.6-0.5.13.post1",
        {"": {"cuda_graph_seconds": 176.68, "cuda_graph_mem_gb": 5.12}},
    ),
    "pr29853_npu_kv_dtype_prefill_graph_disabled.log": (
        "incomplete",
        "memory_pool_ready",
        "0.5.13+",
        {"TP10": {"kv_tokens": 387968, "kv_size_gb": 11.84, "avail_after_pool_gb": 11.23}},
    ),
    "rocm_glm5_config_traceback_before_first_line.log": ("crash", None, "0.3.4+", {}),
    "rocm_glm5_mi355x_capture_crash.log": (
        "crash",
        "cuda_graph_capturing",
        "0.5.9",
        {
            "TP0": {
                "weights_gb": 89.58,
                "avail_after_weights_gb": 193.92,
                "kv_tokens": 3262823,
                "kv_size_gb": 186.77,
                "avail_after_pool_gb": 3.90,
            }
        },
    ),
    "slime1653_ray_prefixed_scheduler_exception.log": ("crash", None, "0.3.4+", {}),
}
# The excerpt's date, from its "# release:" line (2026-04-18 or an image tag's 20260225).
_DATE = re.compile(r"(20\d\d)-?(\d\d)-?(\d\d)")


def test_at_least_fifteen_public_logs_each_citing_its_source():
    names = sorted(p.name for p in LOGS.glob("*.log"))
    assert names == sorted(EXPECTED) and len(names) >= 15
    for name in names:
        head = (LOGS / name).read_text().splitlines()[:2]
        assert re.match(r"# source: https://github\.com/[\w.-]+/[\w.-]+/\S+", head[0]), name
        assert head[1].startswith("# release: "), name


def test_at_least_fifteen_public_logs_of_0_5_9_or_later():
    """SGLang 0.5.9 was released on 2026-02-23 (its wheel's date): the logs dated from then on (issue 26)."""
    recent = []
    for p in LOGS.glob("*.log"):
        m = _DATE.search(p.read_text().splitlines()[1])
        if m and tuple(int(x) for x in m.groups()) >= (2026, 2, 23):
            recent.append(p.name)
    assert len(recent) >= 15, sorted(recent)


@pytest.mark.parametrize(
    "path", sorted(p for d in ("public_logs", "real_logs", "logs") for p in (LOGS.parent / d).glob("*.log"))
)
def test_the_doctor_gives_an_outcome_for_every_fixture_log(path):
    """No fixture log is refused as "not an SGLang log": each gets an outcome, a phase or none, and a diagnosis."""
    p = subprocess.run([sys.executable, str(DOCTOR), str(path), "--json"], capture_output=True, text=True,
                       timeout=60, check=False)  # fmt: skip
    assert p.returncode in (0, 1), p.stderr
    out = json.loads(p.stdout)
    assert out["outcome"] in ("ready", "incomplete") or out["outcome"].startswith(
        ("oom", "crash", "sm120", "port", "nccl", "dist", "memory")
    )
    assert out["diagnosis"]


def test_every_pool_is_reported_with_its_kind_and_a_total():
    # the hybrid SWA pool of the 0.5.2x fixture: its SWA and full-attention pools, not their SWAKVPool sum again
    log = StartupLog()
    log.feed((LOGS.parent / "logs" / "hybrid_swa_ready.log").read_bytes())
    log.finish()
    pools = log.result(details=True)["ranks"]["TP0"]["kv_pools"]
    assert [(p["kind"], p["tokens"]) for p in pools] == [("swa", 1049600), ("full", 1312000)]
    # DeepSeek-V4's own pool line (token counts only)
    _log, res = parse("issue32830_dsv4_pool_end_swa_pool.log")
    assert res["ranks"]["TP1"]["avail_after_pool_gb"] == 3.05
    log = StartupLog()
    log.feed((LOGS / "issue32830_dsv4_pool_end_swa_pool.log").read_bytes())
    log.finish()
    assert log.result(details=True)["ranks"]["TP3"]["kv_pools"] == [{"kind": "swa", "tokens": 329472,
                                                                      "kv_size_gb": None}]  # fmt: skip


def test_a_mamba_hybrid_with_an_mtp_draft_reports_every_pool_and_its_kv_numbers(tmp_path):
    # no public log of this class was found: the lines are 0.5.9's texts (mem_cache/memory_pool.py:302 and :652,
    # model_runner's load/pool lines), a Qwen3-Next target with its MTP draft on one rank
    text = (
        "[2026-03-01 10:00:00 TP0] Load weight begin. avail mem=78.50 GB\n"
        "[2026-03-01 10:00:40 TP0] Load weight end. elapsed=40.12 s, type=Qwen3NextForCausalLM, "
        "dtype=torch.bfloat16, avail mem=41.20 GB, mem usage=37.30 GB.\n"
        "[2026-03-01 10:00:41 TP0] Mamba Cache is allocated. max_mamba_cache_size: 160, conv_state size: 0.56GB, "
        "ssm_state size: 21.88GB intermediate_ssm_state_cache size: 2.19GB intermediate_conv_window_cache size: "
        "0.06GB \n"
        "[2026-03-01 10:00:41 TP0] KV Cache is allocated. #tokens: 1179648, K size: 4.50 GB, V size: 4.50 GB\n"
        "[2026-03-01 10:00:41 TP0] Memory pool end. avail mem=6.80 GB\n"
        "[2026-03-01 10:00:45 TP0] Load weight begin. avail mem=6.80 GB\n"
        "[2026-03-01 10:00:47 TP0] Load weight end. elapsed=2.01 s, type=Qwen3NextForCausalLMMTP, "
        "dtype=torch.bfloat16, avail mem=5.30 GB, mem usage=1.50 GB.\n"
        "[2026-03-01 10:00:47 TP0] KV Cache is allocated. #tokens: 1179648, K size: 1.12 GB, V size: 1.12 GB\n"
        "[2026-03-01 10:00:47 TP0] Memory pool end. avail mem=3.05 GB\n"
    )
    fig = parse_text(text).result(details=True)["ranks"]["TP0"]
    assert (fig["kv_tokens"], fig["kv_size_gb"], fig["avail_after_pool_gb"]) == (1179648, 9.0, 6.8)
    assert (fig["draft"]["kv_tokens"], fig["draft"]["kv_size_gb"], fig["free_gb"]) == (1179648, 2.24, 3.05)
    log_path = tmp_path / "mamba_mtp.log"
    log_path.write_text(text)
    p = subprocess.run([sys.executable, str(DOCTOR), str(log_path)], capture_output=True, text=True, timeout=60,
                       check=False)  # fmt: skip
    assert ("TP0 pools: mamba 160 states 24.69 GB, full 1179648 tokens 9.00 GB, draft full 1179648 tokens 2.24 GB "
            "(total 35.93 GB)") in p.stdout  # fmt: skip


def test_decode_piecewise_and_draft_captures_are_reported_one_by_one():
    # two real lines of the same release window, one log: the decode capture (pr20758) and the piecewise capture
    # (pr26437), each with its own time and memory
    text = (
        "[2026-03-17 07:16:38] Capture cuda graph end. Time elapsed: 27.41 s. mem usage=0.83 GB. avail mem=10.81 GB.\n"
        "[2026-05-27 03:36:40] Capture piecewise CUDA graph end. Time elapsed: 176.68 s. mem usage=5.12 GB. "
        "avail mem=31.68 GB.\n"
    )
    caps = parse_text(text).result(details=True)["ranks"][""]["captures"]
    assert [(c["kind"], c["seconds"], c["mem_gb"]) for c in caps] == [("decode", 27.41, 0.83),
                                                                      ("piecewise", 176.68, 5.12)]  # fmt: skip
    p = subprocess.run([sys.executable, str(DOCTOR), str(LOGS / "issue10088_eagle_target_and_draft_capture.log")],
                       capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
    assert "TP0 captures: decode 12.11 s 0.54 GB" in p.stdout and "TP6 captures: draft 62.67 s 0.21 GB" in p.stdout


def test_a_traceback_before_sglangs_first_line_is_a_crash_with_its_first_exception():
    _log, res = parse("rocm_glm5_config_traceback_before_first_line.log")
    assert res["outcome"] == "crash" and "KeyError: 'glm_moe_dsa'" in res["diagnosis"]


def test_rocm_aiter_and_uvicorn_level_prefixes_are_read():
    # aiter's root-logger format and uvicorn's INFO: lines wrap SGLang's message; both ready forms are SGLang's line
    for line in (
        "[2026-02-26 05:40:01] INFO http_server.py:1234: The server is fired up and ready to roll!",
        "INFO:     The server is fired up and ready to roll!",
    ):
        assert parse_text(line + "\n").result()["outcome"] == "ready", line
    _log, res = parse("issue29796_npu_uvicorn_startup_lines.log")
    assert res["phase"] == "http_up" and res["http_port"] == 8000


def test_child_exits_and_nvshmem_failures_are_crashes_naming_the_first_cause():
    # SGLang's texts (0.5.23 entrypoints/engine.py, managers/data_parallel_controller.py) after an exception
    text = (
        'Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n'
        "RuntimeError: CUDA error: an illegal memory access was encountered\n"
        "[2026-10-01 10:00:00] Scheduler or DataParallelController 4242 terminated with -9\n"
    )
    res = parse_text(text).result()
    assert res["outcome"] == "crash"
    assert "first error: RuntimeError: CUDA error: an illegal memory access" in res["diagnosis"]
    # NVSHMEM's own line, printed without SGLang's prefix (from the NVSHMEM sources SGLang's DeepEP image builds)
    nv = (
        "/sgl-workspace/nvshmem/src/host/init/init.cu:nvshmemi_check_state_and_init:1080: "
        "nvshmem initialization failed, exiting\n"
    )
    res = parse_text(
        nv + "[2026-10-01 10:00:01] Rank 0 scheduler died during initialization (exit code: 255).\n"
    ).result()
    assert res["outcome"] == "crash" and res["suggestion"]["action"] == "check_nvshmem"
    # a real NVSHMEM failure as a user pasted it (issue 7888): NVSHMEM's lines only, a crash before SGLang's first
    # start-up line naming NVSHMEM's first error
    _log, res = parse("issue7888_nvshmem_connect_eps_failed.log")
    assert res["suggestion"] == {
        "action": "check_nvshmem",
        "first_error": "NVSHMEM API called before NVSHMEM initialization has completed",
    }
    assert res["diagnosis"].startswith("SGLang crashed before any start-up line: NVSHMEM")


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


def test_only_a_file_without_any_sglang_traceback_or_uvicorn_line_is_refused(tmp_path):
    # one SGLang line the grammar does not read (issue30082's decode batch line): an outcome, not a refusal
    served = tmp_path / "served.log"
    served.write_text((LOGS / "issue30082_dsv4_serving_decode_batches.log").read_text().splitlines()[4] + "\n")
    p = subprocess.run([sys.executable, str(DOCTOR), str(served)], capture_output=True, text=True, check=False)
    assert p.returncode == 1 and "outcome: incomplete" in p.stdout, p.stderr
    other = tmp_path / "other.log"
    other.write_text("Update weights:  98%|#########8| 113/115 [00:36<00:00,  4.53it/s]\nhello\n")
    p = subprocess.run([sys.executable, str(DOCTOR), str(other)], capture_output=True, text=True, check=False)
    assert p.returncode == 2 and "is not an SGLang log" in p.stderr
