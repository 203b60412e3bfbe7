# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""What SGLang prints at start-up and on failure, release by release: one declarative table.

Every entry: ``id``; ``kind`` (which engine handler reads it, or ``failure``); ``starts`` (the literal text the log
message begins with: the engine's prefilter and dispatch are built from these); ``line`` (regex on the log message
that identifies this variant); ``first``/``last`` (first and last release whose source has it, None = from the first
release on the package index, 0.1.3 / up to the newest); ``meaning``; ``probe`` (what ``make conformance`` looks for in
a release's source: a regex on its rendered log templates, ``in:PATH::REGEX`` on some files' templates, ``call:REGEX``
on ``path::call.name`` -- the call through which SGLang prints a third party's text: uvicorn's lines, a traceback,
torch's and NCCL's errors -- or ``so:REGEX`` on the compiled Rust server); ``cite`` (``file:line`` in the wheel of the
window's first release and in the wheel of its last release where the probe matches); ``narrows`` (False: the text is
a third party's or a catch-all, so seeing it says nothing about the SGLang release and the engine does not narrow the
format window by it).

``make conformance`` (scripts/sglang_conformance.py) downloads every release on the package index (0.1.3 to the
newest, post releases included), renders the log templates of its source and fails when an entry's window does not
match where its probe is found, when a ``cite`` does not hold the probe in its release, or when a release logs or
raises a start-up/failure line (any case) in a family the table knows but no entry matches.
"""

from __future__ import annotations

__metaclass__ = type

import re

LOWEST = (0, 0, 0, 0)
HIGHEST = (99, 0, 0, 0)


def vkey(version):
    """'0.4.6.post5' -> (0, 4, 6, 5); '0.5.9' -> (0, 5, 9, 0)."""
    m = re.match(r"^(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?$", version)
    if not m:
        raise ValueError("not a release number: %r" % version)
    return tuple(int(x or 0) for x in m.groups())


def vstr(key):
    s = "%d.%d.%d" % key[:3]
    return s + (".post%d" % key[3] if key[3] else "")


def window_label(lo, hi):
    if lo == LOWEST and hi == HIGHEST:
        return "unknown"
    los = vstr(lo) if lo != LOWEST else "0.1.0"
    if hi == HIGHEST:
        return los + "+"
    return los if lo == hi else "%s-%s" % (los, vstr(hi))


def E(id, kind, starts, line, first, last, meaning, *, probe, cite, narrows=True):  # noqa: PLR0917
    return {
        "id": id,
        "kind": kind,
        "starts": tuple(starts),
        "line": line,
        "first": first,
        "last": last,
        "meaning": meaning,
        "probe": probe,
        "cite": tuple(cite),
        "narrows": narrows,
    }


# Texts that reach the log only inside a traceback SGLang prints with get_exception_traceback (torch, NCCL, Triton
# texts): probed by that call, cited at its first and last release, never narrowing the format window.
PRINTED_IN_A_TRACEBACK = {
    "probe": "call:::get_exception_traceback$",
    "cite": ("sglang/srt/managers/router/manager.py:71", "sglang/srt/managers/scheduler.py:6371"),
    "narrows": False,
}


# fmt: off
ENTRIES = (
    # -- line prefix (logging format) ---------------------------------------------------------------------------
    E("prefix_hms", "prefix", (), None, "0.2.14", "0.3.3.post1", "[HH:MM:SS TPn] prefix without a date",
      probe=r"in:sglang/srt/utils\.py::^%H:%M:%S$", cite=("sglang/srt/utils.py:732", "sglang/srt/utils.py:590")),
    E("prefix_date", "prefix", (), None, "0.3.4", None, "[YYYY-MM-DD HH:MM:SS TPn] prefix",
      probe=r"in:sglang/srt/utils(?:/common)?\.py::^%Y-%m-%d %H:%M:%S$",
      cite=("sglang/srt/utils.py:591", "sglang/srt/utils/common.py:2323")),
    E("prefix_ms", "prefix", (), None, "0.5.6", None, "milliseconds in the prefix (SGLANG_LOG_MS)", probe=r"%\(msecs\)",
      cite=("sglang/srt/utils/common.py:1226", "sglang/srt/utils/common.py:2629")),
    E("gpu_id_tag", "prefix", (), None, "0.1.17", "0.2.6", "[gpu_id=N] tag inside the message", probe=r"\[gpu_id=\{",
      cite=("sglang/srt/managers/controller/model_runner.py:240", "sglang/srt/managers/controller/model_runner.py:78")),
    E("gpu_tag", "prefix", (), None, "0.2.7", "0.2.13", "[gpu=N] tag inside the message", probe=r"\[gpu=\{",
      cite=("sglang/srt/model_executor/model_runner.py:93", "sglang/srt/model_executor/model_runner.py:98")),
    # -- start-up lines ------------------------------------------------------------------------------------------
    E("server_args", "server_args", ("server_args=",), "^server_args=", "0.1.24", None,
      "resolved ServerArgs (mem_fraction_static, tp_size, ...)", probe=r"^server_args=\{",
      cite=("sglang/srt/server.py:226", "sglang/srt/entrypoints/engine.py:311")),
    E("dist_init_nccl", "dist_init", ("Init nccl begin",), "^Init nccl begin", "0.1.17", "0.3.3", "distributed init",
      probe="^Init nccl begin",
      cite=("sglang/srt/managers/controller/model_runner.py:242", "sglang/srt/model_executor/model_runner.py:142")),
    E("dist_init_begin", "dist_init", ("Init torch distributed",), "^Init torch distributed begin", "0.3.3.post1",
      "0.5.20", "distributed init begins", probe=r"^Init torch distributed begin\.$",
      cite=("sglang/srt/model_executor/model_runner.py:144", "sglang/srt/distributed/bootstrap.py:81")),
    E("dist_init_end_mem", "dist_init", (), r"^Init torch distributed ends\. mem usage=", "0.4.3.post3", "0.5.8.post1",
      "distributed init done, memory it took", probe=r"^Init torch distributed ends\. mem usage=\{",
      cite=("sglang/srt/model_executor/model_runner.py:319", "sglang/srt/model_executor/model_runner.py:801")),
    E("dist_init_end_elapsed", "dist_init", (), r"^Init torch distributed ends\. elapsed=", "0.5.9", "0.5.20",
      "distributed init done with its duration", probe=r"^Init torch distributed ends\. elapsed=\{",
      cite=("sglang/srt/model_executor/model_runner.py:850", "sglang/srt/distributed/bootstrap.py:164")),
    E("dist_init_parallel", "dist_init", ("Init parallel",), "^Init parallel (begin|ends)", "0.5.21", None,
      "distributed init (renamed 'Init parallel')", probe=r"^Init parallel (begin\.$|ends\. elapsed=)",
      cite=("sglang/srt/distributed/bootstrap.py:118", "sglang/srt/distributed/bootstrap.py:115")),
    E("load_begin", "load_begin", ("Load weight begin",), r"^Load weight begin\. avail mem=", "0.1.17", None,
      "free GPU memory before the weights (pre-load)", probe=r"^Load weight begin\. avail mem=\{",
      cite=("sglang/srt/managers/controller/model_runner.py:269", "sglang/srt/model_executor/model_runner.py:1274")),
    E("load_end_plain", "load_end", ("Load weight end",), r"^Load weight end\. type=.*dtype=(?!.*mem usage=)", "0.1.18",
      "0.4.3.post2", "weights loaded, free memory after (no usage figure)",
      probe=r"^Load weight end\. type=\{[^}]*\}, dtype=\{[^}]*\}, avail mem=\{[^}]*\} GB\.?$",
      cite=("sglang/srt/managers/controller/model_runner.py:332", "sglang/srt/model_executor/model_runner.py:357")),
    E("load_end_usage", "load_end", (), r"^Load weight end\. type=.*dtype=.*mem usage=", "0.4.3.post3", "0.5.8.post1",
      "weights loaded: type, dtype, free memory, memory used",
      probe=r"^Load weight end\. type=\{[^}]*\}, dtype=\{[^}]*\}, avail mem=\{[^}]*\} GB, mem usage=",
      cite=("sglang/srt/model_executor/model_runner.py:396", "sglang/srt/model_executor/model_runner.py:950")),
    E("load_end_elapsed_dtype", "load_end", (), r"^Load weight end\. elapsed=.*dtype=", "0.5.9", "0.5.9",
      "weights loaded with elapsed time and dtype",
      probe=r"^Load weight end\. elapsed=\{[^}]*\} s, type=\{[^}]*\}, dtype=",
      cite=("sglang/srt/model_executor/model_runner.py:1041", "sglang/srt/model_executor/model_runner.py:1041")),
    E("load_end_elapsed", "load_end", (), r"^Load weight end\. elapsed=(?!.*dtype=)", "0.5.10", None,
      "weights loaded with elapsed time, optional quant=, no dtype=",
      probe=r"^Load weight end\. elapsed=\{[^}]*\} s, type=\{[^}]*\}, \{quant_str",
      cite=("sglang/srt/model_executor/model_runner.py:1247", "sglang/srt/model_executor/model_runner.py:1373")),
    E("load_end_committed", "load_end", (), r"^Load weight end\. Committed real weights", "0.5.18", None,
      "overlapped weight loading committed after capture", probe=r"^Load weight end\. Committed real weights",
      cite=("sglang/srt/model_executor/model_runner_components/startup_weight_load.py:531",
            "sglang/srt/model_executor/model_runner_components/startup_weight_load.py:538")),
    E("swa_pool", "swa", ("Use sliding window memory pool", "Use Sliding window memory pool"),
      "^Use [Ss]liding window memory pool", "0.4.9.post3", None,
      "hybrid SWA pool sizes ('Sliding' with a capital S before 0.5.7)", probe="^Use [Ss]liding window memory pool",
      cite=("sglang/srt/model_executor/model_runner.py:1049", "sglang/srt/model_executor/pool_configurator.py:870")),
    E("mamba_pool", "mamba", ("Mamba Cache is allocated",), "^Mamba Cache is allocated", "0.5.2", None,
      "mamba state cache size", probe="^Mamba Cache is allocated",
      cite=("sglang/srt/mem_cache/memory_pool.py:167", "sglang/srt/mem_cache/memory_pool.py:984")),
    E("kv_no_tokens", "kv", ("KV Cache is allocated", "KV Cache skipped"), r"^KV Cache is allocated\. K size:",
      "0.4.1.post6", "0.4.3.post2", "KV pool without a token count", probe=r"^KV Cache is allocated\. K size: ",
      cite=("sglang/srt/mem_cache/memory_pool.py:221", "sglang/srt/mem_cache/memory_pool.py:195")),
    E("kv_k_v", "kv", (), r"^KV Cache is allocated\. #tokens: \d+, K size:", "0.4.3.post3", "0.5.12.post1",
      "MHA/GQA KV pool: tokens, K and V size", probe=r"^KV Cache is allocated\. #tokens: \{[^}]*\}, K size: ",
      cite=("sglang/srt/mem_cache/memory_pool.py:206", "sglang/srt/mem_cache/memory_pool.py:744")),
    E("kv_mla", "kv", (), r"^KV Cache is allocated\. #tokens: \d+, KV size:", "0.4.5.post3", "0.5.12.post1",
      "MLA/NSA KV pool: tokens, KV size", probe=r"^KV Cache is allocated\. #tokens: \{[^}]*\}, KV size: ",
      cite=("sglang/srt/mem_cache/memory_pool.py:453", "sglang/srt/mem_cache/memory_pool.py:750")),
    E("kv_dtype", "kv", (), r"^KV Cache is allocated\. dtype:", "0.5.13", None, "KV pool with its dtype",
      probe=r"^(KV Cache|\{cache_name\}) (is allocated|\{[^}]*'is allocated'\})\. dtype: ",
      cite=("sglang/srt/mem_cache/memory_pool.py:819", "sglang/srt/mem_cache/memory_pool.py:2088")),
    E("kv_skipped", "kv", (), "^KV Cache skipped", "0.5.12", None, "no-op KV pool (prefill-only modes)",
      probe="^KV Cache skipped",
      cite=("sglang/srt/mem_cache/memory_pool.py:1211", "sglang/srt/mem_cache/memory_pool.py:3586")),
    E("post_capture_kv", "post_capture", ("Post-capture KV sizing",), "^Post-capture KV sizing", "0.5.16", None,
      "KV pool sized after capture (SGLANG_ENABLE_POST_CAPTURE_KV_SIZING)", probe="^Post-capture KV sizing",
      cite=("sglang/srt/model_executor/model_runner_components/kv_pool_runtime.py:66",
            "sglang/srt/model_executor/model_runner_components/kv_pool_runtime.py:88")),
    E("pool_end", "pool_end", ("Memory pool end",), r"^Memory pool end\. avail mem=", "0.1.17", None,
      "free memory after the KV pool", probe=r"^Memory pool end\. avail mem=\{",
      cite=("sglang/srt/managers/controller/model_runner.py:337", "sglang/srt/mem_cache/kv_cache_configurator.py:499")),
    E("capture_bs_list", "capture", ("Capture ",), r"^Capture cuda graph bs \[", "0.4.6.post2", "0.5.13.post1",
      "decode batch sizes to capture", probe="^Capture cuda graph bs ",
      cite=("sglang/srt/model_executor/cuda_graph_runner.py:198",
            "sglang/srt/model_executor/cuda_graph_runner.py:532")),
    E("capture_begin_avail", "capture", (), r"^Capture cuda graph begin\..*avail mem=", "0.4.3.post3", "0.5.13.post1",
      "decode capture begins, free memory",
      probe=r"^Capture (cuda graph|\{[^}]*'cuda graph'\}|\{graph_backend\[self\.device\]\}) begin\. This can "
            r"take up to several minutes\. avail",
      cite=("sglang/srt/model_executor/model_runner.py:827", "sglang/srt/model_executor/model_runner.py:2895")),
    E("capture_end_time_only", "capture", (), r"^Capture cuda graph end\. Time elapsed: [\d.]+ s\.?$", "0.4.0",
      "0.4.3.post2", "decode capture end with the time only",
      probe=r"^Capture cuda graph end\. Time elapsed: \{[^}]*\} s\.?$",
      cite=("sglang/srt/model_executor/model_runner.py:625", "sglang/srt/model_executor/model_runner.py:742")),
    E("capture_end_avail_first", "capture", (), r"^Capture cuda graph end\. Time elapsed: .*avail mem=.*mem usage=",
      "0.4.3.post3", "0.4.6", "decode capture end, avail mem before mem usage",
      probe=r"^Capture cuda graph end\. Time elapsed: \{[^}]*\} s\. avail mem=",
      cite=("sglang/srt/model_executor/model_runner.py:832", "sglang/srt/model_executor/model_runner.py:970")),
    E("capture_end_usage_first", "capture", (), r"^Capture cuda graph end\. Time elapsed: .*mem usage=.*avail mem=",
      "0.4.6.post1", "0.5.13.post1", "decode capture end, mem usage before avail mem",
      probe=r"^Capture (cuda graph|\{[^}]*'cuda graph'\}|\{graph_backend\[self\.device\]\}) end\. Time "
            r"elapsed: \{[^}]*\} s\. mem usage=",
      cite=("sglang/srt/model_executor/model_runner.py:977", "sglang/srt/model_executor/model_runner.py:2913")),
    E("capture_piecewise", "capture", (), "^Capture piecewise CUDA graph (begin|end)", "0.5.6", "0.5.13.post1",
      "piecewise (prefill) graph capture", probe="^Capture piecewise CUDA graph (begin|end)",
      cite=("sglang/srt/model_executor/model_runner.py:2490", "sglang/srt/model_executor/model_runner.py:3037")),
    E("capture_draft_old", "capture", (), "^Capture draft (extend )?cuda graph (begin|end)", "0.4.3.post3",
      "0.5.13.post1", "draft model graph capture (speculative decoding)",
      probe="^Capture draft (extend )?cuda graph (begin|end)",
      cite=("sglang/srt/speculative/eagle_worker.py:144", "sglang/srt/speculative/eagle_worker_v2.py:352")),
    E("capture_uno_draft", "capture", (), "^Capture UNO tree draft CUDA graph (begin|end)", "0.5.20", None,
      "the UNO tree draft model's graph capture", probe=r"^Capture UNO tree draft CUDA graph (begin|end)\. ",
      cite=("sglang/srt/speculative/uno_worker_v2.py:169", "sglang/srt/speculative/uno_worker_v2.py:166")),
    E("capture_begin_plain", "capture", (), r"^Capture cuda graph begin\. This can take up to several minutes\.$",
      "0.1.24", "0.4.3.post2", "decode capture begins, without the free memory",
      probe=r"^Capture cuda graph begin\. This can take up to several minutes\.$",
      cite=("sglang/srt/managers/controller/model_runner.py:244", "sglang/srt/model_executor/model_runner.py:740")),
    E("capture_frozen_kv_mtp", "capture", (), "^Capture Frozen-KV MTP draft cuda graph (begin|end)", "0.5.12", None,
      "the frozen-KV MTP draft model's graph capture (no time or memory in the line)",
      probe="^Capture Frozen-KV MTP draft cuda graph (begin|end)",
      cite=("sglang/srt/speculative/frozen_kv_mtp_worker.py:330",
            "sglang/srt/speculative/frozen_kv_mtp_worker_v2.py:396")),
    E("capture_end_bs", "capture", (), r"^Capture [a-z ]+CUDA graph end\. bs=", "0.5.22", None,
      "capture end line listing the captured batch sizes",
      probe=r"^Capture \{capture_name\} (CUDA graph|\{graph_backend[^}]*\}) end\. bs=",
      cite=("sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py:745",
            "sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py:788")),
    E("capture_phase_new", "capture", (), r"^Capture [a-z ]+CUDA graph (begin|end)\. (backend=|elapsed=|step=)",
      "0.5.14", None, "per-phase CUDA graph capture (target/draft, decode/prefill)",
      probe=r"^Capture (\{capture_name\} (CUDA graph|\{graph_backend[^}]*\})|(target|draft|prefill)[a-z ]* "
            r"CUDA graph) (begin|end)\. (backend|step|elapsed)=",
      cite=("sglang/srt/model_executor/model_runner.py:2563",
            "sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py:685")),
    E("capturing_bs", "capturing", ("Capturing batches", "Capturing num tokens"), r"^Capturing batches \(bs=",
      "0.4.8.post1", None, "tqdm capture progress with bs", probe=r"^Capturing batches \(bs=",
      cite=("sglang/srt/model_executor/cuda_graph_runner.py:424",
            "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py:1343")),
    E("capturing_avail", "capturing", (), r"^Capturing batches \(avail_mem=", "0.4.4.post1", "0.4.8",
      "tqdm capture progress without bs", probe=r"^Capturing batches \(avail_mem=",
      cite=("sglang/srt/model_executor/cuda_graph_runner.py:324",
            "sglang/srt/model_executor/cuda_graph_runner.py:424")),
    E("sched_info_plain", "sched_info", (), r"^max_total_num_tokens=\d+, max_prefill_tokens=", "0.1.17", "0.4.1.post7",
      "scheduler limits before chunked prefill was listed",
      probe=r"^max_total_num_tokens=\{[^}]*\}, max_prefill_tokens=",
      cite=("sglang/srt/managers/controller/tp_worker.py:108", "sglang/srt/managers/scheduler.py:283")),
    E("sched_info_chunked", "sched_info", ("max_total_num_tokens=",), "^max_total_num_tokens=(?!.*available_gpu_mem)",
      "0.4.2", "0.4.6.post5", "scheduler limits without available_gpu_mem",
      probe=r"^max_total_num_tokens=\{[^}]*\}, "
            r"chunked_prefill_size=(?!.*available_gpu_mem)(?!.*context_len=\{[^}]*\}, \{)",
      cite=("sglang/srt/managers/scheduler.py:283", "sglang/srt/managers/scheduler.py:334")),
    E("sched_info_gpu_mem", "sched_info", (), "^max_total_num_tokens=.*available_gpu_mem=", "0.4.7", None,
      "scheduler limits with available_gpu_mem (a conditional after context_len= from 0.5.2)",
      probe=r"^max_total_num_tokens=.*(available_gpu_mem=|context_len=\{[^}]*\}, \{)",
      cite=("sglang/srt/managers/scheduler.py:342", "sglang/srt/managers/scheduler.py:1269")),
    E("swa_pool_total", "swa", ("SWAKVPool mem usage",), r"^SWAKVPool mem usage: [\d.]+ GB, swa size: \d+",
      "0.5.3.post3", "0.5.17", "hybrid SWA pool: total size, SWA and full-attention token counts",
      probe=r"^SWAKVPool mem usage: \{",
      cite=("sglang/srt/mem_cache/memory_pool.py:972", "sglang/srt/mem_cache/swa_memory_pool.py:89")),
    E("dsv4_pool", "swa", ("Initialize DeepSeekV4TokenToKVPool",), "^Initialize DeepSeekV4TokenToKVPool with", "0.5.12",
      None, "DeepSeek-V4's KV pool: request rows, SWA and compressed-KV token counts (no size in GB)",
      probe="^Initialize DeepSeekV4TokenToKVPool with",
      cite=("sglang/srt/mem_cache/deepseek_v4_memory_pool.py:389",
            "sglang/srt/mem_cache/deepseek_v4_memory_pool.py:1019")),
    E("uvicorn_access", "uvicorn", (), '^\\d{1,3}(?:\\.\\d{1,3}){3}:\\d+ - "[A-Z]+ [^"]*" \\d{3}', None, None,
      "uvicorn's access line: the HTTP server answers (uvicorn's own text)", probe=r"call:::uvicorn\.(?:run|Server)$",
      cite=("sglang/srt/server.py:133", "sglang/srt/entrypoints/http_server.py:2967"), narrows=False),
    E("uvicorn_running", "uvicorn",
      ("Uvicorn running",
       "Application startup complete",
       "INFO:     Uvicorn running",
       "INFO:     Application startup complete"), "Uvicorn running|startup complete", None, None,
      "HTTP server up (uvicorn's own text)", probe=r"call:::uvicorn\.(?:run|Server)$",
      cite=("sglang/srt/server.py:133", "sglang/srt/entrypoints/http_server.py:2967"), narrows=False),
    E("ready", "ready", ("The server is fired up",), "^The server is fired up and ready to roll!", "0.1.18", None,
      "warm-up passed, the server serves", probe="^The server is fired up and ready to roll!$",
      cite=("sglang/srt/server.py:285", "sglang/srt/entrypoints/http_server.py:2600")),
    E("port_wait", "port_wait", ("port ",), r"^port \d+ is in use\. Waiting", "0.4.9", None,
      "transient: an internal port is still in use", probe=r"^port \{[^}]*\} is in use\. Waiting",
      cite=("sglang/srt/utils.py:582", "sglang/srt/utils/network.py:97")),
    # -- failures (kind "failure": classified by sglang_logfailure) ----------------------------------------------
    E("traceback", "failure", ("Traceback (most recent call last)",), r"^Traceback \(most recent call last\)", None,
      None, "a traceback starts", **PRINTED_IN_A_TRACEBACK),
    E("scheduler_exception", "failure",
      ("Scheduler hit an exception",
       "TpModelWorkerClient hit an exception",
       "DataParallelController hit an exception",
       "Detokenizer hit an exception"), "hit an exception", "0.3.6.post3", None,
      "a scheduler process died with a traceback", probe=r"^Scheduler hit an exception: \{",
      cite=("sglang/srt/managers/scheduler.py:1443", "sglang/srt/managers/scheduler.py:6372"), narrows=False),
    E("sm120_smem", "failure", (), "out of resource: shared memory|OutOfResources", None, None,
      "Triton kernel needs more shared memory than the GPU has (SM120)", **PRINTED_IN_A_TRACEBACK),
    E("capture_failed", "failure",
      ("Capture cuda graph failed", "Capture CUDA graph failed", "Capture draft", "Capture frozen-KV MTP"),
      r"Capture (?:[\w-]+ ){0,3}?(?:cuda|CUDA) graph failed", "0.1.22", None,
      "decode (or draft, frozen-KV MTP) CUDA-graph capture raised (followed by numbered 'Possible solutions')",
      probe=r"^Capture (?!prefill)(?:[\w-]+ ){0,3}?(cuda|CUDA) graph failed:? ",
      cite=("sglang/srt/managers/controller/model_runner.py:253",
            "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py:603")),
    E("prefill_capture_failed", "failure", ("Capture prefill CUDA graph failed",), "Capture prefill CUDA graph failed",
      "0.5.14", None, "prefill CUDA-graph capture raised", probe="^Capture prefill CUDA graph failed: ",
      cite=("sglang/srt/model_executor/runner/prefill_cuda_graph_runner.py:228",
            "sglang/srt/model_executor/runner/prefill_cuda_graph_runner.py:521")),
    E("prefill_backend_failed", "failure", ("Fail when using backend",),
      r"Fail when using backend: \S+ for prefill runner", "0.5.15", None,
      "prefill runner backend failed, with suggestions",
      probe=r"^Fail when using backend: \{backend\} for prefill runner",
      cite=("sglang/srt/model_executor/runner_backend_utils/__init__.py:24",
            "sglang/srt/model_executor/runner_backend_utils/__init__.py:24")),
    E("piecewise_failed", "failure", ("Piecewise CUDA Graph failed", "Piecewise CUDA graph failed"),
      "Piecewise CUDA [Gg]raph failed", "0.5.10", "0.5.14", "piecewise graph capture/run failed",
      probe="^Piecewise CUDA [Gg]raph failed",
      cite=("sglang/srt/compilation/piecewise_context_manager.py:49",
            "sglang/srt/model_executor/runner_backend_utils/tc_piecewise_cuda_graph/context_manager.py:105")),
    E("piecewise_hint", "failure",
      ("Piecewise CUDA Graph is enabled by default",
       "To work around this error, add --disable-piecewise-cuda-graph",
       "2. set --piecewise-cuda-graph-max-tokens",
       "3. disable Piecewise CUDA graph"),
      "^Piecewise CUDA Graph is enabled|--disable-piecewise-cuda-graph to your launch command"
      "|--piecewise-cuda-graph-max-tokens to a smaller value|disable Piecewise CUDA graph by unset", "0.5.10",
      "0.5.13.post1", "hint lines after a piecewise failure (0.5.8/0.5.9: after 'Capture cuda graph failed')",
      probe="Piecewise CUDA Graph is enabled by default|--disable-piecewise-cuda-graph to your launch command",
      cite=("sglang/srt/compilation/piecewise_context_manager.py:125",
            "sglang/srt/compilation/piecewise_context_manager.py:135")),
    E("graph_hint", "failure", ("Possible solutions", "Possible suggestions"), "^Possible (solutions|suggestions)",
      "0.4.7", None, "numbered hints after a capture failure", probe="^Possible (solutions|suggestions)",
      cite=("sglang/srt/model_executor/cuda_graph_runner.py:662",
            "sglang/srt/model_executor/runner_backend_utils/__init__.py:15")),
    E("kv_not_enough", "failure", ("Not enough memory",),
      r"Not enough memory\. Please try to increase --mem-fraction-static|Not enough memory to allocate KV cache",
      "0.1.18", None, "KV pool sized to <= 0 tokens",
      probe=r"Not enough memory\. Please try to increase --mem-fraction-static",
      cite=("sglang/srt/managers/controller/model_runner.py:356", "sglang/srt/model_executor/pool_configurator.py:96")),
    E("kv_no_memory", "failure", ("Loaded weights leave no GPU memory",),
      "Loaded weights leave no GPU memory for the KV", "0.5.14", None,
      "KV budget <= 0 after the weights, with the minimum fraction", probe="Loaded weights leave no GPU memory",
      cite=("sglang/srt/model_executor/model_runner_kv_cache_mixin.py:111",
            "sglang/srt/mem_cache/kv_cache_configurator.py:3051")),
    E("kv_hybrid_pool", "failure", (), r"Hybrid \(mamba/linear-attention\) state cache is too small to serve", "0.5.13",
      None, "the hybrid mamba state cache cannot serve one request (a KV-budget problem)",
      probe=r"^Hybrid \(mamba/linear-attention\) state cache is too small to serve",
      cite=("sglang/srt/model_executor/model_runner_kv_cache_mixin.py:897",
            "sglang/srt/mem_cache/kv_cache_configurator.py:3154")),
    E("kv_swa_cap", "failure", (), r"SWA pool cap \(\d+ tokens, [\d.]+ GiB\) leaves no room for the full KV pool",
      "0.5.14", None, "the SWA pool's cap leaves no room for the full-attention pool (a KV-budget problem)",
      probe=r"^SWA pool cap \(\{swa_tokens\} tokens",
      cite=("sglang/srt/model_executor/pool_configurator.py:414",
            "sglang/srt/model_executor/pool_configurator.py:1026")),
    E("kv_swa_pool", "failure", (), r"SWA pool \(\d+ tokens\) cannot hold even one request", "0.5.16", None,
      "the SWA pool cannot hold one request (a KV-budget problem)",
      probe=r"^SWA pool \(\{swa_tokens\} tokens\) cannot hold even one request",
      cite=("sglang/srt/model_executor/pool_configurator.py:432",
            "sglang/srt/model_executor/pool_configurator.py:212")),
    E("kv_profiled", "failure", ("max_total_tokens=",), r"max_total_tokens=\d+ is larger than the profiled value",
      "0.2.8", None, "requested tokens above the profiled value (a negative value: no KV pool possible)",
      probe=r"^max_total_tokens=\{[^}]*\} is larger than the profiled value",
      cite=("sglang/srt/model_executor/model_runner.py:218", "sglang/srt/mem_cache/kv_cache_configurator.py:3102")),
    E("unbalanced", "failure", ("The memory capacity is unbalanced",), "The memory capacity is unbalanced", "0.1.17",
      None, "GPUs have unequal free memory (another process holds one)",
      probe=r"^The memory capacity is unbalanced\. Some GPUs may be occupied by other processes\.",
      cite=("sglang/srt/managers/controller/model_runner.py:260", "sglang/srt/distributed/bootstrap.py:445")),
    E("port_errno", "failure", ("ERROR:", "[Errno 98]"), r"\[Errno 98\]|address already in use|Address already in use",
      None, None, "the HTTP port is taken (uvicorn), with or without the address tuple",
      probe=r"call:::uvicorn\.(?:run|Server)$",
      cite=("sglang/srt/server.py:133", "sglang/srt/entrypoints/http_server.py:2967"), narrows=False),
    E("port_not_available", "failure", (), r"\S+ at \d+ is not available in \d+ seconds", "0.4.9", None,
      "an internal port never became free", probe=r"is not available in \{[^}]*\} seconds",
      cite=("sglang/srt/utils.py:588", "sglang/srt/utils/network.py:103")),
    E("port_internal", "failure", ("Port is already in use",), "Port is already in use", "0.5.5", None,
      "an internal port is taken", probe="Port is already in use",
      cite=("sglang/srt/server_args.py:4127", "sglang/srt/server_args.py:886")),
    E("dist_rendezvous", "failure", ("clients joined", "The client socket has timed out"),
      r"waiting for clients\. \d+/\d+ clients joined|client socket has timed out after \d+m?s while trying to connect",
      "0.1.17", None,
      "torch.distributed's rendezvous at --dist-init-addr timed out (torch's texts, not SGLang's: the head's "
      "TCPStore 'Timed out after N seconds waiting for clients. J/W clients joined.', another node's 'The "
      "client socket has timed out after Nms while trying to connect to (HOST, PORT).'): a node never joined",
      probe="call:::init_distributed_environment$",
      cite=("sglang/srt/managers/controller/model_runner.py:244", "sglang/srt/disaggregation/encoder/server.py:588"),
      narrows=False),
    E("nccl", "failure", ("NCCL error", "NCCL WARN"),
      r"NCCL error|nccl\w*Error|DistBackendError|ncclUnhandledCudaError|ncclSystemError|ncclInternalError"
      "|ncclRemoteError|Connection closed by peer", None, None, "NCCL/gloo failed",
      **PRINTED_IN_A_TRACEBACK),
    E("warmup_failed", "failure",
      ("gRPC server warmup failed",
       "gRPC warmup failed",
       "Warmup failed",
       "warmup failed",
       "Server warmup timed out",
       "startup warmup"), "warmup (?:failed|timed out)|warmup request (?:failed|timed out)", "0.5.13", None,
      "the start-up warm-up request failed or timed out (gRPC server 0.5.3.post2-0.5.9: 'gRPC server warmup "
      "failed'; the Rust gateway's 'startup warmup failed/timed out' is not in the Python wheel, so it is not "
      "probed)", probe="^Disaggregation warmup failed",
      cite=("sglang/srt/entrypoints/http_server.py:2056", "sglang/srt/entrypoints/http_server.py:2523"), narrows=False),
    E("grpc_warmup_failed", "failure", (), "gRPC (?:server )?warmup failed", "0.5.3.post2", "0.5.9",
      "the gRPC server's warm-up failed", probe="^gRPC server warmup failed",
      cite=("sglang/srt/entrypoints/grpc_server.py:974", "sglang/srt/entrypoints/grpc_server.py:1054")),
    E("rust_warmup_failed", "failure", ("startup warmup failed", "startup warmup timed out"),
      "startup warmup (?:failed|timed out)", "0.5.22", None,
      "the Rust HTTP server's start-up warm-up failed or timed out (a string of its compiled extension)",
      probe="so:startup warmup (failed|timed out)",
      cite=("sglang/srt/rust_extensions/_server.so:0", "sglang/srt/rust_extensions/_server.so:0")),
    E("nvshmem", "failure", ("NVSHMEM", "nvshmem"),
      r"nvshmem\w* (?:initialization|setup connections) failed|NVSHMEM API called before NVSHMEM initialization"
      "|nvshmem_internal_init_thread failed|DeepEP error", "0.4.10.post2", None,
      "NVSHMEM (DeepEP's transport) failed to initialise: the first cause of the children's exits that follow "
      "(NVSHMEM's and DeepEP's own texts, printed without SGLang's prefix)",
      probe=r"call:token_dispatcher/deepep\w*\.py::(?:deep_ep\.)?Buffer$",
      cite=("sglang/srt/layers/moe/token_dispatcher/deepep.py:167",
            "sglang/srt/layers/moe/token_dispatcher/deepep.py:304"), narrows=False),
    E("child_exit", "failure", ("Scheduler or DataParallelController", "Subprocess ", "Exit code:"),
      r"terminated with (?:exit code )?-?\d+|crashed with exit code -?\d+|scheduler died during initialization"
      r"|^Exit code: -?\d+", "0.4.1.post7", None,
      "a child process (scheduler, DP controller, detokenizer) exited: a consequence, the first error before "
      "it is the cause", probe=r"terminated with \{|crashed with exit code|scheduler died during initialization",
      cite=("sglang/srt/entrypoints/engine.py:408", "sglang/srt/entrypoints/engine.py:1024"), narrows=False),
    E("oom", "failure", (), "CUDA out of memory|OutOfMemoryError|CUDA error: out of memory", None, None,
      "CUDA out of memory (phase decides which)", **PRINTED_IN_A_TRACEBACK),
    E("crash", "failure",
      ("Initialization failed",
       "Received sigquit",
       "Child process unexpectedly failed",
       "SIGQUIT received",
       "Rank ",
       "Cannot find any model weights",
       "No model weights found"),
      "scheduler is dead|Initialization failed|Received sigquit from a child|Child process unexpectedly failed"
      "|SIGQUIT received|watchdog timeout|Cannot find any model weights|No model weights found"
      "|RepositoryNotFoundError|GatedRepoError|LocalEntryNotFoundError|401 Client Error", "0.4.3.post3", None,
      "a generic crash (refined by a later, more specific line)",
      probe="^Received sigquit from a child process|Child process unexpectedly failed|SIGQUIT received",
      cite=("sglang/srt/entrypoints/engine.py:387", "sglang/srt/entrypoints/engine.py:1978"), narrows=False),
)
# fmt: on

ENTRY = {e["id"]: e for e in ENTRIES}
KINDS = sorted({e["kind"] for e in ENTRIES})
# Failure ids in the order they are tried (the first match names the failure).
FAILURE_ORDER = (
    "sm120_smem", "prefill_capture_failed", "prefill_backend_failed", "piecewise_failed", "capture_failed",
    "piecewise_hint", "graph_hint", "kv_not_enough", "kv_no_memory", "kv_hybrid_pool", "kv_swa_cap", "kv_swa_pool",
    "kv_profiled", "unbalanced",
    "port_errno", "port_not_available", "port_internal", "dist_rendezvous", "nvshmem", "nccl", "grpc_warmup_failed",
    "rust_warmup_failed",
    "warmup_failed", "oom",
    "scheduler_exception",
    "traceback", "child_exit", "crash",
)  # fmt: skip
# Unprefixed lines worth reading (tracebacks, hints, uvicorn before 0.3.6): the engine's second prefilter pass.
LINE_STARTS = (
    "Traceback", "Exception", "RuntimeError", "ValueError", "AssertionError", "torch.", "triton.", "ERROR:",
    "INFO:     Uvicorn", "INFO:     Application", "Capture", "Capturing", "Piecewise", "To work around",
    "Possible", "Fail when", "The server is fired", "Not enough memory", "Loaded weights", "[Errno 98]",
    "OSError", "NCCL", "max_total_tokens=", "INFO:", "INFO ", "WARNING:", "WARNING ", "ERROR ", '  File "', ' File "',
    "NVSHMEM", "nvshmem", "Exit code:",
)  # fmt: skip
# A logging format that wraps SGLang's message after its "[time RANK] " prefix or at the line start: uvicorn's
# "INFO:     " and the "LEVEL file.py:N: " of a root logger another library configured (aiter on ROCm:
# "[2026-02-26 05:19:58] WARNING server_args.py:1245: ..."). The engine reads the message after it.
LEVEL_PREFIX = r"^(?:INFO|WARNING|ERROR|DEBUG|CRITICAL)(?: [\w.-]+:\d+: |:[ \t]+)"
# NVSHMEM's own error lines start with its source path ("/sgl-workspace/nvshmem/src/host/init/init.cu:1007: ...").
_NVSHMEM_PATH = rb"/[\w./+-]{0,160}?nvshmem[\w./+-]*:"
_EXC_LINE = rb"[A-Za-z_][\w.]*(?:Error|Exception|Interrupt)\b"
# the Rust server (0.5.22+) logs through tracing: "2026-10-30T01:04:00.123Z  INFO sglang::server: message"
TRACING_PREFIX = rb"\d{4}-\d\d-\d\dT[\d:.]+Z?\s+[A-Z]{4,5}\s+(?:[\w:.-]+: )?"

_KIND_START = {}
for _e in ENTRIES:
    for _s in _e["starts"]:
        if _e["kind"] != "failure":
            _KIND_START.setdefault(_s, _e["kind"])
_KIND_RE = re.compile("|".join(re.escape(s) for s in sorted(_KIND_START, key=len, reverse=True)))
_LINE_RX = {e["id"]: re.compile(e["line"]) for e in ENTRIES if e["line"]}
_FAILURE_RE = re.compile("|".join("(?P<%s>%s)" % (fid, ENTRY[fid]["line"]) for fid in FAILURE_ORDER))
_BY_KIND = {}
for _e in ENTRIES:
    if _e["line"]:
        _BY_KIND.setdefault(_e["kind"], []).append(_e)


def kind_of(msg):
    """The handler kind for a log message (by the literal it starts with), or None."""
    m = _KIND_RE.match(msg)
    return _KIND_START[m.group(0)] if m else None


def match(kind, msg):
    """The first entry of ``kind`` whose pattern matches ``msg`` (version windows are narrowed by it)."""
    for e in _BY_KIND.get(kind, ()):
        if _LINE_RX[e["id"]].search(msg):
            return e
    return None


def failure_of(msg, fid=None):
    """The failure id a line carries (the first in FAILURE_ORDER), or whether it carries ``fid``."""
    if fid is not None:
        return fid if _LINE_RX[fid].search(msg) else None
    m = _FAILURE_RE.search(msg)
    return m.lastgroup if m else None


def _trie(words):
    groups = {}
    for w in sorted(set(words)):
        groups.setdefault(w[:1], []).append(w[1:])
    parts = []
    for head, rest in sorted(groups.items()):
        alts = sorted(set(rest), key=len, reverse=True)
        tail = re.escape(alts[0]) if len(alts) == 1 else b"(?:" + b"|".join(re.escape(a) for a in alts) + b")"
        parts.append(re.escape(head) + tail)
    return b"(?:" + b"|".join(parts) + b")"


def _all_starts():
    out = set()
    for e in ENTRIES:
        out.update(e["starts"])
    return out


def starts_regex():
    """Bytes regex (a trie of literals) matching every message start the table knows."""
    return _trie([s.encode() for s in _all_starts()])


def line_starts_regex(generic_exceptions=True):
    """Bytes regex for lines worth reading: table starts, LINE_STARTS and (unprefixed lines) any exception line."""
    trie = _trie([s.encode() for s in _all_starts() | set(LINE_STARTS)])
    if not generic_exceptions:
        return trie
    return b"(?:" + trie + b"|" + _EXC_LINE + b"|" + TRACING_PREFIX + trie + b"|" + _NVSHMEM_PATH + b")"


def flag_in(flag, window, flags=None):
    """Whether ``flag`` exists in every release of ``window`` (FLAGS below); unknown flags count as present."""
    for name, first, last in flags or FLAGS:
        if name == flag:
            return window.within(first, last)
    return True


# Launch flags whose existence depends on the release (checked by make conformance against server_args.py).
FLAGS = (
    ("--cuda-graph-max-bs", None, "0.5.19"),
    ("--cuda-graph-max-bs-decode", "0.5.14", None),
    ("--disable-piecewise-cuda-graph", "0.5.10", "0.5.19"),
    ("--enable-piecewise-cuda-graph", "0.5.3.post2", "0.5.13.post1"),
    ("--cuda-graph-backend-prefill", "0.5.14", None),
)
