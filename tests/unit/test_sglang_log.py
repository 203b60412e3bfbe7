# ruff: noqa: UP031 - log lines are built with SGLang's own %-style format strings, kept verbatim
"""Unit tests for plugins/module_utils/sglang_log.py.

Fixtures: tests/unit/fixtures/logs, written from the SGLang reference (generate.py).
"""

import os
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.sglang_diagnosis import graph_bs_flag
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_log import (
    OUTCOMES,
    PHASES,
    RANK_FIELDS,
    StartupLog,
    parse_server_args,
    parse_text,
)
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_memory import capture_oom_advice
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_wait import LogFollower, is_stalled

LOGS = Path(__file__).parent / "fixtures" / "logs"


def parse(name, chunk=None):
    data = (LOGS / name).read_bytes()
    log = StartupLog()
    if chunk is None:
        log.feed(data)
    else:
        for i in range(0, len(data), chunk):
            log.feed(data[i : i + chunk])
    log.finish()
    return log


# name -> (outcome, phase, format, ranks, max_total_num_tokens)
EXPECTED = {
    "v0_2_7_gpu_tag_ready.log": ("ready", "ready", "0.2.7-0.2.13", ["gpu=0"], 111532),
    "v0_3_0_hms_ready.log": ("ready", "ready", "0.2.14-0.3.3", ["TP0", "TP1"], 912365),
    "v0_4_2_kv_no_tokens_ready.log": ("ready", "ready", "0.4.2-0.4.3.post2", ["TP0"], 1031077),
    "v0_4_6_capture_end_order_ready.log": ("ready", "ready", "0.4.4.post1-0.4.6", ["TP0"], 413280),
    "v0_4_9_multirank_journald_ready.log": (
        "ready",
        "ready",
        "0.4.8.post1-0.5.8.post1",
        ["TP0", "TP1", "TP2", "TP3"],
        1542880,
    ),
    "v0_5_9_glm5_ready.log": ("ready", "ready", "0.5.9", ["TP%d" % i for i in range(8)], 425664),
    "v0_5_9_glm5_capture_oom.log": (
        "oom_cuda_graph",
        "cuda_graph_capturing",
        "0.5.9",
        ["TP%d" % i for i in range(8)],
        None,
    ),
    "v0_5_14_docker_ready.log": ("ready", "ready", "0.5.14-0.5.20", ["TP0", "TP1"], 287104),
    "v0_5_23_single_gpu_ready.log": ("ready", "ready", "0.5.18-0.5.20", [""], 75264),
    "hybrid_swa_ready.log": ("ready", "ready", "0.5.3.post3-0.5.8.post1", ["TP0", "TP1"], 1312000),
    "kv_pool_oom.log": ("oom_kv_pool", "weights_loaded", "0.4.3.post3-0.5.8.post1", ["TP0", "TP1"], None),
    "weights_oom.log": ("oom_weights", "weights_loading", "0.3.4-0.5.20", ["TP0", "TP1", "TP2", "TP3"], None),
    "sm120_shared_memory.log": (
        "sm120_shared_memory",
        "http_up",
        "0.4.6.post1-0.5.8.post1",
        ["TP%d" % i for i in range(8)],
        None,
    ),
    "port_in_use.log": ("port_in_use", "http_up", "0.4.7-0.5.8.post1", [""], 403000),
    "nccl_error.log": ("nccl_error", "started", "0.3.4-0.5.20", ["TP0", "TP1"], None),
    "crash_triton_fp8.log": ("crash", "cuda_graph_capturing", "0.4.3.post3-0.5.8.post1", [""], None),
    "incomplete_capturing.log": (
        "incomplete",
        "cuda_graph_capturing",
        "0.5.9",
        ["TP%d" % i for i in range(8)],
        None,
    ),
}


