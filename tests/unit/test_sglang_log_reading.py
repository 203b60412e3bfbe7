# ruff: noqa: UP031 - log lines are built with SGLang's own %-style format strings
"""The log engine reads whatever it is given in bounded memory, and the grammar covers speculative decoding and
the failure texts of every release.

The lines below are hand-made only where no public log shows the case; their formats are the templates of the
release named in each test (checked by make conformance against the wheel)."""

import json

from ansible_collections.llmops.sglang.plugins.callback.sglang_progress import render_summary
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_log import MAX_LINE, StartupLog, parse_text
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_memory import capture_oom_advice
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_server_run import build_result


def parse_bytes(data, chunk=None):
    log = StartupLog()
    if chunk is None:
        log.feed(data)
    else:
        for i in range(0, len(data), chunk):
            log.feed(data[i : i + chunk])
    log.finish()
    return log


TS = "[2026-02-20 10:00:%02d %s] "


def rank_lines(rank, sec=0):
    return [
        TS % (sec, rank) + "Load weight begin. avail mem=94.20 GB",
        TS % (sec + 1, rank) + "Load weight end. elapsed=180.20 s, type=GlmMoeDsaForCausalLM, dtype=torch.bfloat16, "
        "avail mem=33.15 GB, mem usage=61.05 GB.",
        TS % (sec + 2, rank) + "KV Cache is allocated. #tokens: 425664, KV size: 24.37 GB",
        TS % (sec + 2, rank) + "Memory pool end. avail mem=8.61 GB",
    ]


def test_truncated_last_line_gives_no_partial_number():
    text = "\n".join(rank_lines("TP0")[:1]) + "\n" + TS % (1, "TP0")
    text += "Load weight end. elapsed=180.20 s, type=X, dtype=torch.bfloat16, avail mem=33.15 GB, mem usage=3"
    fig = parse_bytes(text.encode()).result()["ranks"]["TP0"]
    assert fig["avail_after_weights_gb"] == 33.15
    # "mem usage=3" may be the start of 61.05: never 3.00 GB; the figure comes from the two complete ones
    assert fig["weights_gb"] == 61.05


def test_invalid_byte_after_the_prefix_does_not_lose_the_line():
    lines = []
    for r in range(8):
        lines += rank_lines("TP%d" % r)
    data = "\n".join(lines).encode() + b"\n"
    bad = data.replace(b"TP3] KV Cache", b"TP3] \xffKV Cache")
    res = parse_bytes(bad).result()
    assert len(res["ranks"]) == 8
    assert res["ranks"]["TP3"]["kv_tokens"] == 425664


def test_a_400_digit_number_is_not_a_figure_and_json_stays_finite():
    text = "\n".join(rank_lines("TP0")).replace("avail mem=8.61", "avail mem=" + "9" * 400) + "\n"
    res = parse_text(text).result()
    assert res["ranks"]["TP0"]["avail_after_pool_gb"] is None
    json.dumps(res, allow_nan=False)


def test_no_newline_is_read_in_bounded_memory_and_the_next_line_still_counts():
    log = StartupLog()
    junk = b"\x00\xffx" * 100000
    for _ in range(40):  # 12 MB without a line end, fed in slices
        log.feed(junk)
        assert len(log._buf) <= MAX_LINE
    log.feed(b"\n[2026-02-20 10:00:09] The server is fired up and ready to roll!\n")
    log.finish()
    res = log.result()
    assert res["skipped_lines"] == 1 and res["outcome"] == "ready" and res["bytes"] == 12000000 + 65


def test_overlong_line_inside_chunks_is_skipped_once():
    data = b"A" * (3 * MAX_LINE) + b"\n" + "\n".join(rank_lines("TP0")).encode() + b"\n"
    res = parse_bytes(data, chunk=4096).result()
    assert res["skipped_lines"] == 1 and res["ranks"]["TP0"]["kv_tokens"] == 425664


