# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""sglang-doctor: explain an SGLang start-up log, or wait on a growing one.

  sglang-doctor LOGFILE [--json]
  sglang-doctor LOGFILE --follow --timeout N [--stall-timeout S] [--from-start] [--json]

Exit status: 0 ready, 1 failure / stalled / incomplete / timeout, 2 usage error or a file that is not an SGLang
log, 3 internal error, 130 interrupted (Ctrl-C: the report of what was read so far is printed first). Every
error is one line.
Run it with any Python 3.11+ that sees the collection (stdlib only), e.g. from an installed collection:
  PYTHONPATH=~/.ansible/collections python3 -m ansible_collections.llmops.sglang.plugins.plugin_utils.sglang_doctor_cli
(in a checkout of the collection: bin/sglang-doctor).
A thin CLI over plugins/module_utils/sglang_log.py (the collection's only copy of SGLang's log grammar); --follow
waits with plugins/module_utils/sglang_wait.py, the loop the sglang_server module uses.
"""

import argparse
import json
import math
import os
import re
import signal
import stat
import sys
import time


from ansible_collections.llmops.sglang.plugins.module_utils.sglang_log import (
    PHASES,
    RANK_FIELDS,
    StartupLog,
)
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_wait import (
    TAIL_LINES,
    LogFollower,
    wait_for_startup,
)

_HEAD = (
    "rank",
    "weights",
    "free>w",
    "KV tokens",
    "K GB",
    "V GB",
    "KV GB",
    "free>pool",
    "graph s",
    "graph GB",
    "free>graph",
)


def _cell(value):
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def pools_and_captures(details):
    """Per rank: every memory pool (target full-attention, SWA, mamba state, draft) with its total, and every CUDA-graph
    capture (decode, piecewise/prefill, draft) with its own time and memory, from StartupLog.result(details=True)."""
    out = {}
    for label, fig in details["ranks"].items():
        pools = [dict(p, runner="target") for p in fig.get("kv_pools") or []]
        draft = fig.get("draft") or {}
        pools += [dict(p, runner="draft", kind="draft " + p.get("kind", "full")) for p in draft.get("kv_pools") or []]
        sizes = [p.get("kv_size_gb") for p in pools if p.get("kv_size_gb") is not None]
        captures = fig.get("captures") or []
        if not pools and not captures:
            continue
        out[label] = {
            "kv_pools": [{k: p.get(k) for k in ("runner", "kind", "tokens", "states", "kv_size_gb")} for p in pools],
            "kv_total_gb": round(sum(sizes), 2) if sizes else None,
            "captures": [{k: c.get(k) for k in ("runner", "kind", "seconds", "mem_gb")} for c in captures],
        }
    return out


def json_summary(result, details):
    """The documented --json object (exactly these keys)."""
    return {
        "outcome": result["outcome"],
        "phase": result["phase"],
        "ranks": {label: {k: fig.get(k) for k in RANK_FIELDS} for label, fig in result["ranks"].items()},
        "pools_and_captures": pools_and_captures(details),
        "max_total_num_tokens": result["max_total_num_tokens"],
        "format": result["format"],
        "diagnosis": result["diagnosis"],
        "suggestion": result["suggestion"],
    }


def _pool_text(p):
    tokens = "" if p["tokens"] is None else f" {p['tokens']} tokens"
    if p.get("states") is not None:
        tokens += f" {p['states']} states"
    size = "" if p["kv_size_gb"] is None else f" {p['kv_size_gb']:.2f} GB"
    return f"{p['kind']}{tokens}{size}"


def _capture_text(c):
    secs = "" if c["seconds"] is None else f" {c['seconds']:.2f} s"
    mem = "" if c["mem_gb"] is None else f" {c['mem_gb']:.2f} GB"
    return f"{'draft ' if c['runner'] == 'draft' and 'draft' not in c['kind'] else ''}{c['kind']}{secs}{mem}"


def render_text(result, details):
    out = [
        f"outcome: {result['outcome']}    phase: {result['phase'] or '-'}    format: {result['format']}    "
        f"lines: {result['lines']}"
    ]
    ranks = result["ranks"]
    if ranks:
        rows = [_HEAD] + [
            (label or "(none)", *tuple(_cell(fig[k]) for k in RANK_FIELDS)) for label, fig in ranks.items()
        ]
        widths = [max(len(r[i]) for r in rows) for i in range(len(_HEAD))]
        out.append("")
        out += [
            "  " + "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=False)))
            for r in rows
        ]
    extra = pools_and_captures(details)
    if extra:
        out.append("")
        for label, pc in extra.items():
            if pc["kv_pools"]:
                total = "" if pc["kv_total_gb"] is None else f" (total {pc['kv_total_gb']:.2f} GB)"
                out.append(f"  {label or '(none)'} pools: " + ", ".join(map(_pool_text, pc["kv_pools"])) + total)
            if pc["captures"]:
                out.append(f"  {label or '(none)'} captures: " + ", ".join(map(_capture_text, pc["captures"])))
    ms = result["milestones"]
    stamps = [(p, ms[p].get("log_t")) for p in PHASES if p in ms and ms[p].get("log_t") is not None]
    if stamps:
        t0 = stamps[0][1]
        out.append("")
        out.append("timeline (log clock): " + ", ".join(f"{p} +{t - t0:.0f}s" for p, t in stamps))
    if result["max_total_num_tokens"] is not None:
        out.append(f"max_total_num_tokens: {result['max_total_num_tokens']}")
    prog = result.get("capture_progress")
    if prog and prog.get("index") and not prog.get("done"):
        out.append(f"capture progress: bs {prog.get('bs')} ({prog['index']}/{prog['total']})")
    out.append("")
    out.append("diagnosis: " + result["diagnosis"])
    sugg = result["suggestion"]
    if sugg:
        out.append("suggestion: " + json.dumps(sugg, sort_keys=True))
    return "\n".join(out)


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage error as one line (no usage block), exit status 2."""

    def error(self, message):
        fail(f"{message} (see sglang-doctor --help)")


