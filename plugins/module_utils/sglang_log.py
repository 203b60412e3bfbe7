# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""SGLang start-up log grammar: the one place that knows what SGLang prints while it starts.

Everything that reads an SGLang log (the ``sglang_server`` module, the ``sglang_progress`` callback and
``bin/sglang-doctor``) goes through this file; nothing else holds a regex for SGLang's output.

Public API
----------
``StartupLog()``                 incremental parser. ``feed(chunk, now=None)`` takes ``str`` or ``bytes`` in any
                                 slicing, ``finish()`` flushes an unfinished last line, ``result()`` returns the
                                 result dict (shape in ``StartupLog.result``). Attributes ``outcome``, ``phase``,
                                 ``ready``, ``failure`` and ``is_terminal(now)`` for waiting loops.
``parse_text(text)``            one-shot helper: feed + finish, returns the ``StartupLog``.
``parse_server_args(text)``     resolved values from a ``server_args=ServerArgs(...)`` line.
``OUTCOMES``, ``PHASES``, ``MILESTONES``, ``RANK_FIELDS``   the vocabularies.

Sources for every pattern: docs/readiness.md and the project's SGLang reference (section a: log lines by version,
section b: failure texts). All sizes SGLang prints as "GB" are GiB (bytes / 2**30); we keep its numbers as printed.
"""

from __future__ import annotations

__metaclass__ = type

import codecs
import math
import re
import time
from collections import deque

PHASES = (
    "started",
    "weights_loading",
    "weights_loaded",
    "kv_allocated",
    "memory_pool_ready",
    "cuda_graph_capturing",
    "cuda_graph_captured",
    "http_up",
    "ready",
)
MILESTONES = PHASES
OUTCOMES = (
    "ready",
    "oom_cuda_graph",
    "oom_kv_pool",
    "oom_weights",
    "sm120_shared_memory",
    "port_in_use",
    "nccl_error",
    "crash",
    "stalled",
    "incomplete",
)
FAILURE_OUTCOMES = OUTCOMES[1:9]
RANK_FIELDS = (
    "weights_gb",
    "avail_after_weights_gb",
    "kv_tokens",
    "k_size_gb",
    "v_size_gb",
    "kv_size_gb",
    "avail_after_pool_gb",
    "cuda_graph_seconds",
    "cuda_graph_mem_gb",
    "avail_after_graph_gb",
)
_PHASE_INDEX = {p: i for i, p in enumerate(PHASES)}

# Release order of the SGLang versions whose logs we know (see the reference's wheel list).
KNOWN_VERSIONS = (
    "0.1.18 0.2.0 0.2.7 0.2.15 0.3.0 0.3.4 0.3.6 0.4.0 0.4.1 0.4.2 0.4.3 0.4.4 0.4.5 0.4.6 0.4.7 0.4.8 0.4.9 0.4.10 "
    "0.5.1 0.5.2 0.5.3 0.5.4 0.5.5 0.5.6 0.5.7 0.5.8 0.5.9 0.5.10 0.5.12 0.5.13 0.5.14 0.5.16 0.5.18 0.5.20 0.5.23"
).split()
_INF = (99, 0, 0)


def _v(text):
    return tuple(int(p) for p in text.split("."))


# ---------------------------------------------------------------------------------------------------------------
# Line grammar
# ---------------------------------------------------------------------------------------------------------------
# "[2026-02-18 23:58:16.123 DP0 TP4] msg", "[17:43:23 TP6] msg", "[2025-03-08 12:29:29] INFO:     Started ..."
# Searched, not anchored: journald ("Feb 18 host python[812]: ") and docker ("sglang-1  | ") prefixes come first.
_PREFIX_RE = re.compile(
    r"\[(?:(?P<date>\d{4}-\d{2}-\d{2}) )?(?P<time>\d{2}:\d{2}:\d{2})(?:[.,](?P<ms>\d{1,6}))?"
    r"(?P<rank>(?: [A-Z][A-Z_]*\d+)*)\] ?"
)
_GPU_TAG_RE = re.compile(r"\[(?P<label>gpu(?:_id)?=\d+)\] ?")
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_UNITS = {"B": 1.0 / 2**30, "KiB": 1.0 / 2**20, "MiB": 1.0 / 1024, "GiB": 1.0, "GB": 1.0, "TiB": 1024.0}

_KEY_CACHE = {}


def _num(msg, key, cast=float):
    """Number following ``key`` (by key, not position); None when absent. 'V size:' never matches 'KV size:'."""
    rx = _KEY_CACHE.get(key)
    if rx is None:
        guard = r"(?<![\w])" if key[0].isalnum() or key[0] == "#" else ""
        rx = _KEY_CACHE[key] = re.compile(guard + re.escape(key) + r"\s*(-?\d+(?:\.\d+)?)")
    m = rx.search(msg)
    if not m:
        return None
    try:
        return cast(m.group(1)) if cast is not float else float(m.group(1))
    except ValueError:
        return None


def _size(msg, rx):
    m = rx.search(msg)
    if not m:
        return None
    return float(m.group(1)) * _UNITS.get(m.group(2), 1.0)


_CAPTURE_RE = re.compile(r"Capture (?P<kind>(?:[a-z]+ ){0,3}?)(?:cuda|CUDA|cpu|npu) graph (?P<ev>begin|end)\b")
_CAPTURE_BS_RE = re.compile(r"Capture cuda graph bs \[(?P<bs>[\d,\s]*)\]")
_BS_LIST_RE = re.compile(r"\bbs=\[(?P<bs>[\d,\s]*)\]")
_CAPTURING_RE = re.compile(r"Capturing batches \((?:bs=(?P<bs>\d+) )?avail_mem=(?P<avail>[\d.]+) ?GB\)")
_TQDM_COUNT_RE = re.compile(r"\|\s*(?P<n>\d+)/(?P<total>\d+) \[")
_CAPTURING_TOKENS_RE = re.compile(r"Capturing num tokens \(num_tokens=(?P<n>\d+) avail_mem=(?P<avail>[\d.]+) ?GB\)")
_UVICORN_RE = re.compile(r"Uvicorn running on (?P<url>\S+)")
_URL_PORT_RE = re.compile(r":(\d+)/?$")
_TYPE_RE = re.compile(r"\btype=([\w.]+)")
_DTYPE_RE = re.compile(r"\bdtype[=:]\s*([\w.]+)")
_QUANT_RE = re.compile(r"\bquant=([^,]+(?:, (?:fmt|bits|group_size)=[^,]+)*)")
_SWA_RE = re.compile(r"full_layer_tokens=(\d+)")

READY_TEXT = "The server is fired up and ready to roll!"

# Failure texts (reference section b).
_TRIED_RE = re.compile(r"Tried to allocate (\d+(?:\.\d+)?) ?(GiB|MiB|KiB|B)\b")
_FREE_RE = re.compile(r"of which (\d+(?:\.\d+)?) ?(GiB|MiB|KiB|B) (?:is )?free")
_TOTAL_RE = re.compile(r"total capac(?:i)?ty of (\d+(?:\.\d+)?) ?(GiB|MiB)")
_GPU_IDX_RE = re.compile(r"\bGPU (\d+) has a total")
_OOM_RE = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory")
_SMEM_RE = re.compile(r"out of resource: shared memory|OutOfResources")
_SMEM_NUM_RE = re.compile(r"Required: (\d+), Hardware limit: (\d+)")
_GRAPH_FAIL_RE = re.compile(
    r"Capture (?:[a-z]+ )*(?:cuda|CUDA) graph failed|graph failed:|Piecewise CUDA Graph failed"
    r"|Fail when using backend: \S+ for prefill runner"
)
_KV_FAIL_RE = re.compile(
    r"Not enough memory\. Please try to increase --mem-fraction-static|Loaded weights leave no GPU memory for the KV"
)
_KV_ABOVE_RE = re.compile(r"Raise --mem-fraction-static above (\d+(?:\.\d+)?)")
_KV_PROFILED_RE = re.compile(r"max_total_tokens=(\d+) is larger than the profiled value (-?\d+)")
_PORT_RES = (
    re.compile(r"\[Errno 98\][^\n]*?\('([^']*)', (\d+)\)"),
    re.compile(r"address already in use[^\n]*?\('([^']*)', (\d+)\)"),
    re.compile(r"()\S+ at (\d+) is not available in \d+ seconds"),
)
_PORT_GENERIC_RE = re.compile(r"Port is already in use|address already in use|\[Errno 98\]")
_NCCL_RE = re.compile(
    r"NCCL error|nccl\w*Error|DistBackendError|ncclUnhandledCudaError|ncclSystemError|ncclInternalError"
    r"|ncclRemoteError|Connection closed by peer"
)
_CRASH_STRONG_RE = re.compile(
    r"hit an exception|scheduler is dead|Initialization failed|Received sigquit from a child"
    r"|Child process unexpectedly failed|SIGQUIT received|watchdog timeout|Cannot find any model weights"
    r"|No model weights found|RepositoryNotFoundError|GatedRepoError|LocalEntryNotFoundError|401 Client Error"
)
_EXC_LINE_RE = re.compile(r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt)\b\s*[:(]")
_PORT_WAIT_RE = re.compile(r"port (\d+) is in use\. Waiting")

# server_args=ServerArgs(k=v, ...) (0.3-0.5.x) or a dict-like repr (0.5.23 _server_args_for_logging).
_SA_KEYS = {
    "mem_fraction_static": float,
    "tp_size": int,
    "dp_size": int,
    "pp_size": int,
    "ep_size": int,
    "nnodes": int,
    "cuda_graph_max_bs": int,
    "cuda_graph_max_bs_decode": int,
    "chunked_prefill_size": int,
    "max_total_tokens": int,
    "port": int,
    "disable_cuda_graph": bool,
    "disable_decode_cuda_graph": bool,
    "enable_dp_attention": bool,
    "enable_piecewise_cuda_graph": bool,
    "disable_piecewise_cuda_graph": bool,
    "skip_server_warmup": bool,
    "kv_cache_dtype": str,
    "model_path": str,
    "host": str,
    "cuda_graph_backend_decode": str,
}
_SA_RE = {k: re.compile(r"(?<![\w])['\"]?" + k + r"['\"]?\s*[=:]\s*('[^']*'|\"[^\"]*\"|[^,)\s}]+)") for k in _SA_KEYS}


def parse_server_args(text):
    """Resolved values from a ``server_args=`` line; missing or ``None`` values are left out."""
    out = {}
    for key, typ in _SA_KEYS.items():
        m = _SA_RE[key].search(text)
        if not m:
            continue
        raw = m.group(1).strip("'\"")
        if raw in ("None", "null", ""):
            continue
        try:
            if typ is bool:
                out[key] = raw in ("True", "true", "1")
            else:
                out[key] = typ(raw)
        except ValueError:
            continue
    return out


# ---------------------------------------------------------------------------------------------------------------
# Format detection: every recognised line narrows the version window [lo, hi].
# ---------------------------------------------------------------------------------------------------------------
def _fmt_window(lo, hi):
    if lo == (0, 0, 0) and hi == _INF:
        return "unknown"
    los = ".".join(str(x) for x in lo)
    if hi == _INF:
        return los + "+"
    his = ".".join(str(x) for x in hi)
    return los if lo == hi else "%s-%s" % (los if lo != (0, 0, 0) else "0.1.0", his)


class _FormatWindow:
    def __init__(self):
        self.lo = (0, 0, 0)
        self.hi = _INF
        self.evidence = []

    def narrow(self, lo, hi, why):
        lo = _v(lo) if lo else (0, 0, 0)
        hi = _v(hi) if hi else _INF
        nlo, nhi = max(self.lo, lo), min(self.hi, hi)
        if nlo > nhi:  # contradicting evidence (custom build): keep the earlier window, note it
            self.evidence.append("ignored:" + why)
            return
        if (nlo, nhi) != (self.lo, self.hi):
            self.evidence.append(why)
        self.lo, self.hi = nlo, nhi

    @property
    def label(self):
        return _fmt_window(self.lo, self.hi)

    def at_least(self, version):
        return self.lo >= _v(version)

    def at_most(self, version):
        return self.hi <= _v(version)


def graph_bs_flag(window):
    """The cuda-graph max batch size flag for the detected format (renamed per phase in 0.5.14)."""
    return "--cuda-graph-max-bs-decode" if window.at_least("0.5.14") else "--cuda-graph-max-bs"


# ---------------------------------------------------------------------------------------------------------------
# Per-rank state
# ---------------------------------------------------------------------------------------------------------------
class RankState:
    __slots__ = (
        "avail_after_graph_gb",
        "avail_after_pool_gb",
        "avail_after_weights_gb",
        "capture_begin_avail_gb",
        "capture_open",
        "captures",
        "cuda_graph_mem_gb",
        "cuda_graph_seconds",
        "dist_mem_gb",
        "k_size_gb",
        "kv_dtype",
        "kv_pools",
        "kv_size_gb",
        "kv_tokens",
        "label",
        "phase",
        "post_capture_kv",
        "pre_load_gb",
        "state_cache_gb",
        "v_size_gb",
        "weight_load_seconds",
        "weights_dtype",
        "weights_gb",
        "weights_quant",
        "weights_type",
    )

    def __init__(self, label):
        for name in self.__slots__:
            setattr(self, name, None)
        self.label = label
        self.kv_pools = []
        self.captures = []
        self.capture_open = 0

    def reach(self, phase):
        if self.phase is None or _PHASE_INDEX[phase] > _PHASE_INDEX[self.phase]:
            self.phase = phase

    def figures(self):
        """The per-rank figures of the public result (RANK_FIELDS), null when the log did not print them."""
        return {name: getattr(self, name) for name in RANK_FIELDS}

    def details(self):
        out = self.figures()
        out.update(
            phase=self.phase,
            pre_load_gb=self.pre_load_gb,
            weight_load_seconds=self.weight_load_seconds,
            weights_type=self.weights_type,
            weights_dtype=self.weights_dtype,
            weights_quant=self.weights_quant,
            kv_dtype=self.kv_dtype,
            kv_pools=list(self.kv_pools),
            state_cache_gb=self.state_cache_gb,
            captures=list(self.captures),
            post_capture_kv=self.post_capture_kv,
            free_gb=self.final_free_gb(),
        )
        return out

    def final_free_gb(self):
        if self.post_capture_kv and self.post_capture_kv.get("avail_gb") is not None:
            return self.post_capture_kv["avail_gb"]
        for value in (self.avail_after_graph_gb, self.avail_after_pool_gb, self.avail_after_weights_gb):
            if value is not None:
                return value
        return None


def _r2(x):
    return None if x is None else round(x, 2)


def _add(a, b):
    if b is None:
        return a
    return b if a is None else a + b


def _floor2(x):
    return math.floor(x * 100 + 1e-9) / 100.0


def _ceil2(x):
    return math.ceil(x * 100 - 1e-9) / 100.0


# ---------------------------------------------------------------------------------------------------------------
# The incremental parser
# ---------------------------------------------------------------------------------------------------------------
class StartupLog:
    """Incremental, line-oriented SGLang start-up log parser.

    ``feed()`` accepts any slicing of the stream (bytes or text); lines end at ``\\n`` or ``\\r`` (tqdm), NULs and
    ANSI colour codes are dropped, the unfinished tail waits for the next chunk.
    """

    CRASH_GRACE = 1.0  # seconds a generic crash waits for a more specific signature in the lines that follow

    def __init__(self, tail_lines=30, clock=time.time):
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._buf = ""
        self._clock = clock
        self.ranks = {}
        self.rank_order = []
        self.server_args = {}
        self.window = _FormatWindow()
        self.phase = None
        self.ready = False
        self.milestones = {}  # phase -> {"t": caller clock, "log_t": log clock (epoch or seconds of day)}
        self.rank_milestones = {}  # phase -> set(rank labels)
        self.max_total_num_tokens = None
        self.scheduler_info = {}
        self.http_url = None
        self.http_port = None
        self.capture_bs = None
        self.capture_progress = None
        self.failure = None  # {"outcome", "line", "rank", "phase", "t", "specific"}
        self.oom = {}
        self.kv_fail = {}
        self.sm120 = {}
        self.port = None
        self.port_waits = set()
        self.last_error = None
        self.stall = None
        self.swa_full_tokens = None
        self.lines = 0
        self.last_line_t = None
        self.tail = deque(maxlen=tail_lines)
        self._ctx_rank = ""
        self._day_offset = 0.0
        self._last_sod = None

    # -- input ----------------------------------------------------------------------------------------------------
    def feed(self, chunk, now=None):
        """Feed a chunk (str or bytes). ``now`` is the caller's clock for milestone times; None = log timestamps
        when the line has a dated one (re-reading after a resume), else ``clock()``."""
        if isinstance(chunk, (bytes, bytearray)):
            chunk = self._decoder.decode(bytes(chunk))
        if not chunk:
            return
        data = self._buf + chunk
        if "\x00" in data:
            data = data.replace("\x00", "")
        parts = re.split(r"[\r\n]", data)
        self._buf = parts.pop()
        for line in parts:
            if line:
                self._line(line, now)

    def finish(self, now=None):
        """Flush the unfinished last line (end of a static file)."""
        rest = self._buf + self._decoder.decode(b"", final=True)
        self._buf = ""
        if rest.strip("\x00"):
            self._line(rest.replace("\x00", ""), now)

    # -- per line -------------------------------------------------------------------------------------------------
    def _line(self, line, now):
        if "\x1b" in line:
            line = _ANSI_RE.sub("", line)
        if not line.strip():
            return
        self.lines += 1
        self.tail.append(line)
        m = _PREFIX_RE.search(line, 0, 256)
        log_t = None
        if m:
            rank = m.group("rank").strip()
            msg = line[m.end() :]
            log_t = self._log_time(m)
            if m.group("date"):
                self.window.narrow("0.3.4", None, "timestamp with date")
                if m.group("ms"):
                    self.window.narrow("0.5.9", None, "timestamp with milliseconds")
            else:
                self.window.narrow("0.2.15", "0.3.3", "timestamp without date")
            self._ctx_rank = rank
        else:
            g = _GPU_TAG_RE.search(line, 0, 256)
            if g:
                rank = g.group("label")
                msg = line[g.end() :]
                self._ctx_rank = rank
                if rank.startswith("gpu_id"):
                    self.window.narrow(None, "0.2.6", "[gpu_id=N] tag")
                else:
                    self.window.narrow("0.2.1", "0.2.14", "[gpu=N] tag")
            else:
                rank = None  # continuation line (traceback) or unprefixed (uvicorn < 0.3.6, hint text)
                msg = line
        if now is None:
            now = log_t if (log_t is not None and log_t > 1e9) else self._clock()
        self.last_line_t = now
        self._dispatch(msg, rank, now, log_t)

    def _log_time(self, m):
        h, mi, s = (int(x) for x in m.group("time").split(":"))
        frac = float("0." + m.group("ms")) if m.group("ms") else 0.0
        if m.group("date"):
            y, mo, d = (int(x) for x in m.group("date").split("-"))
            # local wall-clock as written by the server; compared with time.mktime() values by callers
            return time.mktime((y, mo, d, h, mi, s, 0, 0, -1)) + frac
        sod = h * 3600 + mi * 60 + s + frac
        if self._last_sod is not None and sod + 43200 < self._last_sod:
            self._day_offset += 86400.0
        self._last_sod = sod
        return sod + self._day_offset

    def _rank(self, label):
        st = self.ranks.get(label)
        if st is None:
            st = self.ranks[label] = RankState(label)
            self.rank_order.append(label)
        return st

    def _milestone(self, phase, rank, now, log_t):
        if phase not in self.milestones:
            self.milestones[phase] = {"t": now, "log_t": log_t}
        if rank is not None:
            self.rank_milestones.setdefault(phase, set()).add(rank)
            self._rank(rank).reach(phase)
        if self.phase is None or _PHASE_INDEX[phase] > _PHASE_INDEX[self.phase]:
            self.phase = phase

    def _dispatch(self, msg, rank, now, log_t):
        r = rank if rank is not None else ""
        w = self.window
        # ---- failures first: a failure line may also mention milestone words ----
        if self._failure_line(msg, rank, now):
            return
        if "server_args=" in msg:
            self.server_args.update(parse_server_args(msg))
            self._milestone("started", None, now, log_t)
            return
        if msg.startswith("Init torch distributed") or msg.startswith("Init nccl begin"):
            if "nccl" in msg:
                w.narrow(None, "0.3.5", "Init nccl begin")
            else:
                w.narrow("0.3.6", None, "Init torch distributed")
            if "ends." in msg:
                self._rank(r).dist_mem_gb = _num(msg, "mem usage=")
                if "elapsed=" in msg:
                    w.narrow("0.5.9", None, "Init torch distributed ends. elapsed=")
                else:
                    w.narrow("0.4.4", "0.5.8", "Init torch distributed ends. mem usage=")
            self._milestone("started", r, now, log_t)
            return
        if msg.startswith("Load weight begin"):
            self._rank(r).pre_load_gb = _num(msg, "avail mem=")
            self._milestone("weights_loading", r, now, log_t)
            return
        if msg.startswith("Load weight end"):
            st = self._rank(r)
            if "Committed real weights" in msg:  # 0.5.23 overlapped loading, second line
                w.narrow("0.5.23", None, "Committed real weights")
                return
            avail = _num(msg, "avail mem=")
            usage = _num(msg, "mem usage=")
            st.avail_after_weights_gb = avail
            st.weight_load_seconds = _num(msg, "elapsed=")
            if usage is None and avail is not None and st.pre_load_gb is not None:
                usage = round(st.pre_load_gb - avail, 2)
            st.weights_gb = usage
            tm = _TYPE_RE.search(msg)
            st.weights_type = tm.group(1) if tm else None
            dm = re.search(r"\bdtype=([\w.]+)", msg)
            st.weights_dtype = dm.group(1) if dm else None
            qm = _QUANT_RE.search(msg)
            st.weights_quant = qm.group(1).strip() if qm else None
            if "elapsed=" in msg:
                if dm:
                    w.narrow("0.5.9", "0.5.10", "Load weight end. elapsed=, dtype=")
                else:
                    w.narrow("0.5.12", None, "Load weight end. elapsed= without dtype")
            elif "mem usage=" in msg:
                w.narrow("0.4.5", "0.5.8", "Load weight end. ..., mem usage=")
            elif avail is not None:
                w.narrow(None, "0.4.4", "Load weight end. without mem usage")
            self._milestone("weights_loaded", r, now, log_t)
            return
        if "Use sliding window memory pool" in msg:
            self.swa_full_tokens = _num(msg, "full_layer_tokens=", int)
            return
        if msg.startswith("Mamba Cache is allocated"):
            st = self._rank(r)
            st.state_cache_gb = _add(
                st.state_cache_gb, _add(_num(msg, "conv_state size:"), _num(msg, "ssm_state size:"))
            )
            return
        if msg.startswith("KV Cache is allocated") or msg.startswith("KV Cache skipped"):
            self._kv_line(msg, r, w)
            self._milestone("kv_allocated", r, now, log_t)
            return
        if "Post-capture KV sizing: KV cache allocated" in msg:
            st = self._rank(r)
            w.narrow("0.5.18", None, "Post-capture KV sizing")
            st.post_capture_kv = {
                "tokens": _num(msg, "#tokens:", int),
                "kv_size_gb": _num(msg, "KV size:"),
                "avail_gb": _num(msg, "avail mem="),
            }
            st.kv_pools = [dict(st.post_capture_kv, dtype=(_DTYPE_RE.search(msg) or [None, None])[1])]
            st.kv_tokens = st.post_capture_kv["tokens"]
            st.kv_size_gb = st.post_capture_kv["kv_size_gb"]
            st.k_size_gb = st.v_size_gb = None
            self._milestone("kv_allocated", r, now, log_t)
            return
        if msg.startswith("Memory pool end"):
            st = self._rank(r)
            st.avail_after_pool_gb = _num(msg, "avail mem=")
            if st.kv_tokens is None and st.kv_size_gb is None:  # <= 0.4.1 has no KV line; the pool exists now
                self._milestone("kv_allocated", r, now, log_t)
            self._milestone("memory_pool_ready", r, now, log_t)
            return
        if msg.startswith("Capture"):
            if self._capture_line(msg, r, now, log_t):
                return
        if msg.startswith("Capturing batches") or msg.startswith("Capturing num tokens"):
            self._capture_progress(msg, r)
            return
        if "max_total_num_tokens=" in msg:
            self.max_total_num_tokens = _num(msg, "max_total_num_tokens=", int)
            for key in ("max_prefill_tokens", "max_running_requests", "context_len", "chunked_prefill_size"):
                val = _num(msg, key + "=", int)
                if val is not None:
                    self.scheduler_info[key] = val
            gm = _num(msg, "available_gpu_mem=")
            if gm is not None:
                self.scheduler_info["available_gpu_mem_gb"] = gm
                w.narrow("0.4.9", None, "max_total_num_tokens ... available_gpu_mem")
            elif "chunked_prefill_size=" in msg:
                w.narrow("0.4.2", "0.4.8", "max_total_num_tokens ... chunked_prefill_size")
            # printed after the scheduler finished its set-up: graphs (if any) are done on this rank
            if rank:
                self._rank(r)
            return
        um = _UVICORN_RE.search(msg)
        if um:
            self.http_url = um.group(1)
            pm = _URL_PORT_RE.search(self.http_url)
            if pm:
                self.http_port = int(pm.group(1))
            self._milestone("http_up", None, now, log_t)
            return
        if "Application startup complete" in msg:
            self._milestone("http_up", None, now, log_t)
            return
        if READY_TEXT in msg:
            self.ready = True
            self._milestone("ready", None, now, log_t)
            return
        pw = _PORT_WAIT_RE.search(msg)
        if pw:
            self.port_waits.add(int(pw.group(1)))

    def _kv_line(self, msg, r, w):
        st = self._rank(r)
        if msg.startswith("KV Cache skipped"):
            w.narrow("0.5.12", None, "KV Cache skipped (no-op pool)")
            tokens = _num(msg, "#tokens:", int)
            st.kv_pools.append({"tokens": tokens, "kv_size_gb": 0.0})
            st.kv_tokens = tokens if st.kv_tokens is None else st.kv_tokens
            return
        tokens = _num(msg, "#tokens:", int)
        k = _num(msg, "K size:")
        v = _num(msg, "V size:")
        kv = _num(msg, "KV size:")
        dm = re.search(r"\bdtype:\s*([\w.]+)", msg)
        if kv is None and k is not None:
            kv = k + (v or 0.0)
        pool = {
            "tokens": tokens,
            "k_size_gb": k,
            "v_size_gb": v,
            "kv_size_gb": _r2(kv),
            "dtype": dm.group(1) if dm else None,
        }
        st.kv_pools.append(pool)
        st.k_size_gb = _r2(_add(st.k_size_gb, k))
        st.v_size_gb = _r2(_add(st.v_size_gb, v))
        st.kv_size_gb = _r2(_add(st.kv_size_gb, kv))
        if dm:
            st.kv_dtype = dm.group(1)
        if tokens is not None:
            if st.kv_tokens is None:
                st.kv_tokens = tokens
            elif self.swa_full_tokens is not None and tokens == self.swa_full_tokens:
                st.kv_tokens = tokens  # hybrid SWA: the full-attention pool is the capacity that matters
        if dm:
            w.narrow("0.5.13", None, "KV Cache is allocated. dtype:")
        elif tokens is None:
            w.narrow("0.4.2", "0.4.3", "KV Cache is allocated. K size (no #tokens)")
        elif "KV size:" in msg:
            w.narrow("0.4.6", "0.5.12", "KV Cache is allocated. #tokens, KV size")
        else:
            w.narrow("0.4.4", "0.5.12", "KV Cache is allocated. #tokens, K size")

    def _capture_line(self, msg, r, now, log_t):
        w = self.window
        bm = _CAPTURE_BS_RE.search(msg)
        if bm:
            self.capture_bs = [int(x) for x in bm.group("bs").replace(" ", "").split(",") if x]
            w.narrow("0.4.9", "0.5.12", "Capture cuda graph bs [...]")
            return True
        cm = _CAPTURE_RE.search(msg)
        if not cm:
            return False
        kind = cm.group("kind").strip() or "decode"
        kind = {"target decode": "decode", "target verify": "decode"}.get(kind, kind)
        main = kind == "decode"
        st = self._rank(r)
        new_style = "CUDA graph" in msg and "piecewise" not in kind
        if cm.group("ev") == "begin":
            st.capture_open += 1
            if main:
                st.capture_begin_avail_gb = _num(msg, "avail mem=")
                lm = _BS_LIST_RE.search(msg)
                if lm:
                    self.capture_bs = [int(x) for x in lm.group("bs").replace(" ", "").split(",") if x]
            if new_style:
                w.narrow("0.5.14", None, "Capture target decode CUDA graph begin")
            elif "piecewise" in kind:
                w.narrow("0.5.6", "0.5.12", "Capture piecewise CUDA graph")
            elif main:
                if "avail mem=" in msg:
                    w.narrow("0.4.4", "0.5.12", "Capture cuda graph begin ... avail mem=")
                elif "several minutes" in msg:
                    w.narrow(None, "0.4.3", "Capture cuda graph begin (no avail mem)")
            self._milestone("cuda_graph_capturing", r, now, log_t)
            return True
        # end
        st.capture_open = max(0, st.capture_open - 1)
        secs = _num(msg, "Time elapsed:")
        if secs is None:
            secs = _num(msg, "elapsed=")
        mem = _num(msg, "mem usage=")
        avail = _num(msg, "avail mem=")
        st.captures.append({"kind": kind, "seconds": secs, "mem_gb": mem, "avail_gb": avail})
        st.cuda_graph_seconds = _r2(_add(st.cuda_graph_seconds, secs))
        st.cuda_graph_mem_gb = _r2(_add(st.cuda_graph_mem_gb, mem))
        if avail is not None:
            st.avail_after_graph_gb = avail
        if new_style:
            if _BS_LIST_RE.search(msg):
                w.narrow("0.5.16", None, "Capture ... CUDA graph end. bs=[...]")
            else:
                w.narrow("0.5.14", None, "Capture ... CUDA graph end. elapsed=")
        elif main and secs is not None:
            ia, iu = msg.find("avail mem="), msg.find("mem usage=")
            if ia >= 0 and iu >= 0:
                if ia < iu:
                    w.narrow("0.4.4", "0.4.8", "Capture cuda graph end. avail mem before mem usage")
                else:
                    w.narrow("0.4.9", "0.5.12", "Capture cuda graph end. mem usage before avail mem")
            else:
                w.narrow("0.4.0", "0.4.3", "Capture cuda graph end. Time elapsed only")
        if main:
            self.capture_progress = None if self.capture_progress is None else dict(self.capture_progress, done=True)
            self._milestone("cuda_graph_captured", r, now, log_t)
        return True

    def _capture_progress(self, msg, r):
        w = self.window
        cm = _CAPTURING_RE.search(msg)
        if cm:
            bs = int(cm.group("bs")) if cm.group("bs") else None
            if bs is not None:
                w.narrow("0.4.9", None, "Capturing batches (bs=")
            else:
                w.narrow("0.4.6", "0.4.8", "Capturing batches (avail_mem=")
            prog = {"kind": "batches", "bs": bs, "avail_mem_gb": float(cm.group("avail")), "rank": r}
        else:
            tm = _CAPTURING_TOKENS_RE.search(msg)
            if not tm:
                return
            prog = {"kind": "num_tokens", "num_tokens": int(tm.group("n")), "avail_mem_gb": float(tm.group("avail"))}
            prog["rank"] = r
        index = total = None
        if prog.get("bs") is not None and self.capture_bs and prog["bs"] in self.capture_bs:
            order = sorted(self.capture_bs, reverse=True)  # captured largest first (0.4.6+)
            index, total = order.index(prog["bs"]) + 1, len(order)
        else:
            qm = _TQDM_COUNT_RE.search(msg)
            if qm:
                index, total = int(qm.group("n")) + 1, int(qm.group("total"))
                index = min(index, total)
        prog.update(index=index, total=total, done=False)
        self.capture_progress = prog

    # -- failures -------------------------------------------------------------------------------------------------
    def _rank_phase(self, rank):
        st = self.ranks.get(rank if rank is not None else self._ctx_rank)
        if st is not None and st.phase is not None:
            return st.phase
        return self.phase or "started"

    def _set_failure(self, outcome, line, rank, now, specific):
        cur = self.failure
        if cur is not None and cur["specific"]:
            return  # the first specific signature wins; later tracebacks are its echo
        self.failure = {
            "outcome": outcome,
            "line": line.strip()[:500],
            "rank": rank if rank is not None else self._ctx_rank,
            "phase": self.phase,
            "t": now if cur is None else cur["t"],
            "specific": specific,
        }
        if specific and cur is not None:
            self.failure["t"] = now

    def _failure_line(self, msg, rank, now):
        if _SMEM_RE.search(msg):
            nm = _SMEM_NUM_RE.search(msg)
            if nm:
                self.sm120 = {"required": int(nm.group(1)), "limit": int(nm.group(2))}
            self._set_failure("sm120_shared_memory", msg, rank, now, True)
            return True
        graph_fail = bool(_GRAPH_FAIL_RE.search(msg))
        oom = bool(_OOM_RE.search(msg))
        if oom or graph_fail:
            for key, rx in (("tried_gb", _TRIED_RE), ("free_gb", _FREE_RE), ("total_gb", _TOTAL_RE)):
                val = _size(msg, rx)
                if val is not None:
                    self.oom[key] = round(val, 3)
            gm = _GPU_IDX_RE.search(msg)
            if gm:
                self.oom["gpu"] = int(gm.group(1))
        if graph_fail and _NCCL_RE.search(msg):
            self._set_failure("nccl_error", msg, rank, now, True)
            return True
        if graph_fail:
            self.oom.setdefault("rank", rank if rank is not None else self._ctx_rank)
            self.oom["during"] = "piecewise" if "iecewise" in msg else "decode"
            if oom or "memory" in msg.lower() or not self.failure:
                self._set_failure("oom_cuda_graph" if oom else "crash", msg, rank, now, oom)
            return True
        if oom:
            phase = self._rank_phase(rank)
            if self.failure and self.failure["outcome"] == "crash" and "Capture" in self.failure["line"]:
                outcome = "oom_cuda_graph"
            elif phase == "weights_loading" or (phase == "started" and self.phase == "weights_loading"):
                outcome = "oom_weights"
            elif phase in ("weights_loaded", "kv_allocated"):
                outcome = "oom_kv_pool"
            elif phase in ("memory_pool_ready", "cuda_graph_capturing"):
                outcome = "oom_cuda_graph"
            elif phase == "started" and self.phase in ("weights_loaded", "kv_allocated"):
                outcome = "oom_kv_pool"
            else:
                outcome = "crash"
            self.oom.setdefault("rank", rank if rank is not None else self._ctx_rank)
            self._set_failure(outcome, msg, rank, now, outcome != "crash")
            return True
        if _KV_FAIL_RE.search(msg):
            am = _KV_ABOVE_RE.search(msg)
            if am:
                self.kv_fail["min_fraction"] = float(am.group(1))
            self._set_failure("oom_kv_pool", msg, rank, now, True)
            if "Current value: self.server_args" in msg:
                self.window.narrow("0.5.4", "0.5.10", "Not enough memory ... self.server_args")
            elif "Current value: mem_fraction_static" in msg:
                self.window.narrow("0.5.12", None, "Not enough memory ... mem_fraction_static=")
            return True
        pm = _KV_PROFILED_RE.search(msg)
        if pm:
            self.kv_fail["profiled_tokens"] = int(pm.group(2))
            return True
        if _PORT_GENERIC_RE.search(msg) or " is not available in " in msg:
            for rx in _PORT_RES:
                m = rx.search(msg)
                if m:
                    self.port = int(m.group(2))
                    break
            if self.port is None and "Port is already in use" in msg:
                self.port = "internal"
            if self.port is not None:
                self._set_failure("port_in_use", msg, rank, now, True)
                return True
        if _NCCL_RE.search(msg):
            self._set_failure("nccl_error", msg, rank, now, True)
            return True
        if _CRASH_STRONG_RE.search(msg):
            if self.failure is None:
                self._set_failure("crash", msg, rank, now, False)
            return True
        if rank is None and _EXC_LINE_RE.search(msg):
            self.last_error = msg.strip()[:500]  # the exception line that ends a traceback
        return False

    # -- decisions ------------------------------------------------------------------------------------------------
    @property
    def outcome(self):
        if self.failure:
            return self.failure["outcome"]
        if self.stall:
            return "stalled"
        if self.ready:
            return "ready"
        return "incomplete"

    def is_terminal(self, now=None):
        """True once the log proves the start-up ended: ready, a specific failure, or a generic crash that no more
        specific signature refined within CRASH_GRACE seconds (``now`` on the clock given to feed)."""
        if self.failure:
            if self.failure["specific"]:
                return True
            now = self._clock() if now is None else now
            return now - self.failure["t"] >= self.CRASH_GRACE
        return self.ready

    def mark_stalled(self, seconds, now=None):
        """Record that no line arrived for ``seconds`` (the caller owns the clock, see ``sglang_wait.is_stalled``)."""
        self.stall = {"seconds": round(seconds, 1), "phase": self.phase}

    def ranks_with(self, phase):
        """Rank labels that reached ``phase`` (or a later per-rank phase)."""
        idx = _PHASE_INDEX[phase]
        return [lab for lab in self.rank_order if self.ranks[lab].phase and _PHASE_INDEX[self.ranks[lab].phase] >= idx]

    def expected_ranks(self):
        """Scheduler processes this log should show, from the resolved server_args (None when unknown)."""
        sa = self.server_args
        if "tp_size" not in sa:
            return None
        n = sa.get("tp_size", 1) * sa.get("pp_size", 1)
        if not sa.get("enable_dp_attention"):
            n *= sa.get("dp_size", 1)
        return max(1, n // max(1, sa.get("nnodes", 1)))

    def graphs_disabled(self):
        sa = self.server_args
        return bool(
            sa.get("disable_cuda_graph")
            or sa.get("disable_decode_cuda_graph")
            or sa.get("cuda_graph_backend_decode") == "disabled"
        )

    def milestone_met(self, phase, expected_ranks=None):
        """Whether ``phase`` is reached: per-rank phases need every expected rank (any later global phase implies
        it, since SGLang starts HTTP only after all schedulers are up); capture is met when graphs are disabled."""
        if self.phase is not None and _PHASE_INDEX[self.phase] >= _PHASE_INDEX["http_up"]:
            if _PHASE_INDEX[phase] <= _PHASE_INDEX[self.phase]:
                return True
        if phase in ("http_up", "ready", "started"):
            return phase in self.milestones
        if phase == "cuda_graph_captured" and self.graphs_disabled():
            phase = "memory_pool_ready"
        n = expected_ranks or self.expected_ranks() or 1
        return len(self.ranks_with(phase)) >= n

    # -- output ---------------------------------------------------------------------------------------------------
    def totals(self):
        sts = [self.ranks[r] for r in self.rank_order]

        def agg(fn, attr):
            vals = [getattr(s, attr) for s in sts if getattr(s, attr) is not None]
            return fn(vals) if vals else None

        return {
            "ranks": len(sts),
            "pre_load_min_gb": agg(min, "pre_load_gb"),
            "weights_max_gb": agg(max, "weights_gb"),
            "avail_after_weights_min_gb": agg(min, "avail_after_weights_gb"),
            "kv_tokens_min": agg(min, "kv_tokens"),
            "kv_size_max_gb": agg(max, "kv_size_gb"),
            "avail_after_pool_min_gb": agg(min, "avail_after_pool_gb"),
            "cuda_graph_mem_max_gb": agg(max, "cuda_graph_mem_gb"),
            "cuda_graph_seconds_max": agg(max, "cuda_graph_seconds"),
            "avail_after_graph_min_gb": agg(min, "avail_after_graph_gb"),
        }

    def result(self, details=False):
        """The result dict::

            {"outcome": one of OUTCOMES, "phase": one of PHASES or None, "format": "0.4.9-0.5.8" | "0.5.14+" | ...,
             "ranks": {label: {RANK_FIELDS...}}, "max_total_num_tokens": int|None, "diagnosis": str,
             "suggestion": dict|None, "totals": {...}, "server_args": {...}, "milestones": {phase: {"t", "log_t"}},
             "capture_progress": dict|None, "failure": dict|None, "http_port": int|None, "lines": int}

        ``details=True`` adds per-rank extras (pre-load memory, KV pools, captures, dtype, quant).
        """
        diag, sugg = diagnose(self)
        return {
            "outcome": self.outcome,
            "phase": self.phase,
            "format": self.window.label,
            "format_evidence": list(self.window.evidence),
            "ranks": {
                lab: (self.ranks[lab].details() if details else self.ranks[lab].figures()) for lab in self.rank_order
            },
            "max_total_num_tokens": self.max_total_num_tokens,
            "scheduler_info": dict(self.scheduler_info),
            "diagnosis": diag,
            "suggestion": sugg,
            "totals": self.totals(),
            "server_args": dict(self.server_args),
            "milestones": {k: dict(v) for k, v in self.milestones.items()},
            "capture_progress": dict(self.capture_progress) if self.capture_progress else None,
            "failure": dict(self.failure) if self.failure else None,
            "http_port": self.http_port or self.server_args.get("port"),
            "lines": self.lines,
        }


def parse_text(text, now=None):
    log = StartupLog()
    log.feed(text, now=now)
    log.finish(now=now)
    return log


# ---------------------------------------------------------------------------------------------------------------
# Diagnosis: a sentence and a machine-readable suggestion, computed from the log's own numbers
# ---------------------------------------------------------------------------------------------------------------
GRAPH_MARGIN_GB = 2.0  # activations and allocator fragmentation on top of the captured graphs


def _capture_oom_advice(log):
    t = log.totals()
    sa = log.server_args
    frac = sa.get("mem_fraction_static")
    pre = t["pre_load_min_gb"]
    rank = log.ranks.get(log.oom.get("rank") or "") or (log.ranks[log.rank_order[0]] if log.rank_order else None)
    begin = None
    if rank is not None:
        begin = rank.capture_begin_avail_gb if rank.capture_begin_avail_gb is not None else rank.avail_after_pool_gb
    if begin is None:
        begin = t["avail_after_pool_min_gb"]
    tried, free = log.oom.get("tried_gb"), log.oom.get("free_gb")
    parts = []
    if begin is not None:
        parts.append("%.2f GB was free when capture began" % begin)
    if tried is not None:
        parts.append(
            "it tried to allocate %.2f GB more" % tried + (" with %.2f GB free" % free if free is not None else "")
        )
    need = None
    if tried is not None:
        used = max(0.0, begin - free) if (begin is not None and free is not None) else 0.0
        need = used + tried  # lower bound: capture stopped at the first (largest) batch size
    flag = graph_bs_flag(log.window)
    sugg = {"action": "lower_mem_fraction_static", "flag": "--mem-fraction-static"}
    sentence = ""
    if need is not None and begin is not None:
        target = 2 * need + GRAPH_MARGIN_GB
        more = max(target - begin, (tried - (free or 0.0)) + 1.0)
        sugg.update(needed_free_gb=round(target, 2), free_more_gb=round(more, 2))
        if frac is not None and pre:
            new = _floor2(frac - more / pre)
            sugg.update(value=new, current=frac, pre_load_gb=pre, args=["--mem-fraction-static", "%.2f" % new])
            sentence = (
                "Lower --mem-fraction-static from %.2f to %.2f: the graphs needed at least %.2f GB; freeing %.2f GB "
                "(slack = %.2f GB pre-load x (1 - fraction)) leaves %.2f GB for capture and activations."
                % (frac, new, need, more, pre, target)
            )
            kv = t["kv_size_max_gb"]
            if kv:
                sugg["kv_size_after_gb"] = round(max(0.0, kv - more), 2)
                if t["kv_tokens_min"]:
                    sugg["kv_tokens_after"] = int(t["kv_tokens_min"] * max(0.0, kv - more) / kv)
    if "value" not in sugg:
        new = _floor2(frac - 0.05) if frac else None
        sugg.update(value=new, current=frac)
        sentence = "Lower --mem-fraction-static%s to leave more memory for CUDA graphs." % (
            " from %.2f to %.2f" % (frac, new) if frac else ""
        )
    max_bs = (
        sa.get("cuda_graph_max_bs_decode")
        or sa.get("cuda_graph_max_bs")
        or (max(log.capture_bs) if log.capture_bs else None)
    )
    if max_bs:
        ratio = (begin / (2 * need)) if (need and begin) else 0.5
        want = max(1, int(max_bs * min(0.5, ratio)))
        if log.capture_bs:
            fits = [b for b in log.capture_bs if b <= want]
            want = max(fits) if fits else min(log.capture_bs)
        sugg["alternative"] = {"action": "lower_cuda_graph_max_bs", "flag": flag, "value": want, "current": max_bs}
        sentence += " Or/and lower %s from %d to %d." % (flag, max_bs, want)
    if log.oom.get("during") == "piecewise":
        sugg["piecewise"] = {"flag": "--disable-piecewise-cuda-graph"}
        sentence += " The failing capture was the piecewise one: --disable-piecewise-cuda-graph avoids it."
    return "; ".join(parts), sentence.strip(), sugg


def _kv_oom_advice(log):
    t = log.totals()
    frac = log.server_args.get("mem_fraction_static")
    pre, avail = t["pre_load_min_gb"], t["avail_after_weights_min_gb"]
    tp = log.server_args.get("tp_size")
    sugg = {"action": "raise_mem_fraction_static", "flag": "--mem-fraction-static", "current": frac}
    minimum = log.kv_fail.get("min_fraction")
    if minimum is None and pre and avail is not None:
        minimum = 1.0 - avail / pre  # KV budget = avail - pre x (1 - fraction) must be > 0
    if minimum is not None:
        value = _ceil2(minimum + 0.03)  # + 3 % of pre-load memory so the pool holds a useful number of tokens
        sugg.update(minimum=round(minimum, 4), value=value, args=["--mem-fraction-static", "%.2f" % value])
        sentence = "Raise --mem-fraction-static%s to at least %.2f (minimum viable %.4f = 1 - %.2f/%.2f GB)." % (
            " from %.2f" % frac if frac else "",
            value,
            minimum,
            avail if avail is not None else float("nan"),
            pre if pre else float("nan"),
        )
        if value > 0.93:
            sugg["action"] = "add_gpus"
            sugg["alternative"] = {"action": "raise_mem_fraction_static", "value": value}
            if tp:
                sugg.update(flag="--tp-size", value=tp * 2, args=["--tp-size", str(tp * 2)])
            sentence = "Weights leave almost nothing for the KV cache (a fraction of %.2f would be needed): " % value
            sentence += "spread the model over more GPUs%s or use a quantized checkpoint." % (
                " (--tp-size %d)" % (tp * 2) if tp else ""
            )
    else:
        sentence = "Raise --mem-fraction-static or add GPUs."
    what = "the KV cache could not be sized after the weights were loaded"
    if avail is not None:
        what += " (%.2f GB free after weights" % avail + (", %.2f GB before)" % pre if pre else ")")
    if log.kv_fail.get("profiled_tokens") is not None:
        what += "; profiled KV tokens = %d" % log.kv_fail["profiled_tokens"]
    return what, sentence, sugg


def _weights_oom_advice(log):
    t = log.totals()
    tp = log.server_args.get("tp_size")
    sugg = {"action": "add_gpus", "flag": "--tp-size", "alternative": {"action": "use_quantized_checkpoint"}}
    if tp:
        sugg.update(current=tp, value=tp * 2, args=["--tp-size", str(tp * 2)])
    what = "the weights did not fit while loading"
    if t["pre_load_min_gb"]:
        what += " (%.2f GB free per GPU before loading)" % t["pre_load_min_gb"]
    sentence = "Give the model more GPUs%s or use a quantized checkpoint (FP8/NVFP4)." % (
        " (--tp-size %d)" % (tp * 2) if tp else ""
    )
    return what, sentence, sugg


def diagnose(log):
    """(diagnosis sentence, suggestion dict or None) for the parser's current state."""
    outcome = log.outcome
    phase = log.phase or "nothing"
    where = log.failure["rank"] if log.failure and log.failure.get("rank") else None
    at = " on %s" % where if where else ""
    if outcome == "ready":
        t = log.totals()
        bits = [
            "SGLang is ready (format %s, %d rank%s)" % (log.window.label, t["ranks"], "" if t["ranks"] == 1 else "s")
        ]
        if log.max_total_num_tokens is not None:
            bits.append("max_total_num_tokens=%d" % log.max_total_num_tokens)
        if t["avail_after_graph_min_gb"] is not None:
            bits.append("%.2f GB free per GPU after CUDA graphs" % t["avail_after_graph_min_gb"])
        elif t["avail_after_pool_min_gb"] is not None:
            bits.append("%.2f GB free after the memory pool" % t["avail_after_pool_min_gb"])
        return ", ".join(bits) + ".", None
    if outcome == "oom_cuda_graph":
        what, sentence, sugg = _capture_oom_advice(log)
        return "CUDA out of memory while capturing CUDA graphs%s: %s. %s" % (
            at,
            what or "no numbers logged",
            sentence,
        ), sugg
    if outcome == "oom_kv_pool":
        what, sentence, sugg = _kv_oom_advice(log)
        return "Out of memory for the KV pool%s: %s. %s" % (at, what, sentence), sugg
    if outcome == "oom_weights":
        what, sentence, sugg = _weights_oom_advice(log)
        return "CUDA out of memory while loading weights%s: %s. %s" % (at, what, sentence), sugg
    if outcome == "sm120_shared_memory":
        req = log.sm120
        num = " (needs %d bytes, the GPU has %d)" % (req["required"], req["limit"]) if req else ""
        return (
            "A Triton kernel asked for more shared memory than a Blackwell SM120 GPU has%s%s. Build SGLang with the "
            "SM120 extend-attention block-size fix (PR #14311, first released in 0.5.9) or a later release."
            % (num, at),
            {"action": "rebuild_sglang", "fix": "sgl-project/sglang#14311", "min_version": "0.5.9"},
        )
    if outcome == "port_in_use":
        port = log.port
        if port == "internal":
            return (
                "An internal SGLang port (dist-init/NCCL/scheduler) is already in use; stop the other SGLang "
                "instance or set --nccl-port/--port explicitly.",
                {"action": "free_port", "port": None},
            )
        return (
            "Port %s is already in use%s; stop whatever listens on it or start SGLang with another --port."
            % (port, at),
            {"action": "free_port", "port": port, "flag": "--port"},
        )
    if outcome == "nccl_error":
        return (
            "NCCL failed%s during %s: check the GPU interconnect and driver, rerun with NCCL_DEBUG=INFO; on PCIe-only "
            "machines try --disable-custom-all-reduce. (%s)" % (at, phase, log.failure["line"][:200]),
            {"action": "debug_nccl", "env": {"NCCL_DEBUG": "INFO"}, "flag": "--disable-custom-all-reduce"},
        )
    if outcome == "crash":
        line = log.failure["line"] if log.failure else ""
        if log.last_error and log.last_error not in line:
            line = "%s (%s)" % (line, log.last_error) if line else log.last_error
        return (
            "SGLang crashed%s during %s: %s" % (at, phase, line[:400]),
            {"action": "read_traceback", "last_error": log.last_error},
        )
    if outcome == "stalled":
        secs = log.stall["seconds"]
        hint = {
            "weights_loading": "weight loading is slow (disk, network download) or stuck",
            "cuda_graph_capturing": "capture hangs; on multi-node set-ups this is usually NCCL "
            "(rerun with NCCL_DEBUG=INFO)",
            "started": "the processes did not get past distributed initialisation (NCCL/port)",
        }.get(phase, "no progress")
        return (
            "No new log line for %.0f s in phase %s: %s." % (secs, phase, hint),
            {"action": "investigate_stall", "phase": phase, "seconds": secs},
        )
    return "The log ends in phase %s without a ready line or a failure." % phase, None
