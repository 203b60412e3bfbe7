# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The fleet report's data: one JSON document per run, built from what the play recorded.

Inputs, per host (any of them may be missing):

* the deployment record the server role writes on the host (``deployment.json``, roles/server/tasks/record.yml),
* the last result of ``llmops.sglang.sglang_server`` (outcome, phase, milestones, per-rank figures, diagnosis,
  log tail),
* the memory plan of ``llmops.sglang.sglang_plan``,
* the last task that failed on the host, when the play stopped before or outside the server stage.

``build_report`` turns them into the report document (schema ``SCHEMA``); ``sglang_report_html.render`` draws it.
This module only reshapes numbers that SGLang logged; it computes no memory arithmetic of its own.
"""

from __future__ import annotations

import datetime
import heapq
import json
import math
import os
import re

from ansible_collections.llmops.sglang.plugins.module_utils import deployment_record as record_schema
from ansible_collections.llmops.sglang.plugins.module_utils.private_files import write_private_files
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_phases import INTERVAL_LABELS, LAST, PHASE_INDEX

SCHEMA = "llmops.sglang/report-v1"

# The inventory groups whose hosts the report shows: the GPU servers (replicas) and the router hosts. A play that runs
# on the control node (the restart plan of playbooks/fleet_roll_plan.yml runs on localhost) is no server.
SERVER_GROUP = "gpu_servers"
ROUTER_GROUP = "sglang_routers"

SEGMENTS = ("weights", "kv", "graphs", "other", "free")
VERSION_KEYS = (
    "driver",
    "cuda",
    "torch",
    "torch_cuda",
    "sglang_version",
    "sglang_commit",
    "build_set",
    "build_set_previous",
    "driver_previous",
    "model_repo_id",
    "model_revision",
    "model_commit",
    "model_previous",
)
_RANK_SPLIT = re.compile(r"(\d+)")


class ReportInputError(ValueError):
    """An input file that is neither a saved report nor a deployment record."""


def rank_key(label):
    """'TP10' sorts after 'TP2': compare the numbers, not the text."""
    return [int(p) if p.isdigit() else p for p in _RANK_SPLIT.split(label or "")]


def _num(value):
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return value
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def memory_segments(fig, pre_load=None, total=None):
    """GiB of one GPU split into weights, KV cache, CUDA graphs, other and free, from the figures SGLang logged.

    "free" is what SGLang reported last (after capture, else after the pool, else after weights); "other" is the
    rest of the card that no logged figure explains (CUDA context, NCCL buffers, activations): the GPU's total
    memory when known, else the free memory seen before loading, minus the four logged parts.
    """
    draft = fig.get("draft") or {}  # speculative decoding: the draft model's memory is on the same GPU
    weights = (_num(fig.get("weights_gb")) or 0.0) + (_num(draft.get("weights_gb")) or 0.0)
    kv = (_num(fig.get("kv_size_gb")) or 0.0) + (_num(draft.get("kv_size_gb")) or 0.0)
    graphs = (_num(fig.get("cuda_graph_mem_gb")) or 0.0) + (_num(draft.get("cuda_graph_mem_gb")) or 0.0)
    free = None
    for key in ("avail_after_graph_gb", "avail_after_pool_gb", "avail_after_weights_gb"):
        free = _num(fig.get(key))
        if free is not None:
            break
    free = free or 0.0
    known = weights + kv + graphs + free
    ceiling = _num(total) or _num(pre_load)
    other = max(0.0, ceiling - known) if ceiling else 0.0
    return {"weights": weights, "kv": kv, "graphs": graphs, "other": other, "free": free}


def timeline(milestones, elapsed=None, outcome=None):
    """Intervals between consecutive milestones, in launch order, plus where the start-up ended.

    Returns {"phases": [{"phase", "label", "start", "end"}], "end": seconds, "failed_at": seconds|None}.
    The last reached milestone runs until ``elapsed`` when the start-up did not reach "ready", else the timeline
    ends at the "ready" milestone.
    """
    points = []
    for name in PHASE_INDEX:
        raw = (milestones or {}).get(name)
        t = _num(raw.get("t")) if isinstance(raw, dict) else _num(raw)  # StartupLog keeps {"t": ..}
        if t is not None:
            points.append((name, float(t)))
    points.sort(key=lambda p: (p[1], PHASE_INDEX[p[0]]))
    end = _num(elapsed)
    last_t = points[-1][1] if points else 0.0
    end = max(float(end), last_t) if end is not None else last_t
    if points and points[-1][0] == LAST:
        end = last_t  # the wait may return a moment after the ready line; the start-up ended there
    phases = []
    for i, (name, t) in enumerate(points):
        if name == LAST:
            break
        stop = points[i + 1][1] if i + 1 < len(points) else end
        phases.append({"phase": name, "label": INTERVAL_LABELS.get(name, name), "start": t, "end": stop})
    failed = outcome not in (None, "ready")
    return {"phases": phases, "end": end, "failed_at": end if failed else None}


def _gpu_total_gib(record, result):
    mib = _num((record or {}).get("gpu_memory_mib"))
    if mib:
        return mib / 1024.0
    return None


def _versions(record):
    rec = record or {}
    model = rec.get("model") or {}
    sets = rec.get("build_set") if isinstance(rec.get("build_set"), dict) else {}
    # what ran before (deployment.json "previous", carried by module_utils/deployment_record.py)
    before = rec.get("previous") if isinstance(rec.get("previous"), dict) else {}
    model_before = before.get("model") if isinstance(before.get("model"), dict) else {}
    out = {
        "driver": rec.get("driver"),
        "cuda": rec.get("cuda"),
        "torch": rec.get("torch"),
        "torch_cuda": rec.get("torch_cuda"),
        "sglang_version": rec.get("sglang_version"),
        "sglang_commit": rec.get("sglang_commit"),
        # the build set SGLang runs from and the one playbooks/rollback.yml goes to (deployment.json build_set)
        "build_set": sets.get("current"),
        "build_set_previous": sets.get("previous"),
        "model_repo_id": model.get("repo_id"),
        "model_revision": model.get("revision"),
        "model_commit": model.get("commit"),
        "driver_previous": before.get("driver"),
        "model_previous": "@".join(str(x) for x in (model_before.get("revision"), model_before.get("commit")) if x)
        or None,
    }
    return {k: (None if v in ("", None) else str(v)) for k, v in out.items()}


def _ranks_from_record(rec):
    """Per-rank figures of a record: the full 'ranks' map when present, else the older per-figure maps."""
    if isinstance(rec.get("ranks"), dict) and rec["ranks"]:
        return rec["ranks"]
    ranks = {}
    for field, key in (
        ("kv_tokens", "kv_tokens_per_rank"),
        ("kv_size_gb", "kv_size_gb_per_rank"),
        ("avail_after_pool_gb", "avail_after_pool_gb_per_rank"),
        ("cuda_graph_mem_gb", "cuda_graph_mem_gb_per_rank"),
    ):
        for label, value in (rec.get(key) or {}).items():
            ranks.setdefault(label, {})[field] = value
    return ranks


def _kv(plan, ranks, max_total, record):
    mem = (record or {}).get("memory") or {}
    plan = plan or mem.get("planned") or {}
    planned = _num(plan.get("kv_tokens")) if isinstance(plan, dict) else None
    tokens = [_num(f.get("kv_tokens")) for f in ranks.values() if _num(f.get("kv_tokens")) is not None]
    actual = min(tokens) if tokens else _num(max_total)
    out = {
        "planned": int(planned) if planned is not None else None,
        "actual": int(actual) if actual is not None else None,
        "max_total_num_tokens": int(max_total) if _num(max_total) is not None else None,
        "planned_mem_fraction_static": _num(plan.get("mem_fraction_static")) if isinstance(plan, dict) else None,
        "verdict": plan.get("verdict") if isinstance(plan, dict) else None,
        "effective_mem_fraction_static": _num(mem.get("effective_mem_fraction_static")),
        "delta_pct": None,
    }
    if out["planned"] and out["actual"] is not None:
        out["delta_pct"] = round(100.0 * (out["actual"] - out["planned"]) / out["planned"], 2)
    return out


def _evidence(failure_line, tail):
    """Indexes of the log-tail lines that carry the failure signature the diagnosis rests on."""
    if not failure_line or not tail:
        return []
    needle = str(failure_line).strip()[:200]
    return [i for i, line in enumerate(tail) if needle and needle in str(line)]


def report_hosts(reported, touched, groups):
    """The hosts the report shows, sorted, and the router hosts among them: (hosts, routers).

    ``reported``: hosts that left a server result or a deployment record (GPU servers by what they ran);
    ``touched``: every other host the run saw (failed, unreachable, or only processed);
    ``groups``: {host: its inventory group names} for the hosts whose groups are known.
    A touched host is shown when it is in the ``gpu_servers`` or ``sglang_routers`` group; one whose groups are not
    known is kept (nothing says it is not a server); a host outside both groups (the control node) is left out.
    """
    groups = groups or {}
    fleet = {SERVER_GROUP, ROUTER_GROUP}
    hosts = set(reported)
    hosts |= {h for h in touched if h not in groups or fleet & set(groups[h])}
    routers = {
        h
        for h in hosts
        if h not in reported and ROUTER_GROUP in groups.get(h, ()) and SERVER_GROUP not in groups.get(h, ())
    }
    return sorted(hosts), routers


def gpu_health(value):
    """The record's GPU health verdict as the report shows it: {verdict, phase, problems} (at most 20 sentences, each
    scrubbed and cut), or None when the host has none (no reading, an older record, a malformed entry)."""
    if not isinstance(value, dict) or value.get("verdict") not in ("ok", "warning", "critical"):
        return None
    problems = value.get("problems") if isinstance(value.get("problems"), list) else []
    phase = value.get("phase") if value.get("phase") in ("idle", "load") else None
    return {
        "verdict": value["verdict"],
        "phase": phase,
        "problems": [record_schema.scrub_text(str(x))[:400] for x in problems[:20]],
    }


def gpu_health_text(health):
    """One phrase: 'ok (under load)', 'warning (idle): 2 checks' ... or None."""
    if not health:
        return None
    when = {"load": " (under load)", "idle": " (idle)"}.get(health.get("phase"), "")
    n = len(health.get("problems") or [])
    return "%s%s%s" % (health["verdict"], when, ": %d check(s) not ok" % n if n else "")


BENCH_VERDICTS = ("baseline", "ok", "slower", "failed")


def benchmark(value):
    """The record's benchmark after the start as the report shows it: {verdict, output_throughput, median_ttft_ms,
    median_itl_ms, slowdown_pct, max_slowdown_pct}, or None (not run, an older record, a malformed entry)."""
    if not isinstance(value, dict) or value.get("verdict") not in BENCH_VERDICTS:
        return None
    figures = value.get("figures") if isinstance(value.get("figures"), dict) else {}
    return {
        "verdict": value["verdict"],
        "output_throughput": _num(figures.get("output_throughput")),
        "median_ttft_ms": _num(figures.get("median_ttft_ms")),
        "median_itl_ms": _num(figures.get("median_itl_ms")),
        "slowdown_pct": _num(value.get("slowdown_pct")),
        "max_slowdown_pct": _num(value.get("max_slowdown_pct")),
    }


def benchmark_text(bench):
    """One phrase: 'ok: 418.2 tok/s, median TTFT 95.1 ms, ITL 17.9 ms, 2.5 % below the baseline' ... or None."""
    if not bench:
        return None
    parts = []
    if bench.get("output_throughput") is not None:
        parts.append("%.1f tok/s" % bench["output_throughput"])
    if bench.get("median_ttft_ms") is not None and bench.get("median_itl_ms") is not None:
        parts.append("median TTFT %.1f ms, ITL %.2f ms" % (bench["median_ttft_ms"], bench["median_itl_ms"]))
    if bench.get("slowdown_pct") is not None:
        parts.append(
            "%.1f %% below the baseline (allowed %s %%)" % (bench["slowdown_pct"], bench.get("max_slowdown_pct"))
        )
    return "%s: %s" % (bench["verdict"], ", ".join(parts)) if parts else bench["verdict"]


def host_entry(
    host, *, record=None, result=None, plan=None, failed_task=None, unreachable=None, router=False, bench=None
):
    """One host of the report from whatever the run left for it (see the module docstring). ``router``: a host of
    the sglang_routers group (no GPU server): shown, but no replica and not counted as a server. ``bench``: the
    result of a benchmark this run made for the host without a record of it (the router's, through the fleet)."""
    rec = record or {}
    res = result or {}
    ranks = res.get("ranks") or _ranks_from_record(rec)
    totals = res.get("totals") or rec.get("totals") or {}
    pre_load = _num(totals.get("pre_load_min_gb"))
    total = _gpu_total_gib(rec, res)
    outcome = res.get("outcome") or rec.get("outcome")
    if outcome is None:
        if unreachable:
            outcome = "unreachable"
        elif failed_task:
            outcome = "failed"
        elif rec:
            outcome = "ready" if rec.get("milestones", {}).get("ready") is not None else "unknown"
        else:
            outcome = "not_started"
    if failed_task and outcome == "ready":
        outcome = "failed"  # SGLang came up but a later task (smoke test, metrics check) failed
    gpus = []
    for label in sorted(ranks, key=rank_key):
        fig = ranks[label] or {}
        seg = memory_segments(fig, pre_load, total)
        gpus.append(
            {
                "rank": label or "GPU",
                "segments": {k: round(v, 3) for k, v in seg.items()},
                "total_gb": round(sum(seg.values()), 3),
                "kv_tokens": fig.get("kv_tokens"),
                "avail_after_pool_gb": fig.get("avail_after_pool_gb"),
            }
        )
    # no key in the report: SGLang's server_args line (api_key='...') may be in a failed start-up's log tail
    tail = [record_schema.scrub_text(x) for x in (res.get("log_tail") or rec.get("log_tail") or [])]
    failure = res.get("failure") or rec.get("failure") or {}
    failure_line = (
        record_schema.scrub_text(failure["line"]) if isinstance(failure, dict) and failure.get("line") else None
    )
    elapsed = res.get("elapsed", rec.get("startup_seconds"))
    entry = {
        "host": str(host),
        "replica": str(rec.get("replica") or host),
        "outcome": outcome,
        "phase": res.get("phase") or rec.get("phase"),
        "format": res.get("format") or rec.get("log_format"),
        "url": rec.get("url"),
        "unit": rec.get("unit"),
        "gpu_name": rec.get("gpu_name"),
        "gpu_count": rec.get("gpus"),
        "gpu_memory_gib": round(total, 2) if total else None,
        "versions": _versions(rec),
        "gpus": gpus,
        "timeline": timeline(res.get("milestones") or rec.get("milestones"), elapsed, outcome),
        "kv": _kv(plan, ranks, res.get("max_total_num_tokens", rec.get("max_total_num_tokens")), rec),
        "attempts": list(((rec.get("memory") or {}).get("attempts")) or []),
        "smoke_test": rec.get("smoke_test"),
        "metrics_check": rec.get("metrics_check"),
        "gpu_health": gpu_health(rec.get("gpu_health")),
        "benchmark": benchmark(rec.get("benchmark") or bench),
        "diagnosis": None,
        "suggestion": None,
        "failure_line": None,
        "log_excerpt": [],
        "evidence_lines": [],
        "failed_task": None,
        # the last roll this host took part in (deployment.json "roll"), its steps with their times
        "roll": record_schema.roll_summary(rec),
        "recorded": bool(rec),  # a deployment record exists (a router host has none)
        "role": "router" if router else "server",
    }
    if outcome != "ready":
        entry["diagnosis"] = record_schema.scrub(res.get("diagnosis") or rec.get("diagnosis"))
        entry["suggestion"] = res.get("suggestion") or rec.get("suggestion")
        entry["failure_line"] = failure_line
        entry["log_excerpt"] = tail
        entry["evidence_lines"] = _evidence(failure_line, tail)
    if failed_task:
        entry["failed_task"] = {"task": str(failed_task.get("task") or ""), "msg": str(failed_task.get("msg") or "")}
    if unreachable:
        entry["failed_task"] = {"task": str(unreachable.get("task") or ""), "msg": str(unreachable.get("msg") or "")}
    return entry


def build_report(hosts, playbook=None, generated_at=None):
    """The report document from host entries (``host_entry``), grouped into replicas."""
    hosts = sorted(hosts, key=lambda h: h["host"])
    servers = [h for h in hosts if h.get("role", "server") != "router"]
    replicas = {}
    for h in servers:
        replicas.setdefault(h["replica"], []).append(h)
    rep_list = []
    for name in sorted(replicas):
        members = replicas[name]
        outcomes = {m["outcome"] for m in members}
        rep_list.append(
            {
                "name": name,
                "hosts": [m["host"] for m in members],
                "outcome": "ready" if outcomes == {"ready"} else sorted(outcomes - {"ready"})[0],
            }
        )
    when = generated_at or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "roll": last_roll(hosts),
        "schema": SCHEMA,
        "generated_at": when,
        "playbook": playbook,
        # the GPU servers: "hosts" counts them (a router host is counted apart, in "routers")
        "summary": {
            "hosts": len(servers),
            "ready": sum(1 for h in servers if h["outcome"] == "ready"),
            "failed": sum(1 for h in servers if h["outcome"] != "ready"),
            "routers": len(hosts) - len(servers),
        },
        "replicas": rep_list,
        "hosts": hosts,
    }