def test_every_fixture_is_covered():
    assert sorted(p.name for p in LOGS.glob("*.log")) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_outcome_phase_format(name):
    outcome, phase, fmt, ranks, mtt = EXPECTED[name]
    res = parse(name).result()
    assert res["outcome"] == outcome
    assert res["outcome"] in OUTCOMES and res["phase"] in PHASES
    assert res["phase"] == phase
    assert res["format"] == fmt
    assert list(res["ranks"]) == ranks
    assert res["max_total_num_tokens"] == mtt
    for fig in res["ranks"].values():
        assert set(fig) == set(RANK_FIELDS)
    assert res["diagnosis"]


@pytest.mark.parametrize("name", sorted(EXPECTED))
@pytest.mark.parametrize("chunk", [1, 7, 4096])
def test_chunking_does_not_change_the_result(name, chunk):
    whole = parse(name).result()
    pieces = parse(name, chunk).result()
    for key in ("outcome", "phase", "format", "ranks", "max_total_num_tokens", "diagnosis", "suggestion"):
        assert pieces[key] == whole[key], key


def test_glm5_ready_reference_story():
    res = parse("v0_5_9_glm5_ready.log").result()
    for fig in res["ranks"].values():
        assert fig["kv_tokens"] == 425664
        assert fig["kv_size_gb"] == 24.37
        assert fig["k_size_gb"] is None and fig["v_size_gb"] is None
        assert fig["avail_after_pool_gb"] == 8.61
        assert fig["weights_gb"] == 61.0
        assert fig["cuda_graph_seconds"] == 41.37 and fig["cuda_graph_mem_gb"] == 3.12
    assert res["server_args"]["mem_fraction_static"] == 0.88
    assert res["server_args"]["tp_size"] == 8
    assert res["totals"]["pre_load_min_gb"] == 94.2
    assert res["http_port"] == 30000


def test_glm5_capture_oom_suggests_the_planners_one_fraction():
    log = parse("v0_5_9_glm5_capture_oom.log")
    res = log.result()
    sugg = res["suggestion"]
    assert sugg["action"] == "lower_mem_fraction_static"
    assert sugg["current"] == 0.95
    # one answer: the diagnosis prints what sglang_memory.capture_oom_advice computes from the logged figures
    assert sugg["value"] == capture_oom_advice(**sugg["inputs"]).mem_fraction_static == 0.92
    assert sugg["inputs"]["pre_load_free_gib"] == 94.2 and sugg["inputs"]["capture_free_gib"] == 1.5
    assert sugg["args"] == ["--mem-fraction-static", "0.92"]
    assert "0.92" in res["diagnosis"]
    assert log.oom["tried_gb"] == 1.25 and abs(log.oom["free_gb"] - 0.959) < 0.01
    assert "TP3" in res["diagnosis"] and "0.95" in res["diagnosis"]
    assert res["failure"]["rank"] == "TP3"


def test_capture_oom_flag_name_follows_format():
    text = (LOGS / "v0_5_14_docker_ready.log").read_bytes().decode()
    cut = text[: text.index("Capture target decode CUDA graph end")].rsplit("\n", 1)[0]
    cut += "\n[2026-07-02 14:00:50 TP1] Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate "
    cut += "2.00 GiB. GPU 1 has a total capacity of 47.50 GiB of which 1.10 GiB is free.\n"
    res = parse_text(cut).result()
    assert res["outcome"] == "oom_cuda_graph"
    assert graph_bs_flag(parse_text(cut).window) == "--cuda-graph-max-bs-decode"
    assert res["suggestion"]["value"] < 0.83


def test_kv_oom_minimum_fraction_from_numbers():
    res = parse("kv_pool_oom.log").result()
    sugg = res["suggestion"]
    minimum = 1 - 14.90 / 78.40
    assert abs(sugg["minimum"] - minimum) < 1e-3
    assert sugg["value"] >= minimum and sugg["action"] == "raise_mem_fraction_static"
    assert "-184921" in res["diagnosis"]


