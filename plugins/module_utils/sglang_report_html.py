# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Draw the fleet report (sglang_report's document) as one self-contained HTML page.

Inline CSS and SVG only: no script, no external resource, and a Content-Security-Policy that forbids both, so the
page opens from a file, a mail attachment or an air-gapped host alike. Every text that comes from a host (log
lines, diagnoses, versions, host names) passes through ``esc`` and lands in text content or a quoted attribute,
never in markup.
"""

from __future__ import annotations

import html
import math
import re

from ansible_collections.llmops.sglang.plugins.module_utils.sglang_phases import PHASE_COLOURS
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_report import (
    SEGMENTS,
    event_detail,
    benchmark_text,
    gpu_health_text,
    replica_state_text,
)

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'"
SEGMENT_STYLE = {
    "weights": ("weights", "#4e79a7"),
    "kv": ("KV cache", "#59a14f"),
    "graphs": ("CUDA graphs", "#f28e2b"),
    "other": ("other", "#bab0ac"),
    "free": ("free", "#eceff1"),
}
VERSION_LABELS = (
    ("driver", "NVIDIA driver"),
    ("cuda", "CUDA toolkit"),
    ("torch", "torch"),
    ("torch_cuda", "torch built for CUDA"),
    ("sglang_version", "SGLang version"),
    ("sglang_commit", "SGLang commit"),
    ("build_set", "build set"),
    ("build_set_previous", "previous build set (rollback)"),
    ("driver_previous", "previous NVIDIA driver"),
    ("model_repo_id", "model"),
    ("model_revision", "model revision"),
    ("model_commit", "model commit"),
    ("model_previous", "previous model revision@commit"),
)
# C0 (but tab and newline), DEL, C1 and the invisible characters that reorder or hide text: bidi embeddings and
# overrides U+202A..U+202E, isolates U+2066..U+2069, marks U+061C/U+200E/U+200F, zero-width U+200B..U+200D, the
# separators U+2028/U+2029 and U+FEFF. Shown as \xNN / \uNNNN so a record cannot make a line read otherwise.
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")


def neutral(value):
    """``value`` as text with every character of _CONTROL shown as an escape (for HTML and for terminal lines)."""
    text = "" if value is None else str(value)
    return _CONTROL.sub(lambda m: ("\\x%02x" if ord(m.group(0)) < 0x100 else "\\u%04x") % ord(m.group(0)), text)


BAR_X, BAR_W, ROW_H = 80, 520, 22


def esc(value):
    """Text for HTML text content or a double-quoted attribute; control and bidi characters shown escaped."""
    return html.escape(neutral(value), quote=True)


def _gb(x):
    return "-" if x is None else "%.2f" % x


def _nice_step(span, ticks=8):
    if span <= 0:
        return 1.0
    raw = span / ticks
    mag = 10 ** math.floor(math.log10(raw))
    for m in (1, 2, 5, 10):
        if raw <= m * mag:
            return m * mag
    return 10 * mag


def _badge(outcome):
    cls = "ok" if outcome == "ready" else "bad"
    return '<span class="badge %s" data-outcome="%s">%s</span>' % (cls, esc(outcome), esc(outcome))


def gpu_bars_svg(host, scale_gb):
    gpus = host["gpus"]
    height = ROW_H * len(gpus) + 4
    out = [
        '<svg class="gpu-bars" role="img" width="%d" height="%d" viewBox="0 0 %d %d" '
        'aria-label="GPU memory of %s">' % (BAR_X + BAR_W + 180, height, BAR_X + BAR_W + 180, height, esc(host["host"]))
    ]
    for i, gpu in enumerate(gpus):
        y = 2 + i * ROW_H
        out.append('<g class="gpu-bar" data-host="%s" data-rank="%s">' % (esc(host["host"]), esc(gpu["rank"])))
        out.append('<text x="0" y="%d" class="lbl">%s</text>' % (y + 14, esc(gpu["rank"])))
        x = float(BAR_X)
        for seg in SEGMENTS:
            gb = gpu["segments"].get(seg) or 0.0
            w = BAR_W * gb / scale_gb if scale_gb else 0.0
            name, colour = SEGMENT_STYLE[seg]
            out.append(
                '<rect class="seg seg-%s" x="%.1f" y="%d" width="%.1f" height="16" fill="%s">'
                "<title>%s: %s GB</title></rect>" % (seg, x, y + 2, w, colour, esc(name), _gb(gb))
            )
            x += w
        out.append(
            '<rect x="%d" y="%d" width="%.1f" height="16" fill="none" stroke="#90a4ae"/>'
            % (BAR_X, y + 2, BAR_W * gpu["total_gb"] / scale_gb if scale_gb else 0)
        )
        tokens = gpu.get("kv_tokens")
        note = "%s GB, KV %s tokens" % (_gb(gpu["total_gb"]), "-" if tokens is None else tokens)
        out.append('<text x="%d" y="%d" class="note">%s</text>' % (BAR_X + BAR_W + 8, y + 14, esc(note)))
        out.append("</g>")
    out.append("</svg>")
    return "".join(out)


def timeline_svg(host, span):
    tl = host["timeline"]
    width, x0, bar_w = 820, 10, 780
    out = [
        '<svg class="timeline" role="img" width="%d" height="58" viewBox="0 0 %d 58" aria-label="start-up of %s">'
        % (width, width, esc(host["host"]))
    ]
    step = _nice_step(span)
    t = 0.0
    while t <= span + 1e-9:
        x = x0 + bar_w * t / span
        out.append('<line x1="%.1f" y1="4" x2="%.1f" y2="34" class="tick"/>' % (x, x))
        out.append('<text x="%.1f" y="48" class="axis">%ss</text>' % (x, ("%g" % round(t, 3))))
        t += step
    for ph in tl["phases"]:
        x = x0 + bar_w * ph["start"] / span
        w = max(1.0, bar_w * (ph["end"] - ph["start"]) / span)
        out.append(
            '<rect class="phase" data-phase="%s" x="%.1f" y="8" width="%.1f" height="22" fill="%s">'
            "<title>%s: %.1f s (from %.1f s)</title></rect>"
            % (
                esc(ph["phase"]),
                x,
                w,
                PHASE_COLOURS.get(ph["phase"], "#999"),
                esc(ph["label"]),
                ph["end"] - ph["start"],
                ph["start"],
            )
        )
        if w > 60:
            out.append('<text x="%.1f" y="23" class="inbar">%s</text>' % (x + 3, esc(ph["label"])))
    if tl.get("failed_at") is not None:
        x = x0 + bar_w * tl["failed_at"] / span
        out.append('<line x1="%.1f" y1="2" x2="%.1f" y2="36" class="fail"/>' % (x, x))
    elif host["outcome"] == "ready":
        x = x0 + bar_w * tl["end"] / span
        out.append('<line x1="%.1f" y1="2" x2="%.1f" y2="36" class="readyline"/>' % (x, x))
    out.append("</svg>")
    return "".join(out)


def _phase_table(host):
    rows = [
        '<tr data-phase="%s"><td><span class="sw" style="background:%s"></span>%s</td>'
        "<td>%.1f s</td><td>%.1f s</td></tr>"
        % (esc(p["phase"]), PHASE_COLOURS.get(p["phase"], "#999"), esc(p["label"]), p["start"], p["end"] - p["start"])
        for p in host["timeline"]["phases"]
    ]
    end = host["timeline"]["end"]
    what = "ready" if host["outcome"] == "ready" else "stopped (%s)" % host["outcome"]
    rows.append('<tr class="end"><td>%s</td><td>%.1f s</td><td></td></tr>' % (esc(what), end))
    return '<table class="phases"><tr><th>phase</th><th>from</th><th>took</th></tr>%s</table>' % "".join(rows)


def kv_block(host):
    kv = host["kv"]
    if kv["planned"] is None and kv["actual"] is None:
        return '<p class="muted">No KV-cache figures: SGLang did not allocate its pool.</p>'
    top = max(kv["planned"] or 0, kv["actual"] or 0) or 1
    out = ['<svg class="kv" width="560" height="50" viewBox="0 0 560 50" role="img" aria-label="KV tokens">']
    for i, (name, value, colour) in enumerate(
        (("planned", kv["planned"], "#bdbdbd"), ("actual", kv["actual"], "#59a14f"))
    ):
        y = 2 + 24 * i
        w = 0 if value is None else 360.0 * value / top
        out.append('<text x="0" y="%d" class="lbl">%s</text>' % (y + 14, name))
        out.append('<rect class="kv-%s" x="70" y="%d" width="%.1f" height="16" fill="%s"/>' % (name, y + 2, w, colour))
        out.append(
            '<text x="%.1f" y="%d" class="note">%s</text>'
            % (76 + w, y + 14, "-" if value is None else "%d tokens" % value)
        )
    out.append("</svg>")
    bits = []
    if kv["planned_mem_fraction_static"] is not None:
        bits.append("planned at --mem-fraction-static %.3g (%s)" % (kv["planned_mem_fraction_static"], kv["verdict"]))
    if kv["effective_mem_fraction_static"] is not None:
        bits.append("ran at %.3g" % kv["effective_mem_fraction_static"])
    if kv["delta_pct"] is not None:
        bits.append("actual %+.2f %% of plan" % kv["delta_pct"])
    if kv["max_total_num_tokens"] is not None:
        bits.append("max_total_num_tokens=%d" % kv["max_total_num_tokens"])
    out.append('<p class="muted">%s</p>' % esc("; ".join(bits)))
    return "".join(out)


def versions_table(host):
    rows = []
    for key, label in VERSION_LABELS:
        value = host["versions"].get(key)
        shown = value if value is None or "commit" not in key else value[:12]
        rows.append(
            '<tr data-key="%s"><th>%s</th><td title="%s">%s</td></tr>'
            % (key, esc(label), esc(value or ""), esc(shown) if shown else '<span class="muted">unknown</span>')
        )
    return '<table class="versions">%s</table>' % "".join(rows)


def suggestion_text(sugg):
    """'lower_mem_fraction_static: --mem-fraction-static 0.9' from sglang_server's machine-readable suggestion."""
    text = str(sugg.get("action") or "")
    if sugg.get("flag") is not None and sugg.get("value") is not None:
        return "%s: %s %s" % (text, sugg["flag"], sugg["value"])
    rest = ["%s=%s" % (k, v) for k, v in sorted(sugg.items()) if k != "action" and isinstance(v, (str, int, float))]
    return text + (": " + ", ".join(rest) if rest else "")