def last_roll(hosts):
    """The newest roll of the fleet (the greatest roll id among the hosts' records), per replica in roll order.

    {"id", "state" (done, stopped, in_progress), "stopped_at" (replica) , "why", "replicas": [{"name", "hosts",
    "state", "why", "events": [{"host", "event", "label", "at", "offset" (s since the roll's first event), ...}]}]}.
    A replica without an event of that roll is ``not_reached`` when the roll stopped (the replicas after the stop were
    not touched) and ``not_in_roll`` otherwise (a roll of some replicas), with the id of its own last roll.
    None when no host has a roll.
    """
    rolls = [h for h in hosts if h.get("roll")]
    if not rolls:
        return None
    newest = max(str(h["roll"]["id"]) for h in rolls)
    replicas = {}
    for h in hosts:
        if h.get("recorded") or h.get("roll"):
            replicas.setdefault(h["replica"], []).append(h)
    taken = [e for h in rolls if str(h["roll"]["id"]) == newest for e in h["roll"]["events"]]
    stamps = [record_schema.parse_stamp(e.get("at")) for e in taken]
    start = min([t for t in stamps if t is not None], default=None)
    out = []
    for name, members in replicas.items():
        mine = [h for h in members if h.get("roll") and str(h["roll"]["id"]) == newest]
        if not mine:
            own = sorted({str(h["roll"]["id"]) for h in members if h.get("roll")})
            out.append({"name": name, "hosts": [h["host"] for h in members], "state": None, "why": None,
                        "events": [], "own_roll": own[-1] if own else None})  # fmt: skip
            continue
        per_host = []
        for h in mine:
            steps = []
            for e in h["roll"]["events"]:
                t = record_schema.parse_stamp(e.get("at"))
                offset = round(t - start) if (t is not None and start is not None) else None
                steps.append(dict(e, host=h["host"], offset=offset))
            per_host.append(steps)
        # each host's steps in the order it recorded them (times are whole seconds: a restart computed back from
        # SGLang's start-up seconds can fall in the second before the drain's); the hosts' steps merged by time
        events = list(heapq.merge(*per_host, key=lambda e: e["offset"] if e["offset"] is not None else 0))
        states = {h["roll"]["state"] for h in mine}
        state = "stopped" if "stopped" in states else ("done" if states == {"done"} else "in_progress")
        why = next((h["roll"]["why"] for h in mine if h["roll"]["state"] == "stopped" and h["roll"]["why"]), None)
        first = events[0]["offset"] if events and events[0]["offset"] is not None else None
        out.append({"name": name, "hosts": [h["host"] for h in members], "state": state, "why": why,
                    "events": events, "first": first})  # fmt: skip
    # roll order: the order the replicas' first steps happened in; those the roll did not reach after them
    out.sort(key=lambda r: (r["state"] is None, r.get("first") if r.get("first") is not None else 0, r["name"]))
    stopped = [r for r in out if r["state"] == "stopped"]
    for r in out:
        if r["state"] is None:
            r["state"] = "not_reached" if stopped else "not_in_roll"
        r.pop("first", None)
    states = {r["state"] for r in out} - {"not_reached", "not_in_roll"}
    return {
        "id": newest,
        "state": "stopped" if stopped else ("done" if states == {"done"} else "in_progress"),
        "stopped_at": stopped[0]["name"] if stopped else None,
        "why": stopped[0]["why"] if stopped else None,
        "replicas": out,
    }


