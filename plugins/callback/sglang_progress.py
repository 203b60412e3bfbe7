# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

__metaclass__ = type

DOCUMENTATION = r"""
name: sglang_progress
type: aggregate
short_description: Live SGLang start-up progress and a per-GPU memory summary for llmops.sglang.sglang_server
version_added: "0.1.0"
description:
  - Prints a line for every attempt and result of C(llmops.sglang.sglang_server) (phase, elapsed time, CUDA-graph
    capture progress such as C(bs 57/58), per-rank KV tokens), and at the end of the play a summary per host - a
    per-GPU memory bar (weights | KV cache | CUDA graphs | free) from the numbers SGLang logged, the start-up
    timeline, the KV token count and the outcome.
  - Works beside any stdout callback. When the stdout callback is a JSON one (its name contains C(json)) the lines
    go to stderr so the JSON on stdout stays valid.
  - Retries (C(until)/C(retries) with the module's O(llmops.sglang.sglang_server#module:wait_budget)) arrive as
    C(v2_runner_retry) events, which carry the structured result while the task still runs.
  - For C(llmops.sglang.hf_snapshot) it prints each slice's progress per host (files done, bytes, rate, ETA) and the
    final line.
requirements:
  - enable in ansible.cfg (C(callbacks_enabled = llmops.sglang.sglang_progress)) or ANSIBLE_CALLBACKS_ENABLED
"""

import re
import sys

from ansible import constants as C
from ansible.plugins.callback import CallbackBase

ACTIONS = ("llmops.sglang.sglang_server", "sglang_server")
PLAN_ACTIONS = ("llmops.sglang.sglang_plan", "sglang_plan")
DOWNLOAD_ACTIONS = ("llmops.sglang.hf_snapshot", "hf_snapshot")


def planned_text(plan, res):
    """'planned 425728 KV tokens at 0.88 (ok), actual 425664' from an sglang_plan result's plan and a server result."""
    if not plan or plan.get("kv_tokens") is None:
        return ""
    actual = (res.get("totals") or {}).get("kv_tokens_min") or res.get("max_total_num_tokens")
    text = "planned %d KV tokens at mem-fraction-static %.2f (%s)" % (
        plan["kv_tokens"],
        plan.get("mem_fraction_static") or 0.0,
        plan.get("verdict"),
    )
    if actual:
        text += ", actual %d (%+.2f %%)" % (actual, 100.0 * (actual - plan["kv_tokens"]) / plan["kv_tokens"])
    return text


BAR_WIDTH = 40
_SEGMENTS = (("weights", "W"), ("kv", "K"), ("graphs", "G"), ("other", "o"), ("free", "."))


def is_sglang_result(action, res):
    if action in ACTIONS or (action or "").endswith(".sglang_server"):
        return True
    return isinstance(res, dict) and "phase" in res and "ranks" in res and "outcome" in res


def _gb(x):
    return "-" if x is None else "%.1f" % x