def failure_block(host):
    parts = []
    if host.get("failed_task"):
        ft = host["failed_task"]
        parts.append('<p class="failed-task">Failed task: <b>%s</b><br>%s</p>' % (esc(ft["task"]), esc(ft["msg"])))
    if host.get("diagnosis"):
        parts.append('<p class="diagnosis">%s</p>' % esc(host["diagnosis"]))
    if isinstance(host.get("suggestion"), dict):
        parts.append('<p class="suggestion">Suggestion: %s</p>' % esc(suggestion_text(host["suggestion"])))
    if host.get("failure_line"):
        parts.append('<p>The line that proves it:</p><pre class="evidence">%s</pre>' % esc(host["failure_line"]))
    if host.get("log_excerpt"):
        marked = set(host.get("evidence_lines") or [])
        lines = [("<mark>%s</mark>" if i in marked else "%s") % esc(line) for i, line in enumerate(host["log_excerpt"])]
        parts.append(
            '<details open><summary>Last %d log lines</summary><pre class="log">%s</pre></details>'
            % (len(lines), "\n".join(lines))
        )
    if not parts:
        return ""
    return '<div class="failure">%s</div>' % "".join(parts)


def attempts_table(host):
    if len(host.get("attempts") or []) < 2:
        return ""
    rows = "".join(
        "<tr><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>"
        % (esc(a.get("attempt")), esc(a.get("mem_fraction_static")), esc(a.get("outcome")), esc(a.get("kv_tokens_min")))
        for a in host["attempts"]
    )
    return (
        '<h3>Attempts</h3><table class="attempts"><tr><th>#</th><th>--mem-fraction-static</th><th>outcome</th>'
        "<th>KV tokens</th></tr>%s</table>" % rows
    )