STATE_TEXT = {
    "done": "done",
    "stopped": "the roll stopped here",
    "in_progress": "not finished",
    "not_reached": "not reached: the roll stopped before it",
    "not_in_roll": "not part of this roll",
}


def replica_state_text(rep):
    """A replica's place in the last roll in words (its state, why it stopped, its own last roll)."""
    text = STATE_TEXT.get(rep["state"], str(rep["state"]))
    if rep["state"] == "stopped" and rep.get("why"):
        text += ": " + str(rep["why"])
    if rep.get("own_roll"):
        text += " (its last roll: %s)" % rep["own_roll"]
    return text


def event_detail(event):
    """The few words after an event's label: the figures the event carries."""
    e = event
    name = e.get("event")
    if name == "drained":
        return "%s request(s) still in flight" % e["in_flight_left"] if e.get("in_flight_left") else "none in flight"
    if name == "restarted":
        parts = ["attempt %s" % e.get("attempt", 1)]
        if e.get("build_set"):
            parts.append("build set %s" % e["build_set"])
        if e.get("model_revision"):
            parts.append("model revision %s" % str(e["model_revision"])[:12])
        if e.get("mem_fraction_static") is not None:
            parts.append("mem-fraction-static %s" % e["mem_fraction_static"])
        return ", ".join(parts)
    if name == "ready":
        return "%.0f s start-up" % float(e["startup_seconds"]) if e.get("startup_seconds") is not None else ""
    if name == "failed":
        return "%s in phase %s: %s" % (e.get("outcome") or "error", e.get("phase") or "-", e.get("why") or "")
    if name == "rolled_back":
        moves = []
        if e.get("from_set") or e.get("to_set"):
            moves.append("build set from %s to %s" % (e.get("from_set") or "-", e.get("to_set") or "-"))
        if e.get("from_revision") or e.get("to_revision"):
            moves.append(
                "model revision from %s to %s"
                % (str(e.get("from_revision") or "-")[:12], str(e.get("to_revision") or "-")[:12])
            )
        return "; ".join(moves) or "from - to -"
    if name in ("stopped", "held_out"):
        return e.get("why") or ""
    if name == "driver_upgraded":
        return "from %s to %s" % (e.get("from_driver") or "-", e.get("to_driver") or "-")
    return ""