def _rank_key(label):
    """'DP0 TP10' sorts after 'DP0 TP2': compare the numbers, not the text."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", label or "")]


def _gb2(x):
    """GB as SGLang prints them (two decimals), so the summary matches the log lines it came from."""
    return "-" if x is None else "%.2f" % x


def capture_text(prog):
    if not prog or prog.get("done"):
        return ""
    if prog.get("index") and prog.get("total"):
        # "bs i/N": i-th of N batch sizes (captured largest first); the size itself when it differs from i
        bs = prog.get("bs")
        return "bs %d/%d" % (prog["index"], prog["total"]) + (
            " (bs=%d)" % bs if bs not in (None, prog["index"]) else ""
        )
    if prog.get("bs") is not None:
        return "bs %s" % prog["bs"]
    if prog.get("num_tokens") is not None:
        return "num_tokens %s" % prog["num_tokens"]
    return ""


def kv_text(ranks, limit=8):
    vals = [(label or "rank", fig.get("kv_tokens")) for label, fig in (ranks or {}).items() if fig.get("kv_tokens")]
    if not vals:
        return ""
    tokens = {v for _, v in vals}
    if len(tokens) == 1:
        return "KV %d tokens x %d rank%s" % (vals[0][1], len(vals), "" if len(vals) == 1 else "s")
    shown = " ".join("%s=%d" % lv for lv in vals[:limit])
    return "KV " + shown + (" ..." if len(vals) > limit else "")


def render_live(host, res, attempt=None, retries=None):
    """One line for a retry or a result: host, phase, elapsed, capture progress, KV tokens, outcome."""
    bits = ["[sglang] %s:" % host, res.get("phase") or "starting"]
    if res.get("elapsed") is not None:
        bits.append("%ds" % round(res["elapsed"]))
    cap = capture_text(res.get("capture_progress"))
    if cap and res.get("phase") == "cuda_graph_capturing":
        bits.append(cap)
    kv = kv_text(res.get("ranks"))
    if kv:
        bits.append(kv)
    if attempt:
        bits.append("(attempt %s%s)" % (attempt, "/%s" % retries if retries else ""))
    if res.get("done") is not False and res.get("outcome"):
        bits.append("-> " + res["outcome"])
    return " ".join(bits)


def memory_segments(fig, pre_load=None):
    """GiB per segment of one GPU: weights, kv, graphs, other (pre-load memory not otherwise explained), free."""
    weights = fig.get("weights_gb") or 0.0
    kv = fig.get("kv_size_gb") or 0.0
    graphs = fig.get("cuda_graph_mem_gb") or 0.0
    free = fig.get("avail_after_graph_gb")
    if free is None:
        free = fig.get("avail_after_pool_gb")
    if free is None:
        free = fig.get("avail_after_weights_gb") or 0.0
    known = weights + kv + graphs + free
    other = max(0.0, pre_load - known) if pre_load else 0.0
    return {"weights": weights, "kv": kv, "graphs": graphs, "other": other, "free": free}


def render_bar(segments, width=BAR_WIDTH):
    total = sum(segments.values())
    if total <= 0:
        return "[" + " " * width + "]"
    cells = []
    acc = 0.0
    used = 0
    for name, ch in _SEGMENTS:
        acc += segments[name]
        end = round(acc / total * width)
        cells.append(ch * max(0, end - used))
        used = max(used, end)
    return "[" + "".join(cells).ljust(width)[:width] + "]"


def render_timeline(milestones):
    if not milestones:
        return ""
    order = sorted(milestones.items(), key=lambda kv: kv[1])
    return " -> ".join("%s %ds" % (name, round(t)) for name, t in order)


def render_summary(host, res, width=BAR_WIDTH):
    lines = ["[sglang] %s: %s (phase %s, format %s)" % (host, res.get("outcome"), res.get("phase"), res.get("format"))]
    pre = (res.get("totals") or {}).get("pre_load_min_gb")
    ranks = res.get("ranks") or {}
    if ranks:
        lines.append("  GPU memory         W weights  K KV cache  G CUDA graphs  o other  . free")
        label_w = max(len(label or "gpu") for label in ranks)
        for label, fig in sorted(ranks.items(), key=lambda kv: _rank_key(kv[0])):
            seg = memory_segments(fig, pre)
            tokens = fig.get("kv_tokens")
            lines.append(
                "  %s %s weights %s GB | #tokens %s | KV size %s GB | avail %s GB | graphs %s GB | free %s GB"
                % (
                    (label or "gpu").ljust(label_w),
                    render_bar(seg, width),
                    _gb2(fig.get("weights_gb")),
                    "-" if tokens is None else tokens,
                    _gb2(fig.get("kv_size_gb")),
                    _gb2(fig.get("avail_after_pool_gb")),
                    _gb2(fig.get("cuda_graph_mem_gb")),
                    _gb2(seg["free"]),
                )
            )
    tl = render_timeline(res.get("milestones"))
    if tl:
        lines.append("  timeline: " + tl)
    kv = kv_text(ranks)
    mtt = res.get("max_total_num_tokens")
    if kv or mtt:
        lines.append("  " + ", ".join(x for x in (kv, "max_total_num_tokens=%s" % mtt if mtt else "") if x))
    if res.get("outcome") != "ready" and res.get("diagnosis"):
        lines.append("  diagnosis: " + res["diagnosis"])
    return "\n".join(lines)


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "llmops.sglang.sglang_progress"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, display=None):
        super().__init__(display=display)
        self._final = {}
        self._plans = {}
        stdout_cb = ""
        try:
            stdout_cb = C.config.get_config_value("DEFAULT_STDOUT_CALLBACK") or ""
        except Exception:  # config lookup is best effort
            stdout_cb = getattr(C, "DEFAULT_STDOUT_CALLBACK", "") or ""
        self._to_stderr = "json" in str(stdout_cb)

    def _emit(self, text):
        if self._to_stderr:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
        else:
            self._display.display(text)

    def _take(self, result):
        task = result.task
        action = getattr(task, "action", None)
        res = result.result
        if not is_sglang_result(action, res) or "phase" not in res:
            return None
        return res

    def v2_runner_retry(self, result):
        action = getattr(result.task, "action", None) or ""
        if action in DOWNLOAD_ACTIONS and isinstance(result.result, dict) and result.result.get("progress"):
            self._emit("[model] %s: %s" % (result.host.get_name(), result.result["progress"]))
            return
        res = self._take(result)
        if res is not None:
            self._emit(render_live(result.host.get_name(), res, res.get("attempts"), res.get("retries")))

    def _final_result(self, result):
        res = self._take(result)
        if res is None:
            return
        host = result.host.get_name()
        self._emit(render_live(host, res))
        if res.get("done") is not False:
            self._final[host] = res

    def v2_runner_on_ok(self, result):
        action = getattr(result.task, "action", None) or ""
        res = result.result
        if action in DOWNLOAD_ACTIONS and isinstance(res, dict) and res.get("progress"):
            self._emit("[model] %s: %s (done)" % (result.host.get_name(), res["progress"]))
            return
        if action in PLAN_ACTIONS and isinstance(res, dict) and res.get("plan") and "retry" not in res:
            self._plans[result.host.get_name()] = res["plan"]  # the plan of the attempt that follows
            return
        self._final_result(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._final_result(result)

    def v2_playbook_on_stats(self, stats):
        for host in sorted(self._final):
            self._emit(render_summary(host, self._final[host]))
            planned = planned_text(self._plans.get(host), self._final[host])
            if planned:
                self._emit("  " + planned)