def host_section(host, scale_gb, span):
    head = "<h2>%s %s</h2>" % (esc(host["host"]), _badge(host["outcome"]))
    facts = []
    for label, value in (
        ("phase", host.get("phase")),
        ("log format", host.get("format")),
        ("GPUs", "%s x %s" % (host.get("gpu_count"), host.get("gpu_name")) if host.get("gpu_name") else None),
        ("URL", host.get("url")),
        ("smoke test", host.get("smoke_test")),
        ("metrics", host.get("metrics_check")),
        ("GPU health", gpu_health_text(host.get("gpu_health"))),
        ("benchmark", benchmark_text(host.get("benchmark"))),
    ):
        if value not in (None, ""):
            facts.append("<span><b>%s</b> %s</span>" % (esc(label), esc(value)))
    body = [head, '<p class="facts">%s</p>' % " ".join(facts), failure_block(host)]
    problems = (host.get("gpu_health") or {}).get("problems") or []
    if problems:
        body.append('<ul class="health">%s</ul>' % "".join("<li>%s</li>" % esc(x) for x in problems))
    body.append("<h3>GPU memory</h3>")
    if host["gpus"]:
        body.append(gpu_bars_svg(host, scale_gb))
    else:
        body.append('<p class="muted">No GPU memory figures: SGLang logged none before it stopped.</p>')
    body.append("<h3>Start-up timeline</h3>")
    if host["timeline"]["phases"] or host["timeline"]["end"]:
        body.append(timeline_svg(host, span))
        body.append(_phase_table(host))
    else:
        body.append('<p class="muted">SGLang was not launched on this host.</p>')
    body.append('<div class="cols"><div><h3>KV cache: planned and actual</h3>')
    body.append(kv_block(host))
    body.append(attempts_table(host))
    body.append("</div><div><h3>Versions</h3>")
    body.append(versions_table(host))
    body.append("</div></div>")
    return '<section class="host" id="host-%s" data-host="%s" data-outcome="%s">%s</section>' % (
        esc(host["host"]),
        esc(host["host"]),
        esc(host["outcome"]),
        "".join(body),
    )