def test_kv_oom_0_5_23_text_and_add_gpus():
    text = (
        "[2026-11-04 09:00:00] server_args={'mem_fraction_static': 0.7, 'tp_size': 2}\n"
        "[2026-11-04 09:00:02 TP0] Load weight begin. avail mem=78.00 GB\n"
        "[2026-11-04 09:00:09 TP0] Load weight end. elapsed=6.45 s, type=X, avail mem=2.00 GB, mem usage=76.00 GB.\n"
        "[2026-11-04 09:00:09 TP0] ValueError: Loaded weights leave no GPU memory for the KV cache under "
        "--mem-fraction-static=0.7. Raise --mem-fraction-static above 0.974 (minimum viable = 1 - available/pre = "
        "0.9744). If using speculative decoding, draft weights are now counted.\n"
    )
    res = parse_text(text).result()
    assert res["outcome"] == "oom_kv_pool"
    assert res["server_args"]["tp_size"] == 2
    assert res["suggestion"]["action"] == "add_gpus" and res["suggestion"]["value"] == 4


def test_weights_oom_suggests_more_gpus():
    res = parse("weights_oom.log").result()
    assert res["suggestion"]["args"] == ["--tp-size", "8"]


def test_port_and_sm120_and_nccl_suggestions():
    assert parse("port_in_use.log").result()["suggestion"]["port"] == 30000
    sm = parse("sm120_shared_memory.log").result()
    assert "14311" in sm["diagnosis"] and sm["suggestion"]["fix"].endswith("14311")
    assert parse("nccl_error.log").result()["suggestion"]["action"] == "debug_nccl"


def test_crash_names_the_exception_and_waits_for_refinement():
    log = parse("crash_triton_fp8.log")
    res = log.result()
    assert "fp8e4nv" in res["diagnosis"]
    assert not log.failure["specific"]
    t = log.failure["t"]
    assert not log.is_terminal(t + 0.5) and log.is_terminal(t + StartupLog.CRASH_GRACE)


def test_generic_crash_refined_by_later_oom():
    log = StartupLog()
    log.feed("[2025-01-01 00:00:00 TP0] Load weight begin. avail mem=70.00 GB\n", now=1.0)
    log.feed("[2025-01-01 00:00:05 TP0] Scheduler hit an exception: Traceback (most recent call last):\n", now=2.0)
    assert log.outcome == "crash" and not log.is_terminal(2.1)
    log.feed("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.\n", now=2.2)
    assert log.outcome == "oom_weights" and log.is_terminal(2.2)


def test_k_v_without_tokens_0_4_2():
    fig = parse("v0_4_2_kv_no_tokens_ready.log").result()["ranks"]["TP0"]
    assert fig["kv_tokens"] is None
    assert (fig["k_size_gb"], fig["v_size_gb"], fig["kv_size_gb"]) == (27.52, 27.52, 55.04)
    assert fig["cuda_graph_seconds"] == 11.21 and fig["cuda_graph_mem_gb"] is None
    assert fig["weights_gb"] == round(78.81 - 64.47, 2)  # before - after: 0.4.2 prints no mem usage


def test_capture_end_field_orders():
    old = parse("v0_4_6_capture_end_order_ready.log").result()["ranks"]["TP0"]
    assert (old["avail_after_graph_gb"], old["cuda_graph_mem_gb"]) == (11.93, 0.78)
    new = parse("v0_4_9_multirank_journald_ready.log").result()["ranks"]["TP0"]
    assert (new["avail_after_graph_gb"], new["cuda_graph_mem_gb"]) == (11.07, 0.42)