def _not_json_constant(name):
    raise ValueError("%s is not a JSON number" % name)


def unrepresentable(value, where="the file"):
    """None when every number of ``value`` is finite and every string encodes as UTF-8; else what and where, in words
    (a NaN or 1e999 cannot be drawn or counted, a lone surrogate cannot be written to the page)."""
    stack = [(value, where)]
    while stack:
        v, at = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return "a number that is not finite (%r) at %s" % (v, at)
        if isinstance(v, str):
            try:
                v.encode("utf-8")
            except UnicodeEncodeError:
                return "text that is not valid Unicode at %s" % at
        elif isinstance(v, dict):
            for k, item in v.items():
                if isinstance(k, str):
                    stack.append((k, at))
                stack.append((item, "%s.%s" % (at, k)))
        elif isinstance(v, list):
            stack.extend((item, "%s[%d]" % (at, i)) for i, item in enumerate(v))
    return None


def load_input(path, host=None):
    """(host entries, the saved report or None) of a saved report (its entries) or a deployment record (one entry).

    The host of a record is its ``host`` key, else ``host``, else the file name without ``.json``
    (``deployment.json`` on its own is named after the directory it is in).
    """
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read().decode("utf-8"), parse_constant=_not_json_constant)
    except OSError as exc:
        raise ReportInputError("cannot read %s: %s" % (path, exc.strerror or exc)) from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise ReportInputError("%s is not JSON (%s)" % (path, str(exc).splitlines()[0])) from None
    if not isinstance(data, dict):
        raise ReportInputError("%s holds a JSON %s, not an object" % (path, type(data).__name__))
    bad = unrepresentable(data, "its top level")
    if bad:
        raise ReportInputError("%s holds %s" % (path, bad))
    if data.get("schema") == SCHEMA:
        return list(data.get("hosts") or []), data
    if "milestones" in data and ("flags" in data or "model" in data):
        name = data.get("host") or host
        if not name:
            stem = os.path.splitext(os.path.basename(path))[0]
            name = os.path.basename(os.path.dirname(os.path.abspath(path))) if stem == "deployment" else stem
        return [host_entry(name, record=data)], None
    raise ReportInputError(
        "%s is neither a saved report (schema %s) nor a deployment record (keys milestones and flags)" % (path, SCHEMA)
    )