def roll_section(roll):
    """The last roll: per replica (roll order) its state and each step with its time, host and detail."""
    if not roll:
        return '<h3>Last roll</h3><p class="muted">No roll recorded.</p>'
    head = "Last roll %s: %s" % (esc(roll["id"]), esc(roll["state"]))
    if roll.get("stopped_at"):
        head += " at <b>%s</b> - %s" % (esc(roll["stopped_at"]), esc(roll.get("why") or "no reason recorded"))
    body = ['<section class="roll" data-roll="%s" data-state="%s"><h3>%s</h3>' % (
        esc(roll["id"]), esc(roll["state"]), head)]  # fmt: skip
    for r in roll["replicas"]:
        state = replica_state_text(r)
        rows = "".join(
            '<tr data-event="%s"><td>%s</td><td>%s</td><td>%s</td><td>%s</td><td>%s</td></tr>'
            % (
                esc(e["event"]),
                esc("+%d s" % e["offset"] if e.get("offset") is not None else "?"),
                esc(e.get("at")),
                esc(e["host"]),
                esc(e.get("label")),
                esc(event_detail(e)),
            )
            for e in r["events"]
        )
        body.append(
            '<div class="rollrep" data-replica="%s" data-state="%s"><p><b>%s</b> (%s): %s</p>%s</div>'
            % (
                esc(r["name"]),
                esc(r["state"]),
                esc(r["name"]),
                esc(", ".join(r["hosts"])),
                esc(state),
                (
                    '<table class="roll"><tr><th>after</th><th>at (UTC)</th><th>host</th><th>step</th><th></th></tr>%s'
                    "</table>" % rows
                )
                if rows
                else "",
            )
        )
    body.append("</section>")
    return "".join(body)


def legend():
    items = "".join(
        '<span><span class="sw" style="background:%s"></span>%s</span>' % (colour, esc(name))
        for name, colour in (SEGMENT_STYLE[s] for s in SEGMENTS)
    )
    return '<p class="legend">GPU memory (GB as SGLang prints them, i.e. GiB): %s</p>' % items