def test_multirank_interleaving_journald_nul_ansi():
    res = parse("v0_4_9_multirank_journald_ready.log").result()
    assert res["ranks"]["TP0"]["kv_tokens"] == 1542880 and res["ranks"]["TP1"]["kv_tokens"] == 1542890
    assert res["ranks"]["TP2"]["avail_after_weights_gb"] == 60.11
    assert res["totals"]["kv_tokens_min"] == 1542880
    assert res["http_port"] == 30010
    assert all(f["avail_after_pool_gb"] == 11.53 for f in res["ranks"].values())  # NUL after the number


def test_capture_progress_from_bs_list_with_carriage_returns():
    text = (LOGS / "v0_5_9_glm5_ready.log").read_bytes().decode()  # read_text() would turn \r into \n
    cut = text[: text.index("Capture cuda graph end")]
    cut = cut[: cut.rindex("\r") + 1]  # through the tqdm updates, before the end lines
    log = parse_text(cut)
    prog = log.result()["capture_progress"]
    assert (prog["bs"], prog["index"], prog["total"]) == (24, 6, 12)  # graphs up to the 64-request table
    assert log.phase == "cuda_graph_capturing"


def test_0_5_14_format_details():
    log = parse("v0_5_14_docker_ready.log")
    rank = log.result(details=True)["ranks"]["TP0"]
    assert rank["kv_dtype"] == "torch.bfloat16"
    assert rank["weights_quant"] == "fp8, fmt=e4m3"
    assert rank["weights_dtype"] is None
    assert log.capture_bs == [1, 2, 4, 8, 16, 24, 32, 48, 64]
    assert log.server_args["cuda_graph_max_bs_decode"] == 64


def test_0_5_23_milliseconds_and_overlap_line():
    log = parse("v0_5_23_single_gpu_ready.log")
    res = log.result()
    assert res["ranks"][""]["weights_gb"] == 15.41  # the "Committed real weights" line does not overwrite it
    ms = res["milestones"]
    assert ms["ready"]["log_t"] - ms["started"]["log_t"] == pytest.approx(15.316, abs=1e-3)


def test_hybrid_swa_two_kv_lines_summed():
    fig = parse("hybrid_swa_ready.log").result()["ranks"]["TP0"]
    assert fig["k_size_gb"] == 31.54 and fig["v_size_gb"] == 31.54 and fig["kv_size_gb"] == 63.08
    assert fig["kv_tokens"] == 1312000  # the full-attention pool


def test_gpu_tag_0_2():
    log = parse("v0_2_7_gpu_tag_ready.log")
    fig = log.result()["ranks"]["gpu=0"]
    assert fig["avail_after_weights_gb"] == 65.90 and fig["weights_gb"] == round(78.52 - 65.90, 2)
    assert log.milestone_met("cuda_graph_captured", 1)  # no end line before 0.4: HTTP up implies it


def test_milestone_met_needs_every_rank_and_respects_disabled_graphs():
    log = StartupLog()
    log.feed("[2025-01-01 00:00:00] server_args=ServerArgs(tp_size=2, disable_cuda_graph=True)\n")
    log.feed("[2025-01-01 00:00:01 TP0] KV Cache is allocated. #tokens: 10, K size: 1.00 GB, V size: 1.00 GB\n")
    assert log.expected_ranks() == 2
    assert not log.milestone_met("kv_allocated")
    log.feed("[2025-01-01 00:00:01 TP1] KV Cache is allocated. #tokens: 10, K size: 1.00 GB, V size: 1.00 GB\n")
    assert log.milestone_met("kv_allocated")
    assert not log.milestone_met("cuda_graph_captured")
    log.feed("[2025-01-01 00:00:01 TP0] Memory pool end. avail mem=3.00 GB\n")
    log.feed("[2025-01-01 00:00:01 TP1] Memory pool end. avail mem=3.00 GB\n")
    assert log.milestone_met("cuda_graph_captured")  # graphs disabled: capture is skipped


