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
  - At the end of the play it also writes the fleet report, C(<report_dir>/<UTC time>/index.html) (one
    self-contained page) and C(report.json) beside it, from the deployment records, the server results, the memory
    plans and the failed tasks it saw, and prints the page's path. The report tool renders the same page from saved
    records (C(python3 -m ansible_collections.llmops.sglang.plugins.plugin_utils.sglang_report_cli)).
  - For C(llmops.sglang.hf_snapshot) it prints each slice's progress per host (files done, bytes, rate, ETA) and the
    final line.
requirements:
  - enable it in the C([defaults]) section of your ansible.cfg, C(callbacks_enabled = llmops.sglang.sglang_progress),
    or for one run with E(ANSIBLE_CALLBACKS_ENABLED=llmops.sglang.sglang_progress)
options:
  report_dir:
    description:
      - Directory the fleet report is written under, one subdirectory per run (C(<report_dir>/<UTC time>/)).
      - Unset, the control node user's state directory, C($XDG_STATE_HOME/llmops-sglang/reports), that is
        C(~/.local/state/llmops-sglang/reports) when E(XDG_STATE_HOME) is not set.
      - A relative path is taken from the current directory; C(~) is expanded. An empty value writes no report.
      - A report is written only when the play ran the server stage (a server result or a deployment record).
    type: str
    env:
      - name: SGLANG_REPORT_DIR
    ini:
      - section: callback_sglang_progress
        key: report_dir