STATE_SUBDIR = os.path.join("llmops-sglang", "reports")


def default_report_base(environ=None):
    """Where reports go unless told otherwise: the control node user's state directory,
    ``$XDG_STATE_HOME/llmops-sglang/reports``, ``~/.local/state/llmops-sglang/reports`` when XDG_STATE_HOME is unset
    or not absolute (the XDG Base Directory Specification ignores a relative one)."""
    env = os.environ if environ is None else environ
    state = env.get("XDG_STATE_HOME") or ""
    if not os.path.isabs(state):
        state = os.path.join(os.path.expanduser("~"), ".local", "state")
    return os.path.join(state, STATE_SUBDIR)


def report_dir(base, when=None):
    """``base``/<UTC time>, e.g. reports/20261130-064210 (a suffix -2, -3... when two runs share a second)."""
    stamp = (when or datetime.datetime.now(datetime.timezone.utc)).strftime("%Y%m%d-%H%M%S")
    path = os.path.join(base, stamp)
    n = 2
    while os.path.exists(path):
        path = os.path.join(base, "%s-%d" % (stamp, n))
        n += 1
    return path


def write_report(data, html_text, out_dir, text=None):
    """Write report.json, index.html (and report.txt, the text form) into ``out_dir`` (0700; files 0600, atomic,
    never through a symlink: module_utils/private_files.py); return the path of index.html."""
    json_text = json.dumps(data, indent=2, sort_keys=True) + "\n"
    files = {"report.json": json_text, "index.html": html_text}
    if text is not None:
        files["report.txt"] = text
    return write_private_files(out_dir, files)[1]