def test_server_args_parsing():
    sa = parse_server_args(
        "server_args=ServerArgs(model_path='/m', mem_fraction_static=0.848, tp_size=8, nccl_port=None, port=30001, "
        "disable_cuda_graph=False, disable_cuda_graph_padding=True, cuda_graph_max_bs=None, attn_tp_size=4)"
    )
    assert sa == {
        "model_path": "/m",
        "mem_fraction_static": 0.848,
        "tp_size": 8,
        "port": 30001,
        "disable_cuda_graph": False,
    }


def test_stall_helper():
    assert is_stalled(10.0, 20.0, 10)
    assert not is_stalled(10.0, 19.9, 10)
    assert not is_stalled(10.0, 1000.0, 0)
    log = parse("incomplete_capturing.log")
    log.mark_stalled(600)
    res = log.result()
    assert res["outcome"] == "stalled" and "cuda_graph_capturing" in res["diagnosis"]


def test_port_wait_message_is_not_a_failure():
    log = parse_text("[2025-01-01 00:00:00] port 30000 is in use. Waiting for 1 seconds for server to be available.\n")
    assert log.failure is None and 30000 in log.port_waits


def test_unfinished_tail_waits_for_newline():
    log = StartupLog()
    log.feed(b"[2025-01-01 00:00:00] The server is fired up and ready")
    assert not log.ready
    log.feed(b" to roll!\n")
    assert log.ready


def test_split_utf8_and_nul():
    log = StartupLog()
    data = "[2025-01-01 00:00:00 TP0] Load weight begin. avail mem=1.00 GB \u2588\x00\n".encode()
    for b in data:
        log.feed(bytes([b]))
    assert log.ranks["TP0"].pre_load_gb == 1.0


# ---------------------------------------------------------------------------------------------------------------
# LogFollower
# ---------------------------------------------------------------------------------------------------------------
def test_follower_starts_at_end_and_reads_only_new(tmp_path):
    p = tmp_path / "s.log"
    p.write_bytes(b"old ready line\n")
    f = LogFollower(str(p))
    assert f.read() == b""
    with open(p, "ab") as fh:
        fh.write(b"new\n")
    assert f.read() == b"new\n"
    assert f.read() == b""
    f.close()


def test_follower_rotation_drains_old_then_reads_new(tmp_path):
    p = tmp_path / "s.log"
    p.write_bytes(b"a\n")
    f = LogFollower(str(p), offset=0)
    assert f.read() == b"a\n"
    with open(p, "ab") as fh:
        fh.write(b"b\n")
    os.rename(p, tmp_path / "s.log.1")
    p.write_bytes(b"c\n")
    assert f.read() == b"b\nc\n"
    assert f.rotations == 1
    f.close()


def test_follower_truncation_and_rewrite(tmp_path):
    p = tmp_path / "s.log"
    p.write_bytes(b"x" * 100 + b"\n")
    f = LogFollower(str(p))
    with open(p, "wb") as fh:  # truncated
        fh.write(b"n1\n")
    assert f.read() == b"n1\n"
    assert f.truncations == 1
    # truncated and regrown past the old offset with different bytes: caught by the fingerprint
    with open(p, "wb") as fh:
        fh.write(b"y" * 10 + b"\n")
    assert f.read() == b"y" * 10 + b"\n"
    assert f.truncations == 2
    f.close()


def test_follower_pinned_inode_changed_before_start(tmp_path):
    p = tmp_path / "s.log"
    p.write_bytes(b"old\n")
    ino, size = os.stat(p).st_ino, os.stat(p).st_size
    os.rename(p, tmp_path / "old.log")
    p.write_bytes(b"fresh\n")
    f = LogFollower(str(p), offset=size, inode=ino)
    assert f.read() == b"fresh\n"
    f.close()


def test_follower_missing_file_appears(tmp_path):
    p = tmp_path / "late.log"
    f = LogFollower(str(p))
    assert f.read() == b""
    p.write_bytes(b"hello\n")
    assert f.read() == b"hello\n"
    f.close()