def draft_log_0_5_9(oom=False):
    """0.5.9 EAGLE/MTP start-up: per rank the target runner, then the draft runner on the same GPU (no public log
    shows a whole one; numbers from the issue: 78.5 GB free before the target, 15.3 GB before the draft)."""
    out = ["[2026-02-20 09:59:59] server_args=ServerArgs(model_path='/m', tp_size=2, mem_fraction_static=0.9, "
           "cuda_graph_max_bs=256, speculative_algorithm='EAGLE')"]  # fmt: skip
    for r in ("TP0", "TP1"):
        out += [
            TS % (1, r) + "Load weight begin. avail mem=78.50 GB",
            TS % (2, r) + "Load weight end. elapsed=60.00 s, type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, "
            "avail mem=16.10 GB, mem usage=62.40 GB.",
            TS % (3, r) + "KV Cache is allocated. #tokens: 180000, KV size: 11.80 GB",
            TS % (3, r) + "Memory pool end. avail mem=4.10 GB",
            TS % (4, r) + "Capture cuda graph begin. This can take up to several minutes. avail mem=4.05 GB",
            TS % (9, r) + "Capture cuda graph end. Time elapsed: 5.00 s. mem usage=1.20 GB. avail mem=2.85 GB.",
            TS % (10, r) + "Load weight begin. avail mem=15.30 GB",
            TS % (11, r) + "Load weight end. elapsed=3.00 s, type=DeepseekV3ForCausalLMNextN, dtype=torch.bfloat16, "
            "avail mem=13.10 GB, mem usage=2.20 GB.",
            TS % (12, r) + "KV Cache is allocated. #tokens: 180000, KV size: 0.15 GB",
            TS % (12, r) + "Memory pool end. avail mem=2.60 GB",
            TS % (13, r) + "Capture draft cuda graph begin. This can take up to several minutes. avail mem=2.55 GB",
        ]
    if oom:
        out.append(TS % (14, "TP1") + "Scheduler hit an exception: Traceback (most recent call last):")
        out.append(
            "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 1 has a total "
            "capacity of 79.10 GiB of which 0.80 GiB is free."
        )
    else:
        for r in ("TP0", "TP1"):
            out.append(TS % (20, r) + "Capture draft cuda graph end. Time elapsed: 7.00 s. mem usage=0.40 GB. "
                       "avail mem=2.15 GB.")  # fmt: skip
        out.append("[2026-02-20 10:00:30] The server is fired up and ready to roll!")
    return "\n".join(out) + "\n"


def test_draft_runner_lines_never_overwrite_the_target_figures():
    log = parse_text(draft_log_0_5_9())
    res = log.result()
    for label in ("TP0", "TP1"):
        fig, draft = res["ranks"][label], res["ranks"][label]["draft"]
        assert (fig["weights_gb"], fig["kv_tokens"], fig["kv_size_gb"], fig["avail_after_pool_gb"]) == (
            62.4,
            180000,
            11.8,
            4.1,
        )
        assert fig["cuda_graph_mem_gb"] == 1.2 and draft["cuda_graph_mem_gb"] == 0.4
        assert (draft["weights_gb"], draft["kv_size_gb"], draft["avail_after_pool_gb"]) == (2.2, 0.15, 2.6)
        assert fig["avail_after_graph_gb"] == 2.15  # what is free on the GPU after both runners captured
    assert log.totals()["pre_load_min_gb"] == 78.5  # not the draft's 15.3
    assert res["outcome"] == "ready" and "draft model on 2 ranks" in res["diagnosis"]


def test_draft_capture_oom_advice_uses_the_target_pre_load_memory():
    res = parse_text(draft_log_0_5_9(oom=True)).result()
    sugg = res["suggestion"]
    assert res["outcome"] == "oom_cuda_graph"
    assert sugg["inputs"]["pre_load_free_gib"] == 78.5
    assert 0.5 < sugg["value"] < 0.9 and sugg["value"] == capture_oom_advice(**sugg["inputs"]).mem_fraction_static


def test_callback_summary_shows_target_and_draft_per_rank():
    log = parse_text(draft_log_0_5_9())
    text = render_summary("gpu1", build_result(log, "ready", log.milestones["started"]["t"]))
    lines = text.splitlines()
    tp0 = next(i for i, ln in enumerate(lines) if ln.lstrip().startswith("TP0 "))
    assert "weights 62.40 GB | #tokens 180000 | KV size 11.80 GB" in lines[tp0]
    assert "draft   2.20 GB | #tokens 180000 | KV size 0.15 GB | avail 2.60 GB | graphs 0.40 GB" in lines[tp0 + 1]