STYLE = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:24px;color:#1d2327;background:#fafafa}
h1{font-size:22px;margin:0 0 4px} h2{font-size:18px;margin:0 0 8px} h3{font-size:14px;margin:16px 0 6px;color:#455a64}
section.host{background:#fff;border:1px solid #dfe3e6;border-radius:6px;padding:16px;margin:16px 0}
section.host[data-outcome="ready"]{border-left:6px solid #43a047}
section.host:not([data-outcome="ready"]){border-left:6px solid #e53935}
.badge{font-size:12px;padding:2px 8px;border-radius:10px;vertical-align:middle;color:#fff}
.badge.ok{background:#43a047} .badge.bad{background:#e53935}
.facts span{margin-right:16px} .muted{color:#78909c}
.cols{display:flex;flex-wrap:wrap;gap:8px 48px} .cols>div{min-width:360px}
table{border-collapse:collapse} th,td{padding:2px 10px 2px 0;text-align:left;vertical-align:top}
table.versions th{font-weight:normal;color:#546e7a} table.replicas td,table.replicas th{padding-right:18px}
svg text{font:12px system-ui,sans-serif;fill:#263238} svg text.inbar{fill:#fff;font-size:11px}
svg text.axis{font-size:10px;fill:#78909c;text-anchor:middle} svg line.tick{stroke:#eceff1}
svg line.fail{stroke:#e53935;stroke-width:3} svg line.readyline{stroke:#43a047;stroke-width:3}
.sw{display:inline-block;width:11px;height:11px;margin:0 4px 0 10px;vertical-align:-1px;border:1px solid #b0bec5}
.failure{background:#fff5f5;border:1px solid #f5c6c6;border-radius:4px;padding:8px 12px}
pre{white-space:pre-wrap;word-break:break-all;font:12px/1.35 ui-monospace,Menlo,Consolas,monospace;margin:4px 0}
pre.log{max-height:360px;overflow:auto;background:#263238;color:#eceff1;padding:8px;border-radius:4px}
pre.log mark{background:#ffeb3b;color:#000} pre.evidence{background:#ffebee;padding:6px}
section.roll{background:#fff;border:1px solid #dfe3e6;border-radius:6px;padding:8px 16px;margin:16px 0}
section.roll[data-state="stopped"]{border-left:6px solid #e53935} .rollrep[data-state="stopped"] p{color:#b71c1c}
table.roll td{font-variant-numeric:tabular-nums}
"""


def render(data):
    """The whole page for a report document."""
    hosts = data.get("hosts") or []
    scale_gb = max([g["total_gb"] for h in hosts for g in h["gpus"]] + [1.0])
    span = max([h["timeline"]["end"] for h in hosts] + [1.0])
    s = data.get("summary") or {}
    reps = "".join(
        '<tr data-replica="%s"><td>%s</td><td>%s</td><td>%s</td></tr>'
        % (esc(r["name"]), esc(r["name"]), esc(", ".join(r["hosts"])), _badge(r["outcome"]))
        for r in data.get("replicas") or []
    )
    title = "SGLang fleet report"
    return "".join(
        [
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
            '<meta http-equiv="Content-Security-Policy" content="%s">' % CSP,
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            "<title>%s</title><style>%s</style></head><body>" % (title, STYLE),
            "<h1>%s</h1>" % title,
            '<p class="muted">%s GPU server(s): %s ready, %s not ready%s. Generated %s%s.</p>'
            % (
                esc(s.get("hosts")),
                esc(s.get("ready")),
                esc(s.get("failed")),
                "; %s router host(s)" % esc(s["routers"]) if s.get("routers") else "",
                esc(data.get("generated_at")),
                (" by " + esc(data["playbook"])) if data.get("playbook") else "",
            ),
            '<h3>Replicas</h3><table class="replicas"><tr><th>replica</th><th>hosts</th><th>outcome</th></tr>%s</table>'
            % reps,
            roll_section(data.get("roll")),
            legend(),
            "".join(host_section(h, scale_gb, span) for h in hosts),
            "</body></html>\n",
        ]
    )
