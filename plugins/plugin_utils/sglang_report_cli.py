# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Render the fleet report (one self-contained HTML page and its JSON) from deployment records or a saved report.

Run it with any Python 3.11+ that sees the collection (stdlib only), e.g. from an installed collection:
  PYTHONPATH=~/.ansible/collections python3 -m ansible_collections.llmops.sglang.plugins.plugin_utils.sglang_report_cli
(in a checkout of the collection: bin/sglang-report). Examples, as sglang-report:
  sglang-report ~/.local/state/llmops-sglang/reports/20261130-064210/report.json   re-render a saved report
  sglang-report gpu1.json gpu2.json                     deployment records copied from the hosts
  scp gpu1:/var/lib/llmops-sglang/deployment.json gpu1.json      (a record is named after its "host" key, else
                                                                 after its file name)
  sglang-report --out /tmp/r report.json                choose the output directory

Writes OUT/index.html, OUT/report.json and OUT/report.txt (the text form: what runs where and the last roll's
timeline) and prints the path of index.html; --text prints the text form instead. OUT defaults to
<SGLANG_REPORT_DIR>/<UTC time>, SGLANG_REPORT_DIR to $XDG_STATE_HOME/llmops-sglang/reports
(~/.local/state/llmops-sglang/reports), the directory the sglang_progress callback writes to.
Exit codes: 0 written, 2 bad input or output not writable. The page is built by
plugins/module_utils/sglang_report.py (data) and sglang_report_html.py (drawing); the callback uses them too.
"""

import argparse
import os
import sys
from pathlib import Path


from ansible_collections.llmops.sglang.plugins.module_utils import sglang_report as report
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_report_html import render
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_report_text import render_text


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        self.exit(2, f"sglang-report: {message} (see --help)\n")


_MALFORMED = (AttributeError, TypeError, KeyError, ValueError, IndexError)


def _malformed(path, exc):
    detail = str(exc).splitlines()[0][:120] if str(exc) else "-"
    return (
        f"sglang-report: expected a well-formed saved report or deployment record; found {path} malformed "
        f"({type(exc).__name__}: {detail}). Regenerate it (rerun the play) or leave it out; no report was written."
    )


def main(argv=None):
    ap = _Parser(prog="sglang-report", description=__doc__.split("\n\n")[0])
    ap.add_argument("inputs", nargs="+", metavar="FILE", help="a saved report.json or deployment records")
    ap.add_argument(
        "--out",
        help="output directory (default: <UTC time> under $SGLANG_REPORT_DIR, else under "
        "$XDG_STATE_HOME/llmops-sglang/reports or ~/.local/state/llmops-sglang/reports)",
    )
    ap.add_argument("--text", action="store_true", help="also print the text form (what runs where, the last roll)")
    args = ap.parse_args(argv)
    hosts, saved = [], []
    for path in args.inputs:
        # A record of the right shape but wrong types (a number where a mapping belongs, ...) is refused in one line,
        # naming its file, before anything is written: never a traceback, never a half-written report.
        try:
            entries, doc = report.load_input(path)
            render(report.build_report(entries))
            render_text(report.build_report(entries))
        except report.ReportInputError as exc:
            print(f"sglang-report: expected a saved report or a deployment record; {exc}", file=sys.stderr)
            return 2
        except _MALFORMED as exc:
            print(_malformed(path, exc), file=sys.stderr)
            return 2
        hosts.extend(entries)
        saved.append(doc)
    seen = {}
    for h in hosts:
        if h["host"] in seen:
            print(
                "sglang-report: expected one input per host; found host {} twice (rename a record file or set its "
                '"host" key)'.format(h["host"]),
                file=sys.stderr,
            )
            return 2
        seen[h["host"]] = h
    if len(saved) == 1 and saved[0] is not None:
        data = report.build_report(hosts, playbook=saved[0].get("playbook"), generated_at=saved[0].get("generated_at"))
    else:
        data = report.build_report(hosts)
    base = os.path.expanduser(os.environ.get("SGLANG_REPORT_DIR") or report.default_report_base())
    out = args.out or report.report_dir(base)
    try:
        page, text = render(data), render_text(data)
    except _MALFORMED as exc:  # the inputs rendered one by one above; together they still may not
        print(_malformed(", ".join(args.inputs), exc), file=sys.stderr)
        return 2
    try:
        path = report.write_report(data, page, out, text=text)
    except OSError as exc:
        print(
            f"sglang-report: expected a writable output directory; {exc.filename or out}: {exc.strerror or exc}. "
            "Choose another with --out.",
            file=sys.stderr,
        )
        return 2
    if args.text:
        print(text, end="")
    print(Path(path).resolve())
    return 0


if __name__ == "__main__":
    sys.exit(main())