def test_memory_unbalanced_raised_is_its_own_outcome():
    text = (
        "[2025-03-09 14:40:47 TP4] Init torch distributed begin.\n"
        "ValueError: The memory capacity is unbalanced. Some GPUs may be occupied by other processes.\n"
    )
    res = parse_text(text).result()
    assert res["outcome"] == "memory_unbalanced" and res["suggestion"]["action"] == "free_gpu_memory"


def test_memory_unbalanced_warning_is_not_a_failure():
    text = (
        "[2026-02-20 10:00:01 TP1] The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
        "min_per_gpu_memory=70.10, local_gpu_memory=94.20, local_gpu_memory * 0.9=84.78\n"
        "[2026-02-20 10:00:30] The server is fired up and ready to roll!\n"
    )
    log = parse_text(text)
    assert log.outcome == "ready" and "unbalanced" in log.unbalanced


def test_errno_98_without_the_address_names_the_configured_port():
    text = (
        "[2026-02-20 10:00:00] server_args=ServerArgs(model_path='/m', tp_size=1, port=30123)\n"
        "[2026-02-20 10:00:30] ERROR:    [Errno 98] Address already in use\n"
    )
    res = parse_text(text).result()
    assert res["outcome"] == "port_in_use" and res["suggestion"]["port"] == 30123


def test_numbered_piecewise_hints_of_0_5_9_mark_the_failure_piecewise():
    # 0.5.9: the piecewise runner raises "Capture cuda graph failed" with its own hint list
    text = (
        "\n".join(rank_lines("TP0"))
        + "\n"
        + (
            "[2026-02-20 10:00:05 TP0] Capture piecewise CUDA graph begin. avail mem=8.55 GB\n"
            "Exception: Capture cuda graph failed: CUDA error: an illegal memory access was encountered\n"
            "Possible solutions:\n"
            "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
            "2. set --piecewise-cuda-graph-max-tokens to a smaller value (e.g., 512)\n"
            "3. disable Piecewise CUDA graph by unset --enable-piecewise-cuda-graph\n"
        )
    )
    res = parse_text(text).result()
    assert res["outcome"] == "crash" and res["suggestion"]["stage"] == "piecewise"
    assert res["suggestion"]["flag"] == "--enable-piecewise-cuda-graph" and res["suggestion"]["remove"]


def test_0_5_23_hybrid_pool_failures_are_kv_budget_problems():
    for line in (
        "RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
        "max_mamba_cache_size=0, mamba_ratio=2, resulting max_num_reqs=0.",
        "ValueError: SWA pool (512 tokens) cannot hold even one request: the prefill admission floor is "
        "sliding_window_size (4096) + page_size (64).",
    ):
        res = parse_text("\n".join(rank_lines("TP0")[:2]) + "\n" + line + "\n").result()
        assert res["outcome"] == "oom_kv_pool", line


def test_0_5_22_capture_end_with_bs_list_and_0_5_21_init_parallel_narrow_the_format():
    text = (
        "[2026-10-01 10:00:00 TP0] Init parallel begin.\n"
        "[2026-10-01 10:00:09 TP0] Capture target decode CUDA graph end. bs=[1, 2, 4, 8], elapsed=3.10 s, "
        "mem usage=0.50 GB, avail mem=7.00 GB.\n"
    )
    assert parse_text(text).window.label == "0.5.22+"


def test_rust_server_lines_of_0_5_22_are_read_through_their_tracing_prefix():
    # the strings are those of sglang/srt/rust_extensions/_server*.so (0.5.22+), the prefix tracing's default format
    base = "\n".join(rank_lines("TP0")) + "\n"
    ok = parse_text(
        base + "2026-10-30T01:04:00.123456Z  INFO sglang::server: The server is fired up and ready to roll!\n"
    )
    assert ok.outcome == "ready"
    bad = parse_text(base + "2026-10-30T01:04:00.123456Z ERROR sglang::server: startup warmup timed out\n").result()
    assert bad["outcome"] == "crash" and "warm-up request failed" in bad["diagnosis"]
