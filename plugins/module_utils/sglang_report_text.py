# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The fleet report (sglang_report's document) as plain text: what runs where, and the last roll's timeline.

Written as report.txt beside index.html, printed by ``bin/sglang-report --text``. Every text that comes from a host
passes through ``neutral`` (control and bidi characters shown escaped), so a record cannot rewrite a terminal line.
"""

from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.module_utils.sglang_report import (
    event_detail,
    benchmark_text,
    gpu_health_text,
    replica_state_text,
)
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_report_html import neutral

# What runs, and what ran before it: (label, current key, previous key) of a host's "versions".
RUNS = (
    ("build set", "build_set", "build_set_previous"),
    ("driver", "driver", "driver_previous"),
    ("model", "model_commit", "model_previous"),
)


def _clock(stamp):
    text = str(stamp or "")
    return text[11:19] if len(text) >= 19 else text


def runs_lines(hosts):
    """One line per host: what runs and what ran before it."""
    lines = []
    for h in hosts:
        v = h.get("versions") or {}
        parts = []
        for label, now, before in RUNS:
            parts.append("%s %s (before: %s)" % (label, v.get(now) or "-", v.get(before) or "-"))
        lines.append("%s  %s  %s" % (neutral(h["host"]), neutral(h["outcome"]), neutral("; ".join(parts))))
    return lines


def roll_lines(roll):
    """The last roll: its state, then per replica its state and each step with its time."""
    if not roll:
        return ["No roll recorded (deployment.json has no roll: no restart behind the router yet)."]
    head = "Last roll %s: %s" % (neutral(roll["id"]), neutral(roll["state"]))
    if roll.get("stopped_at"):
        head += " at %s - %s" % (neutral(roll["stopped_at"]), neutral(roll.get("why") or "no reason recorded"))
    lines = [head]
    for r in roll["replicas"]:
        state = replica_state_text(r)
        lines.append("  %s (%s): %s" % (neutral(r["name"]), neutral(", ".join(r["hosts"])), neutral(state)))
        for e in r["events"]:
            offset = "+%d s" % e["offset"] if e.get("offset") is not None else "?"
            detail = event_detail(e)
            lines.append(
                "    %8s  %s  %-10s %s%s"
                % (
                    offset,
                    neutral(_clock(e.get("at"))),
                    neutral(e["host"]),
                    neutral(e.get("label")),
                    (" - " + neutral(detail)) if detail else "",
                )
            )
    return lines


def render_text(data):
    """The text report of a report document."""
    s = data.get("summary") or {}
    lines = [
        "SGLang fleet report, generated %s: %s GPU server(s), %s ready, %s not ready%s"
        % (
            neutral(data.get("generated_at")),
            s.get("hosts"),
            s.get("ready"),
            s.get("failed"),
            "; %s router host(s)" % s["routers"] if s.get("routers") else "",
        ),
        "",
        "What runs where:",
    ]
    lines += ["  " + x for x in runs_lines(data.get("hosts") or [])]
    health = [h for h in data.get("hosts") or [] if h.get("gpu_health")]
    if health:
        lines += ["", "GPU health (the last reading of the server stage):"]
        for h in health:
            lines.append("  %s  %s" % (neutral(h["host"]), neutral(gpu_health_text(h["gpu_health"]))))
            lines += ["    - " + neutral(x) for x in h["gpu_health"].get("problems") or []]
    benched = [h for h in data.get("hosts") or [] if h.get("benchmark")]
    if benched:
        lines += ["", "Benchmark after the last start (against the host's baseline; a router host's: the fleet's):"]
        lines += [
            "  %s%s  %s"
            % (neutral(h["host"]), " (the fleet through this router)" if h.get("role") == "router" else "",
               neutral(benchmark_text(h["benchmark"])))
            for h in benched
        ]  # fmt: skip
    lines.append("")
    lines += roll_lines(data.get("roll"))
    return "\n".join(lines) + "\n"
