# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Per-rank state of an SGLang start-up log: numbers by key, model runners (target and draft), captures, the
format window narrowed by the versions table. Used by the engine in ``sglang_log``; nothing here reads files."""

from __future__ import annotations

__metaclass__ = type

import math
import re

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_versions as versions
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_phases import (  # noqa: F401 (PHASES: re-exported)
    PHASE_INDEX,
    PHASES,
    SERVER_PHASES,
)

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
MAX_NUMBER_CHARS = 24  # a "number" longer than this is corruption, not a figure (no Infinity in --json)

_KEY_CACHE = {}


def num(msg, key, cast=float):
    """Finite number following ``key`` (by key, not position); None when absent, absurdly long or not finite.
    'V size:' never matches 'KV size:'."""
    rx = _KEY_CACHE.get(key)
    if rx is None:
        guard = r"(?<![\w])" if key[0].isalnum() or key[0] == "#" else ""
        rx = _KEY_CACHE[key] = re.compile(guard + re.escape(key) + r"\s*(-?\d+(?:\.\d+)?)(?![\d.])")
    m = rx.search(msg)
    if not m or len(m.group(1)) > MAX_NUMBER_CHARS:
        return None
    try:
        val = cast(m.group(1)) if cast is not float else float(m.group(1))
    except ValueError:
        return None
    if isinstance(val, float) and not math.isfinite(val):
        return None
    return val


def r2(x):
    return None if x is None else round(x, 2)


def add(a, b):
    if b is None:
        return a
    return b if a is None else a + b


# server_args=ServerArgs(k=v, ...) (0.3-0.5.x) or a dict-like repr (0.5.23 _server_args_for_logging).
_SA_KEYS = {
    "mem_fraction_static": float,
    "tp_size": int,
    "dp_size": int,
    "pp_size": int,
    "ep_size": int,
    "nnodes": int,
    "node_rank": int,
    "dist_init_addr": str,
    "dist_timeout": int,
    "cuda_graph_max_bs": int,
    "cuda_graph_max_bs_decode": int,
    "chunked_prefill_size": int,
    "max_total_tokens": int,
    "max_running_requests": int,
    "context_length": int,
    "port": int,
    "disable_cuda_graph": bool,
    "disable_decode_cuda_graph": bool,
    "disable_prefill_cuda_graph": bool,
    "enable_dp_attention": bool,
    "enable_piecewise_cuda_graph": bool,
    "disable_piecewise_cuda_graph": bool,
    "skip_server_warmup": bool,
    "kv_cache_dtype": str,
    "model_path": str,
    "host": str,
    "cuda_graph_backend_decode": str,
    "cuda_graph_backend_prefill": str,
    "speculative_algorithm": str,
    "speculative_draft_model_path": str,
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
        if typ is bool:
            out[key] = raw in ("True", "true", "1")
        elif typ is str:
            out[key] = raw
        elif len(raw) <= MAX_NUMBER_CHARS:
            try:
                val = typ(raw)
            except ValueError:
                continue
            if typ is float and not math.isfinite(val):
                continue
            out[key] = val
    return out


class FormatWindow:
    """The release window [lo, hi] that every recognised line narrows (entries of the versions table)."""

    def __init__(self):
        self.lo = versions.LOWEST
        self.hi = versions.HIGHEST
        self.evidence = []

    def narrow_entry(self, entry):
        lo = versions.vkey(entry["first"]) if entry["first"] else versions.LOWEST
        hi = versions.vkey(entry["last"]) if entry["last"] else versions.HIGHEST
        nlo, nhi = max(self.lo, lo), min(self.hi, hi)
        if nlo > nhi:  # contradicting evidence (custom build): keep the earlier window, note it
            if "ignored:" + entry["id"] not in self.evidence:
                self.evidence.append("ignored:" + entry["id"])
            return
        if (nlo, nhi) != (self.lo, self.hi):
            self.evidence.append(entry["id"])
        self.lo, self.hi = nlo, nhi

    def match(self, kind, msg):
        """Narrow by the first table entry of ``kind`` whose pattern matches ``msg``; returns it (or None)."""
        entry = versions.match(kind, msg)
        if entry is not None:
            self.narrow_entry(entry)
        return entry

    def by_id(self, entry_id):
        self.narrow_entry(versions.ENTRY[entry_id])

    def prefix(self, date, ms):
        if date:
            self.by_id("prefix_date")
            if ms:
                self.by_id("prefix_ms")
        else:
            self.by_id("prefix_hms")

    @property
    def label(self):
        return versions.window_label(self.lo, self.hi)

    def at_least(self, version):
        return self.lo >= versions.vkey(version)

    def at_most(self, version):
        return self.hi <= versions.vkey(version)

    def within(self, first, last):
        """True when the whole window lies inside [first, last] (None = open)."""
        lo_ok = first is None or self.lo >= versions.vkey(first)
        hi_ok = last is None or self.hi <= versions.vkey(last)
        return lo_ok and hi_ok


_CAPTURE_RE = re.compile(r"Capture (?P<kind>(?:[\w-]+ ){0,4}?)(?:cuda|CUDA|cpu|npu) graph (?P<ev>begin|end)\b")
_BS_LIST_RE = re.compile(r"\b(?:bs|cuda graph bs) ?=?\s?\[(?P<bs>[\d,\s]*)\]")
_TYPE_RE = re.compile(r"\btype=([\w.]+)")
_DTYPE_RE = re.compile(r"\bdtype[=:]\s*([\w.]+)")
_QUANT_RE = re.compile(r"\bquant=([^,]+(?:, (?:fmt|bits|group_size)=[^,]+)*)")


def bs_list(msg):
    m = _BS_LIST_RE.search(msg)
    return [int(x) for x in m.group("bs").replace(" ", "").split(",") if x] if m else None


class Runner:
    """One model runner on a rank: the target model, or the draft model of speculative decoding."""

    FIELDS = (
        "pre_load_gb",
        "weights_gb",
        "avail_after_weights_gb",
        "weight_load_seconds",
        "weights_type",
        "weights_dtype",
        "weights_quant",
        "kv_tokens",
        "k_size_gb",
        "v_size_gb",
        "kv_size_gb",
        "kv_dtype",
        "avail_after_pool_gb",
        "state_cache_gb",
        "cuda_graph_seconds",
        "cuda_graph_mem_gb",
        "avail_after_graph_gb",
        "loaded",
    )
    __slots__ = (*FIELDS, "kv_pools")

    def __init__(self):
        for name in self.FIELDS:
            setattr(self, name, None)
        self.kv_pools = []

    def load_end(self, msg):
        avail = num(msg, "avail mem=")
        usage = num(msg, "mem usage=")
        self.avail_after_weights_gb = avail
        self.weight_load_seconds = num(msg, "elapsed=")
        if usage is None and avail is not None and self.pre_load_gb is not None:
            usage = round(self.pre_load_gb - avail, 2)
        self.weights_gb = usage
        tm = _TYPE_RE.search(msg)
        self.weights_type = tm.group(1) if tm else None
        dm = re.search(r"\bdtype=([\w.]+)", msg)
        self.weights_dtype = dm.group(1) if dm else None
        qm = _QUANT_RE.search(msg)
        self.weights_quant = qm.group(1).strip() if qm else None
        self.loaded = True

    def add_state_cache(self, size_gb):
        self.state_cache_gb = add(self.state_cache_gb, size_gb)

    def add_pool(self, kind, tokens, size_gb, **extra):
        """A pool that is not a plain KV line: the mamba state cache, a hybrid SWA pool's total, DeepSeek-V4's pool."""
        if kind == "swa+full" and any(p.get("kind") in ("swa", "full") for p in self.kv_pools):
            return  # SWAKVPool's line is the sum of the SWA and full pools its KV lines already gave
        self.kv_pools.append(dict({"kind": kind, "tokens": tokens, "kv_size_gb": r2(size_gb)}, **extra))

    def kv_line(self, msg, swa_full_tokens, swa_tokens=None):
        tokens = num(msg, "#tokens:", int)
        if msg.startswith("KV Cache skipped"):
            self.kv_pools.append({"kind": "skipped", "tokens": tokens, "kv_size_gb": 0.0})
            self.kv_tokens = tokens if self.kv_tokens is None else self.kv_tokens
            return
        k, v, kv = num(msg, "K size:"), num(msg, "V size:"), num(msg, "KV size:")
        dm = re.search(r"\bdtype:\s*([\w.]+)", msg)
        if kv is None and k is not None:
            kv = k + (v or 0.0)
        kind = "full"
        if swa_tokens is not None and tokens == swa_tokens and tokens != swa_full_tokens:
            kind = "swa"  # hybrid SWA: the sliding-window layers' pool
        self.kv_pools.append(
            {
                "kind": kind,
                "tokens": tokens,
                "k_size_gb": k,
                "v_size_gb": v,
                "kv_size_gb": r2(kv),
                "dtype": dm.group(1) if dm else None,
            }
        )
        self.k_size_gb = r2(add(self.k_size_gb, k))
        self.v_size_gb = r2(add(self.v_size_gb, v))
        self.kv_size_gb = r2(add(self.kv_size_gb, kv))
        if dm:
            self.kv_dtype = dm.group(1)
        if tokens is not None:
            if self.kv_tokens is None:
                self.kv_tokens = tokens
            elif swa_full_tokens is not None and tokens == swa_full_tokens:
                self.kv_tokens = tokens  # hybrid SWA: the full-attention pool is the capacity that matters

    def capture_end(self, secs, mem, avail):
        self.cuda_graph_seconds = r2(add(self.cuda_graph_seconds, secs))
        self.cuda_graph_mem_gb = r2(add(self.cuda_graph_mem_gb, mem))
        if avail is not None:
            self.avail_after_graph_gb = avail

    def figures(self):
        return {name: getattr(self, name) for name in RANK_FIELDS}


class RankState:
    """A scheduler rank: its target runner (whose figures are the rank's figures) and, with speculative decoding,
    the draft runner that loads after it on the same GPU."""

    _RANK_OWN = ("label", "phase", "target", "draft", "dist_mem_gb", "post_capture_kv", "captures", "capture_open")

    def __init__(self, label):
        self.label = label
        self.phase = None
        self.target = Runner()
        self.draft = None
        self.dist_mem_gb = None
        self.post_capture_kv = None
        self.captures = []
        self.capture_open = 0
        self.capture_begin_avail_gb = None

    def __getattr__(self, name):  # the rank's figures are its target's
        if name in Runner.FIELDS:
            return getattr(self.target, name)
        raise AttributeError(name)

    def reach(self, phase):
        if self.phase is None or PHASE_INDEX[phase] > PHASE_INDEX[self.phase]:
            self.phase = phase

    def start_runner(self):
        """``Load weight begin``: the target's, or (once the target finished loading) the draft model's."""
        if self.target.loaded:
            if self.draft is None:
                self.draft = Runner()
            return self.draft
        return self.target

    def current(self):
        return self.draft if self.draft is not None else self.target

    def post_capture(self, msg):
        self.post_capture_kv = {
            "tokens": num(msg, "#tokens:", int),
            "kv_size_gb": num(msg, "KV size:"),
            "avail_gb": num(msg, "avail mem="),
        }
        t = self.target
        t.kv_pools = [dict(self.post_capture_kv, dtype=(_DTYPE_RE.search(msg) or [None, None])[1])]
        t.kv_tokens = self.post_capture_kv["tokens"]
        t.kv_size_gb = self.post_capture_kv["kv_size_gb"]
        t.k_size_gb = t.v_size_gb = None

    def capture_line(self, msg, log):
        """A ``Capture ...`` line: 'begin', 'end_main' (the target's decode graphs), 'end' or None."""
        if msg.startswith("Capture cuda graph bs") or msg.startswith("Capture cuda graph num tokens"):
            log.window.match("capture", msg)
            if "bs" in msg.split("[", 1)[0]:
                log.capture_bs = bs_list(msg) or log.capture_bs
            return None
        cm = _CAPTURE_RE.search(msg)
        if not cm:
            return None
        log.window.match("capture", msg)
        words = cm.group("kind").lower().split()
        draft = "draft" in words
        kind = " ".join(words) or "decode"
        role = "prefill" if ("prefill" in words or "piecewise" in words) else ("draft" if draft else "main")
        if draft and self.draft is None:
            self.draft = Runner()  # a draft capture line on a rank whose draft weights we did not see
        runner = self.draft if draft else self.target
        if cm.group("ev") == "begin":
            self.capture_open += 1
            if role == "main":
                self.capture_begin_avail_gb = num(msg, "avail mem=")
                bs = bs_list(msg)
                if bs:
                    log.capture_bs = bs
            return "begin"
        self.capture_open = max(0, self.capture_open - 1)
        secs = num(msg, "Time elapsed:")
        if secs is None:
            secs = num(msg, "elapsed=")
        mem, avail = num(msg, "mem usage="), num(msg, "avail mem=")
        self.captures.append({"kind": kind, "runner": "draft" if draft else "target", "seconds": secs, "mem_gb": mem})
        runner.capture_end(secs, mem, avail)
        if avail is not None and runner is not self.target:
            self.target.avail_after_graph_gb = avail  # free memory on the GPU is the rank's, whoever captured
        return "end_main" if role == "main" else "end"

    def figures(self):
        out = self.target.figures()
        if self.draft is not None:
            out["draft"] = self.draft.figures()
        return out

    def final_free_gb(self):
        if self.post_capture_kv and self.post_capture_kv.get("avail_gb") is not None:
            return self.post_capture_kv["avail_gb"]
        for value in (self.avail_after_graph_gb, self.current().avail_after_pool_gb, self.avail_after_weights_gb):
            if value is not None:
                return value
        return None

    def details(self):
        out = self.figures()
        t = self.target
        out.update(
            phase=self.phase,
            pre_load_gb=t.pre_load_gb,
            weight_load_seconds=t.weight_load_seconds,
            weights_type=t.weights_type,
            weights_dtype=t.weights_dtype,
            weights_quant=t.weights_quant,
            kv_dtype=t.kv_dtype,
            kv_pools=list(t.kv_pools),
            state_cache_gb=t.state_cache_gb,
            captures=list(self.captures),
            post_capture_kv=self.post_capture_kv,
            free_gb=self.final_free_gb(),
        )
        if self.draft is not None:
            out["draft"].update(pre_load_gb=self.draft.pre_load_gb, kv_pools=list(self.draft.kv_pools))
        return out


_CAPTURING_RE = re.compile(r"Capturing batches \((?:bs=(?P<bs>\d+) )?avail_mem=(?P<avail>[\d.]+) ?GB\)")
_TQDM_COUNT_RE = re.compile(r"\|\s*(?P<n>\d+)/(?P<total>\d+) \[")
_CAPTURING_TOKENS_RE = re.compile(r"Capturing num tokens \(num_tokens=(?P<n>\d+) avail_mem=(?P<avail>[\d.]+) ?GB\)")


def capture_progress(msg, capture_bs, window):
    """A tqdm ``Capturing batches (bs=.. avail_mem=..)`` line as {kind, bs, index, total, avail_mem_gb, done}."""
    cm = _CAPTURING_RE.search(msg)
    if cm:
        window.match("capturing", msg)
        bs = int(cm.group("bs")) if cm.group("bs") else None
        prog = {"kind": "batches", "bs": bs, "avail_mem_gb": float(cm.group("avail"))}
    else:
        tm = _CAPTURING_TOKENS_RE.search(msg)
        if not tm:
            return None
        prog = {"kind": "num_tokens", "num_tokens": int(tm.group("n")), "avail_mem_gb": float(tm.group("avail"))}
    index = total = None
    if prog.get("bs") is not None and capture_bs and prog["bs"] in capture_bs:
        order = sorted(capture_bs, reverse=True)  # captured largest first (0.4.6+)
        index, total = order.index(prog["bs"]) + 1, len(order)
    else:
        qm = _TQDM_COUNT_RE.search(msg)
        if qm:
            index, total = int(qm.group("n")) + 1, int(qm.group("total"))
            index = min(index, total)
    prog.update(index=index, total=total, done=False)
    return prog


class RankQueries:
    """Mixed into ``StartupLog``: questions waiters ask about the ranks (which reached a phase, how many to expect)."""

    def ranks_with(self, phase):
        """Rank labels that reached ``phase`` (or a later per-rank phase)."""
        idx = PHASE_INDEX[phase]
        return [lab for lab in self.rank_order if self.ranks[lab].phase and PHASE_INDEX[self.ranks[lab].phase] >= idx]

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
        if self.phase is not None and PHASE_INDEX[self.phase] >= PHASE_INDEX["http_up"]:
            if PHASE_INDEX[phase] <= PHASE_INDEX[self.phase]:
                return True
        if phase in SERVER_PHASES:
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
            "draft_ranks": sum(1 for s in sts if s.draft is not None),
        }
