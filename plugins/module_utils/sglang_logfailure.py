# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Failure classification for the SGLang log engine: which outcome a failure line means, with the numbers it
carries (the texts themselves are entries of ``sglang_versions``)."""

from __future__ import annotations

__metaclass__ = type

import re

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_versions as versions

_UNITS = {"B": 1.0 / 2**30, "KiB": 1.0 / 2**20, "MiB": 1.0 / 1024, "GiB": 1.0, "GB": 1.0, "TiB": 1024.0}
_TRIED_RE = re.compile(r"Tried to allocate (\d{1,12}(?:\.\d{1,6})?) ?(GiB|MiB|KiB|B)\b")
_FREE_RE = re.compile(r"of which (\d{1,12}(?:\.\d{1,6})?) ?(GiB|MiB|KiB|B) (?:is )?free")
_TOTAL_RE = re.compile(r"total capac(?:i)?ty of (\d{1,12}(?:\.\d{1,6})?) ?(GiB|MiB)")
_GPU_IDX_RE = re.compile(r"\bGPU (\d+) has a total")
_SMEM_NUM_RE = re.compile(r"Required: (\d+), Hardware limit: (\d+)")
_KV_ABOVE_RE = re.compile(r"Raise --mem-fraction-static above (\d+(?:\.\d+)?)")
_KV_PROFILED_RE = re.compile(r"max_total_tokens=(\d+) is larger than the profiled value (-?\d+)")
_PORT_TUPLE_RE = re.compile(r"\('([^']*)', (\d+)\)")
_PORT_NOT_AVAIL_RE = re.compile(r"\S+ at (\d+) is not available in \d+ seconds")
_STORE_RE = re.compile(r"Timed out after (\d+) seconds waiting for clients\. (\d+)/(\d+) clients joined")
_CLIENT_RE = re.compile(r"timed out after (\d+)(m?s) while trying to connect to \(([^,()]+), (\d+)\)")
_FRAME_RE = re.compile(r'^\s*File "[^"]+", line \d+')
_EXC_LINE_RE = re.compile(r"^\s*(?:[\w.]+\.)?\w*(?:Error|Exception|Interrupt)\b\s*[:(]")


def _size(msg, rx):
    m = rx.search(msg)
    return float(m.group(1)) * _UNITS.get(m.group(2), 1.0) if m else None


class FailureMixin:
    """Mixed into ``StartupLog``: ``_failure_line`` returns True when the line was a failure (or its echo)."""

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
            "t": now if cur is None or specific else cur["t"],
            "specific": specific,
        }

    def _oom_numbers(self, msg):
        for key, rx in (("tried_gb", _TRIED_RE), ("free_gb", _FREE_RE), ("total_gb", _TOTAL_RE)):
            val = _size(msg, rx)
            if val is not None:
                self.oom[key] = round(val, 3)
        gm = _GPU_IDX_RE.search(msg)
        if gm:
            self.oom["gpu"] = int(gm.group(1))

    def _cut_traceback(self, now):
        """The log ends inside a traceback: during capture that is a capture failure whose text was cut off."""
        capturing = self.phase == "cuda_graph_capturing" or any(s.capture_open for s in self.ranks.values())
        line = "log ends inside a traceback%s" % (" during CUDA-graph capture" if capturing else "")
        self.graph_fail.setdefault("stage", "unknown") if capturing else None
        self._set_failure("crash", line, self.in_traceback.get("rank"), now, False)
        self.failure["cut"] = True
        self.failure["during_capture"] = capturing

    def _failure_line(self, msg, rank, now):
        fid = versions.failure_of(msg)
        if fid is None:
            if rank is None and _EXC_LINE_RE.search(msg):
                self.last_error = msg.strip()[:500]  # the exception line that ends a traceback
                self.first_error = self.first_error or self.last_error
                if self.in_traceback is not None and self.failure is None:
                    # a traceback and its exception, with no SGLang failure line around it: a crash whose cause is
                    # this exception (cleared again if the server becomes ready after it)
                    self._set_failure("crash", msg, self.in_traceback.get("rank"), now, False)
                    self.failure["bare_traceback"] = True
                self.in_traceback = None
                return False
            if rank is None and self.in_traceback is None and _FRAME_RE.match(msg):
                self.in_traceback = {"rank": self._ctx_rank, "implicit": True}  # frames without their header
            return False
        entry = versions.ENTRY[fid]
        if entry["narrows"] and (entry["first"] or entry["last"]):
            self.window.narrow_entry(entry)  # a failure text of known releases narrows the format too
        if fid in ("traceback", "scheduler_exception"):
            self.in_traceback = {"rank": rank if rank is not None else self._ctx_rank}
            if fid == "traceback":
                return True
        if fid == "sm120_smem":
            nm = _SMEM_NUM_RE.search(msg)
            if nm:
                self.sm120 = {"required": int(nm.group(1)), "limit": int(nm.group(2))}
            self.in_traceback = None
            self._set_failure("sm120_shared_memory", msg, rank, now, True)
            return True
        oom = versions.failure_of(msg, "oom") is not None
        if oom:
            self._oom_numbers(msg)
        if fid in ("capture_failed", "prefill_capture_failed", "piecewise_failed", "prefill_backend_failed"):
            self.in_traceback = None
            stage = {"prefill_capture_failed": "prefill", "prefill_backend_failed": "prefill"}.get(fid)
            if fid == "piecewise_failed":
                stage = "piecewise"
            if stage is None:
                head = msg.split("failed", 1)[0]
                stage = "draft" if ("draft" in head or "MTP" in head) else "decode"
            gf = self.graph_fail
            if not gf or gf.get("stage") == "decode":
                gf["stage"] = stage
            gf["oom"] = gf.get("oom") or oom
            gf.setdefault("line", msg.strip()[:300])
            self.oom.setdefault("rank", rank if rank is not None else self._ctx_rank)
            self.oom["during"] = gf["stage"]
            if versions.failure_of(msg, "nccl") is not None:
                self._set_failure("nccl_error", msg, rank, now, True)
            elif oom or "memory" in msg.lower() or not self.failure:
                self._set_failure("oom_cuda_graph" if oom else "crash", msg, rank, now, oom)
                if not oom:
                    self.failure["graph_failure"] = gf["stage"]
            return True
        if fid == "piecewise_hint":  # 0.5.8/0.5.9 hint lines after "Capture cuda graph failed"
            if self.graph_fail.get("stage") in (None, "decode"):
                self.graph_fail["stage"] = "piecewise"
                self.oom["during"] = "piecewise"
                if self.failure and self.failure.get("graph_failure"):
                    self.failure["graph_failure"] = "piecewise"
            return True
        if fid == "graph_hint":
            return True
        if oom:
            self.in_traceback = None
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
        if fid in ("kv_not_enough", "kv_no_memory", "kv_hybrid_pool", "kv_swa_cap", "kv_swa_pool"):
            self.in_traceback = None
            am = _KV_ABOVE_RE.search(msg)
            if am:
                self.kv_fail["min_fraction"] = float(am.group(1))
            self.kv_fail.setdefault("kind", fid)
            self._set_failure("oom_kv_pool", msg, rank, now, True)
            return True
        if fid == "kv_profiled":
            pm = _KV_PROFILED_RE.search(msg)
            if pm:
                self.kv_fail["profiled_tokens"] = int(pm.group(2))
                if int(pm.group(2)) <= 0:  # the KV pool cannot be allocated at all
                    self.kv_fail.setdefault("kind", "negative_profiled")
                    self._set_failure("oom_kv_pool", msg, rank, now, True)
            return True
        if fid == "unbalanced":
            self.unbalanced = msg.strip()[:300]
            if rank is None or "Error" in msg.split("The memory", 1)[0]:  # raised (<= 0.5.x): start-up ends here
                self._set_failure("memory_unbalanced", msg, rank, now, True)
            return True
        if fid in ("port_errno", "port_not_available", "port_internal"):
            m = _PORT_TUPLE_RE.search(msg)
            if m:
                self.port = int(m.group(2))
            elif fid == "port_not_available":
                pm = _PORT_NOT_AVAIL_RE.search(msg)
                self.port = int(pm.group(1)) if pm else "internal"
            elif fid == "port_internal":
                self.port = "internal"
            else:  # "[Errno 98] Address already in use" without the address: the HTTP port we were given
                self.port = self.server_args.get("port") or self.http_port or "unknown"
            self._set_failure("port_in_use", msg, rank, now, True)
            return True
        if fid == "dist_rendezvous":
            self.in_traceback = None
            sm = _STORE_RE.search(msg)
            cm = _CLIENT_RE.search(msg)
            if sm:
                self.rendezvous = {"side": "head", "seconds": int(sm.group(1)), "joined": int(sm.group(2)),
                                   "world": int(sm.group(3))}  # fmt: skip
            elif cm:
                ms = cm.group(2) == "ms"
                self.rendezvous = {"side": "node", "seconds": int(cm.group(1)) // (1000 if ms else 1),
                                   "host": cm.group(3), "port": int(cm.group(4))}  # fmt: skip
            self._set_failure("dist_init_timeout", msg, rank, now, True)
            return True
        if fid == "nvshmem":
            self.first_error = self.first_error or msg.strip()[:300]
            self._set_failure("crash", msg, rank, now, True)
            self.failure["cause"] = "nvshmem"
            return True
        if fid == "child_exit":
            if self.failure is None or not self.failure["specific"]:
                first = self.first_error
                if self.failure is None:
                    self._set_failure("crash", msg, rank, now, False)
                self.failure["child_exit"] = msg.strip()[:300]
                self.failure.setdefault("first_error", first)
            return True
        if fid == "nccl":
            self._set_failure("nccl_error", msg, rank, now, True)
            if "ncclRemoteError" in msg or "remote process exited" in msg or "closed by peer" in msg:
                self.failure["peer_lost"] = True  # a consequence: another node (or process) died first
            return True
        if fid in ("warmup_failed", "grpc_warmup_failed", "rust_warmup_failed"):
            self._set_failure("crash", msg, rank, now, True)
            self.failure["warmup"] = True
            return True
        if fid in ("crash", "scheduler_exception"):
            if self.failure is None:
                self._set_failure("crash", msg, rank, now, False)
            return True
        return False
