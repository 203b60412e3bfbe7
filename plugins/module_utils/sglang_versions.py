# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""What SGLang prints at start-up and on failure, release by release: one declarative table.

Every entry: ``id``; ``kind`` (which engine handler reads it, or ``failure``); ``starts`` (the literal text the log
message begins with: the engine's prefilter and dispatch are built from these); ``line`` (regex on the log message
that identifies this variant); ``first``/``last`` (first and last release that prints it, None = open);
``meaning``; ``probe`` (regex on the rendered log template in the release's source, used by ``make conformance``);
``source`` (``file:line`` inside the wheel of ``first`` where the template was found).

``make conformance`` (scripts/sglang_conformance.py) downloads every release from 0.4.4 to the newest, renders the
log templates of its source and fails when an entry's window does not match where its probe is found, or when a
release prints a start-up/failure line in a family the table knows but no entry matches. Windows below 0.4.4 come
from the project's earlier reading of 0.1.18-0.4.3 wheels and are not re-checked.
"""

from __future__ import annotations

__metaclass__ = type

import re

LOWEST = (0, 0, 0, 0)
HIGHEST = (99, 0, 0, 0)
OLDEST_CHECKED = "0.4.4"


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


def E(id, kind, starts, line, first, last, meaning, probe=None, source=None):  # noqa: PLR0917
    return {
        "id": id,
        "kind": kind,
        "starts": tuple(starts),
        "line": line,
        "first": first,
        "last": last,
        "meaning": meaning,
        "probe": probe,
        "source": source,
    }


MR = "sglang/srt/model_executor/model_runner.py"
MP = "sglang/srt/mem_cache/memory_pool.py"
CGR = "sglang/srt/model_executor/cuda_graph_runner.py"
# "Capture cuda graph", as a literal or through the device -> name mapping (0.5.2-0.5.13)
CAPTURE_OLD = r"^Capture (cuda graph|\{[^}]*'cuda graph'\}|\{graph_backend\[self\.device\]\})"

# fmt: off
ENTRIES = (
    # -- line prefix (logging format) ---------------------------------------------------------------------------
    E("prefix_hms", "prefix", (), None, "0.2.15", "0.3.3", "[HH:MM:SS TPn] prefix without a date",
      probe='^%H:%M:%S$'),
    E("prefix_date", "prefix", (), None, "0.3.4", None, "[YYYY-MM-DD HH:MM:SS TPn] prefix",
      probe='^%Y-%m-%d %H:%M:%S$'),
    E("prefix_ms", "prefix", (), None, "0.5.6", None, "milliseconds in the prefix (SGLANG_LOG_MS)",
      r"%\(msecs\)", "sglang/srt/utils/common.py"),
    E("gpu_id_tag", "prefix", (), None, None, "0.2.6", "[gpu_id=N] tag inside the message",
      probe='\\[gpu_id=\\{'),
    E("gpu_tag", "prefix", (), None, "0.2.1", "0.2.14", "[gpu=N] tag inside the message",
      probe='\\[gpu=\\{'),
    # -- start-up lines ------------------------------------------------------------------------------------------
    E("server_args", "server_args", ("server_args=",), r"^server_args=", None, None,
      "resolved ServerArgs (mem_fraction_static, tp_size, ...)",
      probe='^server_args=\\{'),
    E("dist_init_nccl", "dist_init", ("Init nccl begin",), r"^Init nccl begin", None, "0.3.5", "distributed init",
      probe='^Init nccl begin'),
    E("dist_init_begin", "dist_init", ("Init torch distributed",), r"^Init torch distributed begin", "0.3.6", "0.5.20",
      "distributed init begins", r"^Init torch distributed begin\.$", "sglang/srt/model_executor/model_runner.py:266"),
    E("dist_init_end_mem", "dist_init", (), r"^Init torch distributed ends\. mem usage=", "0.4.4", "0.5.8.post1",
      "distributed init done, memory it took", r"^Init torch distributed ends\. mem usage=\{",
      "sglang/srt/model_executor/model_runner.py:322"),
    E("dist_init_end_elapsed", "dist_init", (), r"^Init torch distributed ends\. elapsed=", "0.5.9", "0.5.20",
      "distributed init done with its duration", r"^Init torch distributed ends\. elapsed=\{",
      "sglang/srt/model_executor/model_runner.py:850"),
    E("dist_init_parallel", "dist_init", ("Init parallel",), r"^Init parallel (begin|ends)", "0.5.21", None,
      "distributed init (renamed 'Init parallel')", r"^Init parallel (begin\.$|ends\. elapsed=)", None),
    E("load_begin", "load_begin", ("Load weight begin",), r"^Load weight begin\. avail mem=", None, None,
      "free GPU memory before the weights (pre-load)", r"^Load weight begin\. avail mem=\{", MR),
    E("load_end_plain", "load_end", ("Load weight end",), r"^Load weight end\. type=.*dtype=(?!.*mem usage=)",
      None, "0.4.3.post4", "weights loaded, free memory after (no usage figure)",
      probe='^Load weight end\\. type=\\{[^}]*\\}, dtype=\\{[^}]*\\}, avail mem=\\{[^}]*\\} GB\\.?$'),
    E("load_end_usage", "load_end", (), r"^Load weight end\. type=.*dtype=.*mem usage=", "0.4.4",
      "0.5.8.post1", "weights loaded: type, dtype, free memory, memory used",
      r"^Load weight end\. type=\{[^}]*\}, dtype=\{[^}]*\}, avail mem=\{[^}]*\} GB, mem usage=",
      "sglang/srt/model_executor/model_runner.py:402"),
    E("load_end_elapsed_dtype", "load_end", (), r"^Load weight end\. elapsed=.*dtype=", "0.5.9", "0.5.9",
      "weights loaded with elapsed time and dtype", r"^Load weight end\. elapsed=\{[^}]*\} s, type=\{[^}]*\}, dtype=",
      MR),
    E("load_end_elapsed", "load_end", (), r"^Load weight end\. elapsed=(?!.*dtype=)", "0.5.10", None,
      "weights loaded with elapsed time, optional quant=, no dtype=",
      r"^Load weight end\. elapsed=\{[^}]*\} s, type=\{[^}]*\}, \{quant_str", MR),
    E("load_end_committed", "load_end", (), r"^Load weight end\. Committed real weights", "0.5.18", None,
      "overlapped weight loading committed after capture", r"^Load weight end\. Committed real weights",
      "sglang/srt/model_executor/model_runner_components/startup_weight_load.py"),
    E("swa_pool", "swa", ("Use sliding window memory pool",), r"^Use sliding window memory pool", "0.5.7", None,
      "hybrid SWA pool sizes", r"^Use sliding window memory pool", None),
    E("mamba_pool", "mamba", ("Mamba Cache is allocated",), r"^Mamba Cache is allocated", "0.5.2", None,
      "mamba state cache size", r"^Mamba Cache is allocated", None),
    E("kv_no_tokens", "kv", ("KV Cache is allocated", "KV Cache skipped"), r"^KV Cache is allocated\. K size:",
      "0.4.2", "0.4.3.post4", "KV pool without a token count",
      probe='^KV Cache is allocated\\. K size: '),
    E("kv_k_v", "kv", (), r"^KV Cache is allocated\. #tokens: \d+, K size:", "0.4.4", "0.5.12.post1",
      "MHA/GQA KV pool: tokens, K and V size", r"^KV Cache is allocated\. #tokens: \{[^}]*\}, K size: ", MP),
    E("kv_mla", "kv", (), r"^KV Cache is allocated\. #tokens: \d+, KV size:", "0.4.5.post3", "0.5.12.post1",
      "MLA/NSA KV pool: tokens, KV size", r"^KV Cache is allocated\. #tokens: \{[^}]*\}, KV size: ", MP),
    E("kv_dtype", "kv", (), r"^KV Cache is allocated\. dtype:", "0.5.13", None,
      "KV pool with its dtype", r"^(KV Cache|\{cache_name\}) (is allocated|\{[^}]*'is allocated'\})\. dtype: ", MP),
    E("kv_skipped", "kv", (), r"^KV Cache skipped", "0.5.12", None, "no-op KV pool (prefill-only modes)",
      r"^KV Cache skipped", MP),
    E("post_capture_kv", "post_capture", ("Post-capture KV sizing",), r"^Post-capture KV sizing", "0.5.16", None,
      "KV pool sized after capture (SGLANG_ENABLE_POST_CAPTURE_KV_SIZING)", r"^Post-capture KV sizing", None),
    E("pool_end", "pool_end", ("Memory pool end",), r"^Memory pool end\. avail mem=", None, None,
      "free memory after the KV pool", r"^Memory pool end\. avail mem=\{", MR),
    E("capture_bs_list", "capture", ("Capture ",), r"^Capture cuda graph bs \[", "0.4.6.post2", "0.5.13.post1",
      "decode batch sizes to capture", r"^Capture cuda graph bs ", CGR),
    E("capture_begin_avail", "capture", (), r"^Capture cuda graph begin\..*avail mem=", "0.4.4", "0.5.13.post1",
      "decode capture begins, free memory",
      CAPTURE_OLD + r" begin\. This can take up to several minutes\. avail", MR),
    E("capture_end_time_only", "capture", (), r"^Capture cuda graph end\. Time elapsed: [\d.]+ s\.?$", None,
      "0.4.3.post4", "decode capture end with the time only",
      probe='^Capture cuda graph end\\. Time elapsed: \\{[^}]*\\} s\\.?$'),
    E("capture_end_avail_first", "capture", (), r"^Capture cuda graph end\. Time elapsed: .*avail mem=.*mem usage=",
      "0.4.4", "0.4.6", "decode capture end, avail mem before mem usage",
      r"^Capture cuda graph end\. Time elapsed: \{[^}]*\} s\. avail mem=", MR),
    E("capture_end_usage_first", "capture", (), r"^Capture cuda graph end\. Time elapsed: .*mem usage=.*avail mem=",
      "0.4.6.post1", "0.5.13.post1", "decode capture end, mem usage before avail mem",
      CAPTURE_OLD + r" end\. Time elapsed: \{[^}]*\} s\. mem usage=", MR),
    E("capture_piecewise", "capture", (), r"^Capture piecewise CUDA graph (begin|end)", "0.5.6", "0.5.13.post1",
      "piecewise (prefill) graph capture", r"^Capture piecewise CUDA graph (begin|end)", MR),
    E("capture_draft_old", "capture", (), r"^Capture draft (extend )?cuda graph (begin|end)", "0.4.4", "0.5.13.post1",
      "draft model graph capture (speculative decoding)", r"^Capture draft (extend )?cuda graph (begin|end)", None),
    E("capture_frozen_kv_mtp", "capture", (), r"^Capture Frozen-KV MTP draft cuda graph (begin|end)", "0.5.20", None,
      "the frozen-KV MTP draft model's graph capture (no time or memory in the line)",
      r"^Capture Frozen-KV MTP draft cuda graph (begin|end)", None),
    E("capture_end_bs", "capture", (), r"^Capture [a-z ]+CUDA graph end\. bs=", "0.5.22", None,
      "capture end line listing the captured batch sizes",
      r"^Capture \{capture_name\} (CUDA graph|\{graph_backend[^}]*\}) end\. bs=", None),
    E("capture_phase_new", "capture", (), r"^Capture [a-z ]+CUDA graph (begin|end)\. (backend=|elapsed=|step=)",
      "0.5.14", None, "per-phase CUDA graph capture (target/draft, decode/prefill)",
      r"^Capture (\{capture_name\} (CUDA graph|\{graph_backend[^}]*\})|(target|draft|prefill)[a-z ]* CUDA graph) "
      r"(begin|end)\. (backend|step|elapsed)=", None),
    E("capturing_bs", "capturing", ("Capturing batches", "Capturing num tokens"), r"^Capturing batches \(bs=",
      "0.4.8.post1", None, "tqdm capture progress with bs", r"^Capturing batches \(bs=", None),
    E("capturing_avail", "capturing", (), r"^Capturing batches \(avail_mem=", "0.4.4.post1", "0.4.8",
      "tqdm capture progress without bs", r"^Capturing batches \(avail_mem=", CGR),
    E("sched_info_chunked", "sched_info", ("max_total_num_tokens=",), r"^max_total_num_tokens=(?!.*available_gpu_mem)",
      "0.4.2", "0.4.6.post5", "scheduler limits without available_gpu_mem",
      r"^max_total_num_tokens=\{[^}]*\}, chunked_prefill_size=(?!.*available_gpu_mem)(?!.*context_len=\{[^}]*\}, \{)",
      None),
    E("sched_info_gpu_mem", "sched_info", (), r"^max_total_num_tokens=.*available_gpu_mem=", "0.4.7", None,
      "scheduler limits with available_gpu_mem (a conditional after context_len= from 0.5.2)",
      r"^max_total_num_tokens=.*(available_gpu_mem=|context_len=\{[^}]*\}, \{)", None),
    E("swa_pool_total", "swa", ("SWAKVPool mem usage",), r"^SWAKVPool mem usage: [\d.]+ GB, swa size: \d+",
      "0.5.20", None, "hybrid SWA pool: total size, SWA and full-attention token counts",
      r"^SWAKVPool mem usage: \{", None),
    E("dsv4_pool", "swa", ("Initialize DeepSeekV4TokenToKVPool",), r"^Initialize DeepSeekV4TokenToKVPool with",
      "0.5.16", None, "DeepSeek-V4's KV pool: request rows, SWA and compressed-KV token counts (no size in GB)",
      r"^Initialize DeepSeekV4TokenToKVPool with", None),
    E("uvicorn_access", "uvicorn", (), r'^\d{1,3}(?:\.\d{1,3}){3}:\d+ - "[A-Z]+ [^"]*" \d{3}', None, None,
      "uvicorn's access line: the HTTP server answers (uvicorn's own text)",
      probe='call:entrypoints/http_server\\.py::uvicorn\\.(?:run|Server)$'),
    E("uvicorn_running", "uvicorn", ("Uvicorn running", "Application startup complete", "INFO:     Uvicorn running",
                                     "INFO:     Application startup complete"), r"Uvicorn running|startup complete",
      None, None, "HTTP server up (uvicorn's own text)",
      probe='call:entrypoints/http_server\\.py::uvicorn\\.(?:run|Server)$'),
    E("ready", "ready", ("The server is fired up",), r"^The server is fired up and ready to roll!", None, None,
      "warm-up passed, the server serves", r"^The server is fired up and ready to roll!$", None),
    E("port_wait", "port_wait", ("port ",), r"^port \d+ is in use\. Waiting", None, None,
      "transient: an internal port is still in use",
      probe='^port \\{[^}]*\\} is in use\\. Waiting'),
    # -- failures (kind "failure": classified by sglang_logfailure) ----------------------------------------------
    E("traceback", "failure", ("Traceback (most recent call last)",), r"^Traceback \(most recent call last\)", None,
      None, "a traceback starts",
      probe='call:managers/scheduler\\.py::get_exception_traceback$'),
    E("scheduler_exception", "failure", ("Scheduler hit an exception", "TpModelWorkerClient hit an exception",
                                         "DataParallelController hit an exception", "Detokenizer hit an exception"),
      r"hit an exception", None, None, "a scheduler process died with a traceback",
      probe='^Scheduler hit an exception: \\{'),
    E("sm120_smem", "failure", (), r"out of resource: shared memory|OutOfResources", None, None,
      "Triton kernel needs more shared memory than the GPU has (SM120)",
      probe='call:managers/scheduler\\.py::get_exception_traceback$'),
    E("capture_failed", "failure", ("Capture cuda graph failed", "Capture CUDA graph failed", "Capture draft"),
      r"Capture (?:draft (?:extend )?)?(?:cuda|CUDA) graph failed", None, None,
      "decode CUDA-graph capture raised (followed by numbered 'Possible solutions')",
      r"^Capture (cuda|CUDA) graph failed: ", CGR),
    E("prefill_capture_failed", "failure", ("Capture prefill CUDA graph failed",),
      r"Capture prefill CUDA graph failed", "0.5.14", None, "prefill CUDA-graph capture raised",
      r"^Capture prefill CUDA graph failed: ", "sglang/srt/model_executor/runner/prefill_cuda_graph_runner.py"),
    E("prefill_backend_failed", "failure", ("Fail when using backend",),
      r"Fail when using backend: \S+ for prefill runner", "0.5.15", None,
      "prefill runner backend failed, with suggestions", r"^Fail when using backend: \{backend\} for prefill runner",
      "sglang/srt/model_executor/runner_backend_utils/__init__.py"),
    E("piecewise_failed", "failure", ("Piecewise CUDA Graph failed", "Piecewise CUDA graph failed"),
      r"Piecewise CUDA [Gg]raph failed", "0.5.10", "0.5.14", "piecewise graph capture/run failed",
      r"^Piecewise CUDA [Gg]raph failed", "sglang/srt/compilation/piecewise_context_manager.py"),
    E("piecewise_hint", "failure", ("Piecewise CUDA Graph is enabled by default", "To work around this error, add "
                                    "--disable-piecewise-cuda-graph", "2. set --piecewise-cuda-graph-max-tokens",
                                    "3. disable Piecewise CUDA graph"),
      r"^Piecewise CUDA Graph is enabled|--disable-piecewise-cuda-graph to your launch command"
      r"|--piecewise-cuda-graph-max-tokens to a smaller value|disable Piecewise CUDA graph by unset", None, None,
      "hint lines after a piecewise failure (0.5.8/0.5.9: after 'Capture cuda graph failed')",
      probe='Piecewise CUDA Graph is enabled by default|--disable-piecewise-cuda-graph to your launch command'),
    E("graph_hint", "failure", ("Possible solutions", "Possible suggestions"), r"^Possible (solutions|suggestions)",
      None, None, "numbered hints after a capture failure",
      probe='^Possible (solutions|suggestions)'),
    E("kv_not_enough", "failure", ("Not enough memory",), r"Not enough memory\. Please try to increase "
      r"--mem-fraction-static|Not enough memory to allocate KV cache", None, None,
      "KV pool sized to <= 0 tokens", r"Not enough memory\. Please try to increase --mem-fraction-static", None),
    E("kv_no_memory", "failure", ("Loaded weights leave no GPU memory",),
      r"Loaded weights leave no GPU memory for the KV",
      "0.5.14", None, "KV budget <= 0 after the weights, with the minimum fraction",
      r"Loaded weights leave no GPU memory", None),
    E("kv_hybrid_pool", "failure", (), r"Hybrid \(mamba/linear-attention\) state cache is too small to serve",
      "0.5.13", None, "the hybrid mamba state cache cannot serve one request (a KV-budget problem)",
      r"^Hybrid \(mamba/linear-attention\) state cache is too small to serve",
      "sglang/srt/model_executor/model_runner_kv_cache_mixin.py:897"),
    E("kv_swa_pool", "failure", (), r"SWA pool \(\d+ tokens\) cannot hold even one request", "0.5.16", None,
      "the SWA pool cannot hold one request (a KV-budget problem)",
      r"^SWA pool \(\{swa_tokens\} tokens\) cannot hold even one request", None),
    E("kv_profiled", "failure", ("max_total_tokens=",), r"max_total_tokens=\d+ is larger than the profiled value",
      None, None, "requested tokens above the profiled value (a negative value: no KV pool possible)",
      probe='^max_total_tokens=\\{[^}]*\\} is larger than the profiled value'),
    E("unbalanced", "failure", ("The memory capacity is unbalanced",), r"The memory capacity is unbalanced", None,
      None, "GPUs have unequal free memory (another process holds one)",
      r"^The memory capacity is unbalanced\. Some GPUs may be occupied by other processes\.", MR),
    E("port_errno", "failure", ("ERROR:", "[Errno 98]"), r"\[Errno 98\]|address already in use|Address already in use",
      None, None, "the HTTP port is taken (uvicorn), with or without the address tuple",
      probe='call:entrypoints/http_server\\.py::uvicorn\\.(?:run|Server)$'),
    E("port_not_available", "failure", (), r"\S+ at \d+ is not available in \d+ seconds", None, None,
      "an internal port never became free",
      probe='is not available in \\{[^}]*\\} seconds'),
    E("port_internal", "failure", ("Port is already in use",), r"Port is already in use", None, None,
      "an internal port is taken",
      probe='Port is already in use'),
    E("dist_rendezvous", "failure", ("clients joined", "The client socket has timed out"),
      r"waiting for clients\. \d+/\d+ clients joined|client socket has timed out after \d+m?s while trying to connect",
      None, None, "torch.distributed's rendezvous at --dist-init-addr timed out (torch's texts, not SGLang's: the "
      "head's TCPStore 'Timed out after N seconds waiting for clients. J/W clients joined.', another node's 'The "
      "client socket has timed out after Nms while trying to connect to (HOST, PORT).'): a node never joined",
      probe='call:::init_distributed_environment$'),
    E("nccl", "failure", ("NCCL error", "NCCL WARN"), r"NCCL error|nccl\w*Error|DistBackendError|ncclUnhandledCudaError"
      r"|ncclSystemError|ncclInternalError|ncclRemoteError|Connection closed by peer", None, None, "NCCL/gloo failed",
      probe='call:managers/scheduler\\.py::get_exception_traceback$'),
    E("warmup_failed", "failure", ("gRPC server warmup failed", "gRPC warmup failed", "Warmup failed", "warmup failed",
                                   "Server warmup timed out", "startup warmup"),
      r"warmup (?:failed|timed out)|warmup request (?:failed|timed out)", None, None,
      "the start-up warm-up request failed or timed out (gRPC server 0.5.3.post2-0.5.9: 'gRPC server warmup failed'; "
      "the Rust gateway's 'startup warmup failed/timed out' is not in the Python wheel, so it is not probed)",
      probe='[Ww]armup (?:failed|timed out)|warmup request (?:failed|timed out)'),
    E("grpc_warmup_failed", "failure", (), r"gRPC (?:server )?warmup failed", "0.5.3.post2", "0.5.9",
      "the gRPC server's warm-up failed", r"^gRPC server warmup failed", None),
    E("rust_warmup_failed", "failure", ("startup warmup failed", "startup warmup timed out"),
      r"startup warmup (?:failed|timed out)", "0.5.22", None,
      "the Rust HTTP server's start-up warm-up failed or timed out (a string of its compiled extension)",
      "so:startup warmup (failed|timed out)", "sglang/srt/rust_extensions/_server.so"),
    E("nvshmem", "failure", ("NVSHMEM", "nvshmem"),
      r"nvshmem\w* (?:initialization|setup connections) failed|NVSHMEM API called before NVSHMEM initialization"
      r"|nvshmem_internal_init_thread failed|DeepEP error", None, None,
      "NVSHMEM (DeepEP's transport) failed to initialise: the first cause of the children's exits that follow "
      "(NVSHMEM's and DeepEP's own texts, printed without SGLang's prefix)",
      probe='call:token_dispatcher/deepep\\w*\\.py::(?:deep_ep\\.)?Buffer$'),
    E("child_exit", "failure", ("Scheduler or DataParallelController", "Subprocess ", "Exit code:"),
      r"terminated with (?:exit code )?-?\d+|crashed with exit code -?\d+|scheduler died during initialization"
      r"|^Exit code: -?\d+", None, None,
      "a child process (scheduler, DP controller, detokenizer) exited: a consequence, the first error before it is the "
      "cause",
      probe='terminated with \\{|crashed with exit code|scheduler died during initialization'),
    E("oom", "failure", (), r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory", None, None,
      "CUDA out of memory (phase decides which)",
      probe='call:managers/scheduler\\.py::get_exception_traceback$'),
    E("crash", "failure", ("Initialization failed", "Received sigquit", "Child process unexpectedly failed",
                           "SIGQUIT received", "Rank ", "Cannot find any model weights", "No model weights found"),
      r"scheduler is dead|Initialization failed|Received sigquit from a child|Child process unexpectedly failed"
      r"|SIGQUIT received|watchdog timeout|Cannot find any model weights|No model weights found"
      r"|RepositoryNotFoundError|GatedRepoError|LocalEntryNotFoundError|401 Client Error", None, None,
      "a generic crash (refined by a later, more specific line)",
      probe='^Received sigquit from a child process|Child process unexpectedly failed|SIGQUIT received'),
)
# fmt: on

ENTRY = {e["id"]: e for e in ENTRIES}
KINDS = sorted({e["kind"] for e in ENTRIES})
# Failure ids in the order they are tried (the first match names the failure).
FAILURE_ORDER = (
    "sm120_smem", "prefill_capture_failed", "prefill_backend_failed", "piecewise_failed", "capture_failed",
    "piecewise_hint", "graph_hint", "kv_not_enough", "kv_no_memory", "kv_hybrid_pool", "kv_swa_pool",
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