def fail(message, status=2):
    print(f"sglang-doctor: {message}", file=sys.stderr)
    sys.exit(status)


def seconds(name, value, *, allow_zero):
    """A finite number of seconds (> 0, or >= 0 when ``allow_zero``), or a one-line usage error."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = None
    low = ">= 0" if allow_zero else "> 0"
    if number is None or not math.isfinite(number) or number < 0 or (number == 0 and not allow_zero):
        fail(f"expected {name} to be a finite number of seconds {low}; found {value}. For example {name} 1800.")
    return number


# SGLang's own line prefix ("[2026-07-04 01:25:38 DP6 TP6 EP6] ", "[17:43:39 TP0] "), wherever the line starts
_SGLANG_PREFIX = re.compile(rb"\[(?:\d{4}-\d\d-\d\d )?\d\d:\d\d:\d\d(?:[.,]\d{1,6})?(?: [A-Z][A-Z_]*\d+)*\] \S")


def not_a_log(path, result, head, tail=()):
    """One line when the file holds nothing SGLang prints (empty, binary, another program's output): no line the
    grammar reads, no SGLang-prefixed line, no traceback or uvicorn line (those give an outcome instead)."""
    if result["phase"] is not None or result["server_args"] or result["outcome"] != "incomplete":
        return None
    if result["format"] != "unknown" or result["ranks"]:
        return None
    if _SGLANG_PREFIX.search(head) or any(_SGLANG_PREFIX.search(line.encode()) for line in tail):
        return None
    todo = "Pass the file SGLang writes (for example /var/log/sglang/server.log)."
    if not head:
        return f"{path} is empty: expected an SGLang start-up log. {todo}"
    if b"\x00" in head:
        return f"{path} is not an SGLang log: it holds binary data. {todo}"
    return f"{path} is not an SGLang log: none of its {result.get('bytes', 0)} bytes is a line SGLang prints. {todo}"


def file_kind(path):
    """file, pipe, a directory, a character device... or None when nothing is there."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    for test, kind in (
        (stat.S_ISREG, "file"),
        (stat.S_ISFIFO, "pipe"),
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
    ):
        if test(mode):
            return kind
    return "not a regular file"


def read_head(path, n=4096):
    with open(path, "rb") as fh:
        return fh.read(n)


