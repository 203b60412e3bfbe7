# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""SGLang start-up log engine: turns log lines into per-rank facts, phases and an outcome.

What SGLang prints in which release (patterns, first/last release, sources) lives in ``sglang_versions``; the
diagnosis and advice in ``sglang_diagnosis``; this file only reads lines. Users: the ``sglang_server`` module, the
``sglang_progress`` callback and ``bin/sglang-doctor``.

Public API
----------
``StartupLog()``                 incremental parser. ``feed(chunk, now=None)`` takes ``bytes`` or ``str`` in any
                                 slicing, ``finish()`` flushes an unfinished last line, ``result()`` returns the
                                 result dict. Attributes ``outcome``, ``phase``, ``ready``, ``failure`` and
                                 ``is_terminal(now)`` for waiting loops.
``parse_text(text)``            one-shot helper: feed + finish, returns the ``StartupLog``.
``parse_server_args(text)``     resolved values from a ``server_args=ServerArgs(...)`` line.
``OUTCOMES``, ``PHASES``, ``MILESTONES``, ``RANK_FIELDS``   the vocabularies.

Reading is one pass in bounded memory: a chunk's complete lines are searched with two byte-level regexes built from
the table's line starts (a line must start its message with one of them), and only those lines are decoded and run
through the grammar; a line longer than ``MAX_LINE`` bytes is skipped (counted in ``skipped_lines``).
"""

from __future__ import annotations

__metaclass__ = type

import re
import time

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_versions as versions
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_diagnosis import diagnose
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_logstate import (
    PHASE_INDEX,
    PHASES,
    RANK_FIELDS,
    FormatWindow,
    RankQueries,
    RankState,
    capture_progress,
    add,
    num,
    parse_server_args,
)
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_logfailure import FailureMixin

__all__ = [
    "FAILURE_OUTCOMES",
    "MILESTONES",
    "OUTCOMES",
    "PHASES",
    "RANK_FIELDS",
    "StartupLog",
    "parse_server_args",
    "parse_text",
]

MILESTONES = PHASES
OUTCOMES = (
    "ready",
    "oom_cuda_graph",
    "oom_kv_pool",
    "oom_weights",
    "sm120_shared_memory",
    "port_in_use",
    "nccl_error",
    "dist_init_timeout",
    "memory_unbalanced",
    "crash",
    "stalled",
    "incomplete",
)
FAILURE_OUTCOMES = OUTCOMES[1:11]
MAX_LINE = 64 << 10  # longer lines are skipped: no SGLang line the grammar needs is this long

_PREFIX_RE = re.compile(
    r"\[(?:(?P<date>\d{4}-\d{2}-\d{2}) )?(?P<time>\d{2}:\d{2}:\d{2})(?:[.,](?P<ms>\d{1,6}))?"
    r"(?P<rank>(?: [A-Z][A-Z_]*\d+)*)\] ?"
)
_GPU_TAG_RE = re.compile(r"\[(?P<label>gpu(?:_id)?=\d+)\] ?")
_ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_JUNK_LEAD = "\ufffd\x00\t "  # an invalid byte (or NUL) right after the prefix must not hide the line
_TRAILING_NUM_RE = re.compile(r"-?\d+(?:\.\d*)?$")

# The prefilter: message starts after "] " (prefixed lines) and line starts (tracebacks, hints, old uvicorn).
_STARTS_RE = versions.starts_regex()
# after "] ": up to 4 stray bytes (NUL, an invalid UTF-8 byte) must not hide the line
_PASS_PREFIXED = re.compile(rb"\] [\x00\x80-\xff]{0,4}" + versions.line_starts_regex(generic_exceptions=False))
_PASS_LINE = re.compile(rb"\n" + versions.line_starts_regex())
_LINE_AT = re.compile(versions.line_starts_regex())
_PASS_CR = re.compile(rb"\r" + _STARTS_RE)
_JOURNALD_RE = re.compile(rb"^[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ [^\s\[]+\[\d+\]: ")
_DOCKER_RE = re.compile(rb"^[\w.-]+\s+\| ")
_TRACING_RE = re.compile(versions.TRACING_PREFIX.decode())
_LEVEL_RE = re.compile(versions.LEVEL_PREFIX)
_WRAPPER_TEXT_RE = re.compile(r"^(?:[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ [^\s\[]+\[\d+\]: |[\w.-]+\s+\| )")


class StartupLog(FailureMixin, RankQueries):
    """Incremental SGLang start-up log parser (see the module docstring)."""

    CRASH_GRACE = 1.0  # seconds a generic crash waits for a more specific signature in the lines that follow

    def __init__(self, tail_lines=30, clock=time.time):
        self._buf = b""
        self._skipping = False
        self._pass_inner = None  # journald/docker: where an unprefixed line's text starts
        self._pass_inner_rx = None
        self._detected = False
        self._clock = clock
        self.ranks = {}
        self.rank_order = []
        self.server_args = {}
        self.window = FormatWindow()
        self.phase = None
        self.ready = False
        self.milestones = {}
        self.rank_milestones = {}
        self.max_total_num_tokens = None
        self.scheduler_info = {}
        self.http_url = None
        self.http_port = None
        self.capture_bs = None
        self.capture_progress = None
        self.failure = None
        self.oom = {}
        self.kv_fail = {}
        self.sm120 = {}
        self.graph_fail = {}
        self.unbalanced = None
        self.port = None
        self.rendezvous = {}  # a multi-node rendezvous that timed out (sglang_logfailure.py)
        self.port_waits = set()
        self.last_error = None
        self.in_traceback = None
        self.stall = None
        self.swa_full_tokens = None
        self.swa_tokens = None
        self.first_error = None
        self.lines = 0
        self.bytes_read = 0
        self.skipped_lines = 0
        self.last_line_t = None
        self._tail_raw = b""
        self._tail_n = tail_lines
        self._ctx_rank = ""
        self._day_offset = 0.0
        self._last_sod = None

    # -- input ----------------------------------------------------------------------------------------------------
    def feed(self, chunk, now=None):
        """Feed a chunk (bytes or str). ``now`` is the caller's clock for milestone times; None = log timestamps
        when the line has a dated one (re-reading after a resume), else ``clock()``."""
        if isinstance(chunk, str):
            chunk = chunk.encode("utf-8", "surrogateescape")
        if not chunk:
            return
        elif not isinstance(chunk, bytes):
            chunk = bytes(chunk)
        if not chunk:
            return
        self.bytes_read += len(chunk)
        n = len(chunk)
        cut = max(chunk.rfind(b"\n"), chunk.rfind(b"\r"))
        if cut < 0:  # no line ends here: carry at most MAX_LINE bytes, never the whole file
            if not self._skipping:
                if len(self._buf) + n > MAX_LINE:
                    self._buf = b""
                    self._skip_start()
                else:
                    self._buf += chunk
            return
        first = chunk.find(b"\n", 0, cut + 1)
        cr = chunk.find(b"\r", 0, first if first >= 0 else cut + 1)
        first = cr if cr >= 0 else first
        if self._skipping:  # the end of an overlong line
            self._skipping = False
        else:
            head = self._buf + chunk[: first + 1]
            if len(head) > MAX_LINE:
                self.skipped_lines += 1
            else:
                self._scan(head, 0, len(head), now)
        self._buf = b""
        if cut > first:
            self._scan(chunk, first + 1, cut + 1, now)  # no copy: the regexes run on the chunk itself
        if n - cut - 1 > MAX_LINE:
            self._skip_start()
        else:
            self._buf = chunk[cut + 1 :]

    def _skip_start(self):
        if not self._skipping:
            self.skipped_lines += 1
        self._skipping = True

    def finish(self, now=None):
        """Flush the unfinished last line (end of a static file). Its trailing number may be cut, so it is dropped:
        ``mem usage=3`` at the end of a file never becomes 3.00 GB."""
        rest, self._buf = self._buf, b""
        if rest.strip(b"\x00 \t") and not self._skipping:
            line = rest + b"\n"
            self._scan(line, 0, len(line), now, truncated=True)
        self._skipping = False
        if self.in_traceback and self.failure is None:
            self._cut_traceback(now if now is not None else self._clock())

    def _scan(self, buf, start, end, now, truncated=False):
        """One pass over the complete lines buf[start:end]: the prefilter picks the lines the grammar reads."""
        if self.bytes_read and self._pass_inner is None and not self._detected:
            self._detected = True
            self._detect_wrapper(buf[start : start + 4096])
        self.last_line_t = now if now is not None else self._clock()
        keep = MAX_LINE // 4
        self._tail_raw = (self._tail_raw + buf[max(start, end - keep) : end])[-keep:]
        starts = set()
        for m in _PASS_PREFIXED.finditer(buf, start, end):
            p = m.start()
            starts.add(max(buf.rfind(b"\n", start, p), buf.rfind(b"\r", start, p), start - 1) + 1)
        for rx in self._line_passes(buf, start, end):
            for m in rx.finditer(buf, start, end):
                starts.add(m.start() + 1)
        if _LINE_AT.match(buf, start) or (self._pass_inner is not None and self._pass_inner.match(buf, start)):
            starts.add(start)
        self.lines += len(starts)
        for s in sorted(starts):
            e = buf.find(b"\n", s, end)
            e = end if e < 0 else e
            r = buf.find(b"\r", s, e)
            stop = r if r >= 0 else e
            text = buf[s:stop].decode("utf-8", "replace")
            if truncated and stop >= end - 1:
                text = _TRAILING_NUM_RE.sub("", text)
            self._line(text, now)

    def _line_passes(self, buf, start, end):
        passes = [_PASS_LINE]
        if self._pass_inner is not None:
            passes.append(self._pass_inner_rx)
        if buf.find(b"\r", start, end) >= 0:
            passes.append(_PASS_CR)
        return passes

    def _detect_wrapper(self, body):
        first = body[:4096]
        if _JOURNALD_RE.match(first):
            self._pass_inner = re.compile(rb"[^\n]{0,160}?\]: " + versions.line_starts_regex())
            self._pass_inner_rx = re.compile(rb"\]: " + versions.line_starts_regex())
        elif _DOCKER_RE.match(first):
            self._pass_inner = re.compile(rb"[\w.-]+\s+\| " + versions.line_starts_regex())
            self._pass_inner_rx = re.compile(rb"\| " + versions.line_starts_regex())

    # -- per line -------------------------------------------------------------------------------------------------
    def _line(self, line, now):
        if "\x00" in line:
            line = line.replace("\x00", "")
        if "\x1b" in line:
            line = _ANSI_RE.sub("", line)
        if not line.strip():
            return
        m = _PREFIX_RE.search(line, 0, 256)
        log_t = None
        if m:
            rank = m.group("rank").strip()
            msg = line[m.end() :]
            log_t = self._log_time(m)
            self.window.prefix(m.group("date"), m.group("ms"))
            self._ctx_rank = rank
        else:
            g = _GPU_TAG_RE.search(line, 0, 256)
            if g:
                rank = g.group("label")
                msg = line[g.end() :]
                self._ctx_rank = rank
                self.window.by_id("gpu_id_tag" if rank.startswith("gpu_id") else "gpu_tag")
            else:
                rank = None  # continuation line (traceback) or unprefixed (uvicorn < 0.3.6, hint text)
                msg = line
                tm = _TRACING_RE.match(msg)
                if tm:  # the Rust server's tracing lines
                    msg = msg[tm.end() :]
                if self._pass_inner is not None:
                    im = _WRAPPER_TEXT_RE.match(msg)
                    if im:
                        msg = msg[im.end() :]
        msg = msg.lstrip(_JUNK_LEAD)
        lm = _LEVEL_RE.match(msg)
        if lm:  # uvicorn's "INFO:     ", or "LEVEL file.py:N: " of a root logger configured by another library
            msg = msg[lm.end() :]
        if now is None:
            now = log_t if (log_t is not None and log_t > 1e9) else self._clock()
        self.last_line_t = now
        self._dispatch(msg, rank, now, log_t)

    def _log_time(self, m):
        h, mi, s = (int(x) for x in m.group("time").split(":"))
        frac = float("0." + m.group("ms")) if m.group("ms") else 0.0
        if m.group("date"):
            y, mo, d = (int(x) for x in m.group("date").split("-"))
            try:  # local wall-clock as written by the server; compared with time.mktime() values by callers
                return time.mktime((y, mo, d, h, mi, s, 0, 0, -1)) + frac
            except (OverflowError, ValueError):
                return None
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
        if self.phase is None or PHASE_INDEX[phase] > PHASE_INDEX[self.phase]:
            self.phase = phase

    def _dispatch(self, msg, rank, now, log_t):
        r = rank if rank is not None else ""
        if self._failure_line(msg, rank, now):
            return
        kind = versions.kind_of(msg)
        if kind is None:
            if msg[:1].isdigit() and versions.match("uvicorn", msg) is not None:  # uvicorn's access line
                self._milestone("http_up", None, now, log_t)
            return
        handler = getattr(self, "_on_" + kind, None)
        if handler is not None:
            handler(msg, r, rank, now, log_t)

    # -- handlers, one per kind of line (sglang_versions.KINDS) ---------------------------------------------------
    def _on_server_args(self, msg, r, rank, now, log_t):
        self.server_args.update(parse_server_args(msg))
        self.window.match("server_args", msg)
        self._milestone("started", None, now, log_t)

    def _on_dist_init(self, msg, r, rank, now, log_t):
        self.window.match("dist_init", msg)
        if "ends." in msg:
            self._rank(r).dist_mem_gb = num(msg, "mem usage=")
        self._milestone("started", r, now, log_t)

    def _on_load_begin(self, msg, r, rank, now, log_t):
        st = self._rank(r)
        runner = st.start_runner()  # a second runner on a rank that already loaded weights is the draft model
        runner.pre_load_gb = num(msg, "avail mem=")
        self._milestone("weights_loading", r, now, log_t)

    def _on_load_end(self, msg, r, rank, now, log_t):
        self.window.match("load_end", msg)
        if "Committed real weights" in msg:  # 0.5.23 overlapped loading, second line
            return
        st = self._rank(r)
        runner = st.current()
        runner.load_end(msg)
        self._milestone("weights_loaded", r, now, log_t)

    def _on_swa(self, msg, r, rank, now, log_t):
        self.window.match("swa", msg)
        if msg.startswith("SWAKVPool mem usage"):  # 0.5.20+: one line for the hybrid pool, after its KV line
            runner = self._rank(r).current()
            swa = num(msg, "swa size:", int)
            runner.add_pool("swa+full", num(msg, "full size:", int), num(msg, "SWAKVPool mem usage:"), swa=swa)
        elif msg.startswith("Initialize DeepSeekV4TokenToKVPool"):
            self._rank(r).current().add_pool("swa", num(msg, "swa_size=", int), None)
        else:
            self.swa_full_tokens = num(msg, "full_layer_tokens=", int)
            self.swa_tokens = num(msg, "swa_layer_tokens=", int)

    def _on_mamba(self, msg, r, rank, now, log_t):
        # one state per request slot (max_mamba_cache_size), not tokens; with speculative decoding the pool also holds
        # the intermediate SSM-state and conv-window caches (0.5.9 .. 0.5.23 mem_cache/memory_pool.py)
        runner = self._rank(r).current()
        size = None
        for key in ("conv_state size:", "ssm_state size:", "intermediate_ssm_state_cache size:",
                    "intermediate_conv_window_cache size:"):  # fmt: skip
            size = add(size, num(msg, key))
        runner.add_state_cache(size)
        runner.add_pool("mamba", None, size, states=num(msg, "max_mamba_cache_size:", int))

    def _on_kv(self, msg, r, rank, now, log_t):
        self.window.match("kv", msg)
        self._rank(r).current().kv_line(msg, self.swa_full_tokens, self.swa_tokens)
        self._milestone("kv_allocated", r, now, log_t)

    def _on_post_capture(self, msg, r, rank, now, log_t):
        self.window.match("post_capture", msg)
        if "KV cache allocated" in msg:
            self._rank(r).post_capture(msg)
            self._milestone("kv_allocated", r, now, log_t)

    def _on_pool_end(self, msg, r, rank, now, log_t):
        runner = self._rank(r).current()
        runner.avail_after_pool_gb = num(msg, "avail mem=")
        if runner.kv_tokens is None and runner.kv_size_gb is None:  # <= 0.4.1 has no KV line; the pool exists now
            self._milestone("kv_allocated", r, now, log_t)
        self._milestone("memory_pool_ready", r, now, log_t)

    def _on_capture(self, msg, r, rank, now, log_t):
        ev = self._rank(r).capture_line(msg, self)
        if ev == "begin":
            self._milestone("cuda_graph_capturing", r, now, log_t)
        elif ev == "end_main":
            self.capture_progress = None if self.capture_progress is None else dict(self.capture_progress, done=True)
            self._milestone("cuda_graph_captured", r, now, log_t)

    def _on_capturing(self, msg, r, rank, now, log_t):
        prog = capture_progress(msg, self.capture_bs, self.window)
        if prog is not None:
            prog["rank"] = r
            self.capture_progress = prog

    def _on_sched_info(self, msg, r, rank, now, log_t):
        self.window.match("sched_info", msg)
        self.max_total_num_tokens = num(msg, "max_total_num_tokens=", int)
        for key in ("max_prefill_tokens", "max_running_requests", "context_len", "chunked_prefill_size"):
            val = num(msg, key + "=", int)
            if val is not None:
                self.scheduler_info[key] = val
        gm = num(msg, "available_gpu_mem=")
        if gm is not None:
            self.scheduler_info["available_gpu_mem_gb"] = gm
        if rank:
            self._rank(r)

    def _on_uvicorn(self, msg, r, rank, now, log_t):
        m = re.search(r"Uvicorn running on (\S+)", msg)
        if m:
            self.http_url = m.group(1)
            pm = re.search(r":(\d+)/?$", self.http_url)
            if pm:
                self.http_port = int(pm.group(1))
        self._milestone("http_up", None, now, log_t)

    def _on_ready(self, msg, r, rank, now, log_t):
        self.ready = True
        if self.failure and self.failure.get("bare_traceback"):
            self.failure = None  # a traceback SGLang survived (printed, caught): the server came up after it
        self._milestone("ready", None, now, log_t)

    def _on_port_wait(self, msg, r, rank, now, log_t):
        pw = re.search(r"port (\d+) is in use\. Waiting", msg)
        if pw:
            self.port_waits.add(int(pw.group(1)))

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
        """Record that no line arrived for ``seconds`` (the caller owns the clock, see ``is_stalled``)."""
        self.stall = {"seconds": round(seconds, 1), "phase": self.phase}

    @property
    def tail(self):
        """The last lines read (all lines, not only the ones the grammar used)."""
        return self.tail_lines()

    def tail_lines(self):
        text = self._tail_raw.decode("utf-8", "replace").replace("\x00", "")
        lines = [ln for ln in re.split(r"[\r\n]", _ANSI_RE.sub("", text)) if ln.strip()]
        return lines[-self._tail_n :]

    def result(self, details=False):
        """The result dict::

            {"outcome": one of OUTCOMES, "phase": one of PHASES or None, "format": "0.4.9-0.5.8" | "0.5.14+" | ...,
             "ranks": {label: {RANK_FIELDS..., "draft": {RANK_FIELDS...} when a draft model runs on the rank}},
             "max_total_num_tokens": int|None, "diagnosis": str, "suggestion": dict|None, "totals": {...},
             "server_args": {...}, "milestones": {phase: {"t", "log_t"}}, "capture_progress": dict|None,
             "failure": dict|None, "http_port": int|None, "lines": int (lines the grammar read), "bytes": int,
             "skipped_lines": int (lines longer than MAX_LINE)}

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
            "bytes": self.bytes_read,
            "skipped_lines": self.skipped_lines,
        }


def parse_text(text, now=None):
    log = StartupLog()
    log.feed(text, now=now)
    log.finish(now=now)
    return log