"""

import os

import re
import sys

from ansible import constants as C
from ansible.plugins.callback import CallbackBase
from ansible_collections.llmops.sglang.plugins.module_utils import sglang_report as report
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_phases import order_key
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_report import memory_segments
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_report_html import neutral
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_report_html import render as render_report
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_report_text import render_text, roll_lines

ACTIONS = ("llmops.sglang.sglang_server", "sglang_server")
PLAN_ACTIONS = ("llmops.sglang.sglang_plan", "sglang_plan")
ATTEMPT_ACTIONS = ("llmops.sglang.sglang_attempt", "sglang_attempt")
DOWNLOAD_ACTIONS = ("llmops.sglang.hf_snapshot", "hf_snapshot")
RECORD_ACTIONS = ("llmops.sglang.deployment_record", "deployment_record")
BENCH_ACTIONS = ("llmops.sglang.sglang_bench", "sglang_bench")


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
    order = sorted(milestones.items(), key=order_key)
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
            draft = fig.get("draft")
            if draft:  # the draft model's own figures, never mixed into the target's
                dtok = draft.get("kv_tokens")
                lines.append(
                    "  %s %s draft   %s GB | #tokens %s | KV size %s GB | avail %s GB | graphs %s GB"
                    % (
                        "".ljust(label_w),
                        " " * (width + 2),
                        _gb2(draft.get("weights_gb")),
                        "-" if dtok is None else dtok,
                        _gb2(draft.get("kv_size_gb")),
                        _gb2(draft.get("avail_after_pool_gb")),
                        _gb2(draft.get("cuda_graph_mem_gb")),
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


def render_groups(finals):
    """One line per multi-node server (hosts whose logged server_args share --dist-init-addr): every rank of every
    node, e.g. ``16/16 ranks (TP0-TP7 on n0, TP8-TP15 on n1)``."""
    groups = {}
    for host, res in finals.items():
        sa = res.get("server_args") or {}
        if (sa.get("nnodes") or 1) > 1 and sa.get("dist_init_addr"):
            groups.setdefault(sa["dist_init_addr"], []).append((sa.get("node_rank") or 0, host, res))
    lines = []
    for addr, members in sorted(groups.items()):
        members.sort(key=lambda m: (m[0], m[1]))
        sa = members[0][2].get("server_args") or {}
        world = (sa.get("tp_size") or 1) * (sa.get("pp_size") or 1)
        parts, ready_ranks = [], 0
        for node_rank, host, res in members:
            labels = sorted((res.get("ranks") or {}), key=_rank_key)
            ready_ranks += len(labels)
            span = "%s-%s" % (labels[0], labels[-1]) if len(labels) > 1 else (labels[0] if labels else "no rank")
            outcome = "ready" if res.get("reached") else res.get("outcome")  # a non-head node logs no ready line
            parts.append("%s on %s (node %d, %s)" % (span, host, node_rank, outcome))
        lines.append(
            "[sglang] multi-node server at %s: %d node(s) of %s, %d/%d ranks: %s"
            % (addr, len(members), sa.get("nnodes"), ready_ranks, world, "; ".join(parts))
        )
    return lines


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "llmops.sglang.sglang_progress"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, display=None):
        super().__init__(display=display)
        self._final = {}
        self._plans = {}
        self._records = {}
        self._benchmarks = {}  # a benchmark's result by host (the router's, run from a replica's head)
        self._failed = {}
        self._unreachable = {}
        self._groups = {}  # {host: its inventory group names}, from the hosts of the results
        self._rolled = False  # a step of a roll was recorded in this run: print the roll's timeline at the end
        self._playbook = None
        stdout_cb = ""
        try:
            stdout_cb = C.config.get_config_value("DEFAULT_STDOUT_CALLBACK") or ""
        except Exception:  # config lookup is best effort
            stdout_cb = getattr(C, "DEFAULT_STDOUT_CALLBACK", "") or ""
        self._to_stderr = "json" in str(stdout_cb)

    def _emit(self, text):
        text = neutral(text)  # a log line or record cannot move the cursor or reorder the terminal line (bidi)
        if self._to_stderr:
            sys.stderr.write(text + "\n")
            sys.stderr.flush()
        else:
            self._display.display(text)

    def _note_groups(self, result):
        """Remember the inventory groups of the result's host (the report shows only GPU servers and routers)."""
        host = getattr(result, "host", None)
        get_groups = getattr(host, "get_groups", None)
        if get_groups is None:
            return
        try:
            names = {g if isinstance(g, str) else g.get_name() for g in get_groups() or ()}
        except Exception:  # best effort: a host whose groups cannot be read is kept in the report
            return
        self._groups.setdefault(host.get_name(), set()).update(names)

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

    def v2_playbook_on_start(self, playbook):
        self._playbook = os.path.basename(getattr(playbook, "_file_name", "") or "") or None

    def v2_runner_on_skipped(self, result):
        self._note_groups(result)

    def v2_runner_on_ok(self, result):
        self._note_groups(result)
        action = getattr(result.task, "action", None) or ""
        res = result.result
        facts = res.get("ansible_facts") if isinstance(res, dict) else None
        if isinstance(facts, dict) and isinstance(facts.get("server_deployment"), dict):
            self._records[result.host.get_name()] = facts["server_deployment"]  # roles/server/tasks/record_read.yml
            return
        if action in RECORD_ACTIONS and isinstance(res, dict) and isinstance(res.get("record"), dict):
            # the record as the roll's steps left it (a rejoin comes after the server role's record)
            self._records[result.host.get_name()] = res["record"]
            self._rolled = self._rolled or bool((getattr(result.task, "args", None) or {}).get("events"))
            return
        if action in BENCH_ACTIONS and isinstance(res, dict) and isinstance(res.get("figures"), dict):
            self._benchmarks[result.host.get_name()] = res  # a delegated task's host is the router, not the head
            return
        if action in DOWNLOAD_ACTIONS and isinstance(res, dict) and res.get("progress"):
            self._emit("[model] %s: %s (done)" % (result.host.get_name(), res["progress"]))
            return
        if action in PLAN_ACTIONS and isinstance(res, dict) and res.get("plan") and "retry" not in res:
            self._plans[result.host.get_name()] = res["plan"]  # the plan of the attempt that follows
            return
        if action in ATTEMPT_ACTIONS and isinstance(res, dict):
            if res.get("next_plan") and not res.get("finished"):  # the server role's plan of its next launch
                self._plans[result.host.get_name()] = res["next_plan"]
            return
        self._final_result(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._note_groups(result)
        if not ignore_errors:
            res = result.result if isinstance(result.result, dict) else {}
            self._failed[result.host.get_name()] = {"task": result.task.get_name(), "msg": res.get("msg", "")}
        self._final_result(result)

    def v2_runner_on_unreachable(self, result):
        self._note_groups(result)
        res = result.result if isinstance(result.result, dict) else {}
        self._unreachable[result.host.get_name()] = {"task": result.task.get_name(), "msg": res.get("msg", "")}

    def v2_playbook_on_stats(self, stats):
        for host in sorted(self._final):
            self._emit(render_summary(host, self._final[host]))
            planned = planned_text(self._plans.get(host), self._final[host])
            if planned:
                self._emit("  " + planned)
        for line in render_groups(self._final):
            self._emit(line)
        path, data = self._write_report(stats)
        if data and self._rolled:
            for line in roll_lines(data.get("roll")):
                self._emit("[sglang] " + line)
        if path:
            self._emit("[sglang] report: %s" % path)

    def _write_report(self, stats):
        """The fleet report of this play (see the report_dir option): (its path or None when none was written, its
        document or None)."""
        try:
            base = self.get_option("report_dir")
        except KeyError:  # options never loaded: constructed outside a play, so nowhere to put a report
            return None, None
        if base is None:
            base = report.default_report_base()
        if not base or not (self._final or self._records):
            return None, None
        base = os.path.abspath(os.path.expanduser(base))
        reported = set(self._final) | set(self._records)
        touched = set(self._failed) | set(self._unreachable) | set(getattr(stats, "processed", {}) or {})
        hosts, routers = report.report_hosts(reported, touched, self._groups)
        for host in hosts:  # a record that cannot be drawn (a NaN, invalid Unicode) is left out, saying so
            bad = report.unrepresentable(self._records.get(host), "its deployment record")
            if bad:
                self._emit("[sglang] report: %s's record left out: it holds %s" % (host, bad))
                self._records.pop(host, None)
        entries = [
            report.host_entry(
                host,
                record=self._records.get(host),
                result=self._final.get(host),
                plan=self._plans.get(host),
                failed_task=self._failed.get(host),
                unreachable=self._unreachable.get(host),
                router=host in routers,
                bench=self._benchmarks.get(host),
            )
            for host in hosts
        ]
        data = report.build_report(entries, playbook=self._playbook)
        try:
            page, text = render_report(data), render_text(data)
            return os.path.abspath(report.write_report(data, page, report.report_dir(base), text=text)), data
        except OSError as exc:
            self._emit("[sglang] report: not written (%s: %s)" % (exc.filename or base, exc.strerror or exc))
            return None, data
        except (AttributeError, TypeError, KeyError, ValueError, IndexError) as exc:  # a malformed record or result
            self._emit(
                "[sglang] report: not written (a record could not be drawn: %s)" % (str(exc).splitlines() or ["-"])[0]
            )
            return None, data