def read_file(path, log):
    with open(path, "rb") as fh:
        while True:
            chunk = fh.read(1 << 20)
            if not chunk:
                break
            log.feed(chunk)
        log.finish()


def follow(path, log, timeout, stall_timeout, *, from_start, poll=0.1):
    """Wait on a growing log with the module's own wait loop (sglang_wait); returns the wait status."""
    follower = LogFollower(path, offset=0 if from_start else None)
    try:
        _, status = wait_for_startup(
            follower,
            time.time(),
            wait_for="ready",
            timeout=timeout,
            stall_timeout=stall_timeout,
            poll_interval=poll,
            catch_up=from_start,
            log=log,
        )
    finally:
        follower.close()
    return status


def main(argv=None):
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # `sglang-doctor log | head` ends quietly
    ap = _Parser(prog="sglang-doctor", description=__doc__.split("\n\n")[0])
    ap.add_argument("logfile")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--follow", action="store_true", help="wait on a growing log until ready or failure")
    ap.add_argument("--timeout", help="with --follow: give up after N seconds (> 0)")
    ap.add_argument("--stall-timeout", help="with --follow: fail after S seconds without a line (0: never)")
    ap.add_argument("--from-start", action="store_true", help="with --follow: read the file from its start")
    args = ap.parse_args(argv)
    if not args.follow and (args.timeout is not None or args.stall_timeout is not None or args.from_start):
        fail(
            "--timeout/--stall-timeout/--from-start only make sense with --follow; found them without it. "
            "Add --follow or leave them out."
        )
    if args.follow and args.timeout is None:
        fail(
            "expected --timeout N with --follow (the longest wait in seconds); found none. "
            "Add for example --timeout 1800."
        )
    timeout = seconds("--timeout", args.timeout, allow_zero=False) if args.follow else None
    stall = seconds("--stall-timeout", args.stall_timeout, allow_zero=True) if args.stall_timeout is not None else 0
    path = args.logfile
    kind = file_kind(path)
    if kind not in ("file", "pipe", None):
        fail(
            f"expected {path} to be a log file; found {kind}. Pass the file SGLang writes (for example "
            "/var/log/sglang/server.log)."
        )
    if args.follow and kind == "pipe":
        fail(f"cannot follow {path}: it is a pipe. Follow the log file itself, or drop --follow to read the pipe.")
    if args.follow and not os.path.exists(path):
        fail(f"cannot follow {path}: no such file. Start SGLang first (its unit creates the log) or fix the path.")
    log = StartupLog(tail_lines=TAIL_LINES)
    interrupted = False
    try:
        head = read_head(path) if kind == "file" else b"?"  # a pipe is read once: no peeking
        if args.follow:
            follow(path, log, timeout, stall, from_start=args.from_start)
        else:
            read_file(path, log)
    except OSError as exc:
        fail(
            f"cannot read {path}: {exc.strerror}. Pass the file SGLang writes (for example /var/log/sglang/server.log)."
        )
    except KeyboardInterrupt:
        interrupted = True
    details = log.result(details=True)
    result = log.result()
    if not interrupted and (not args.follow or result["lines"]):
        problem = not_a_log(path, result, head, log.tail_lines())
        if problem:
            fail(problem)
    if args.json:
        print(json.dumps(json_summary(result, details), sort_keys=False))
    else:
        print(render_text(result, details))
    if interrupted:
        print("sglang-doctor: interrupted; the report above covers what was read until then.", file=sys.stderr)
        return 130
    return 0 if result["outcome"] == "ready" else 1


def run(argv=None):
    """main(), with a last guard: no traceback reaches a user (SGLANG_DOCTOR_DEBUG=1 shows it to a developer)."""
    try:
        return main(argv)
    except Exception as exc:
        if os.environ.get("SGLANG_DOCTOR_DEBUG") == "1":
            raise
        print(
            f"sglang-doctor: internal error ({type(exc).__name__}: {' '.join(str(exc).split())}). Please report it "
            "with the log; SGLANG_DOCTOR_DEBUG=1 shows where it happened.",
            file=sys.stderr,
        )
        return 3


if __name__ == "__main__":
    sys.exit(run())
