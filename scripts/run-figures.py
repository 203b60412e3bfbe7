#!/usr/bin/env python3
"""The one table of `make test` run figures in docs/testing.md, generated from the run records.

    python scripts/run-figures.py add --where "fresh clone" [--result green]   append this checkout's last run
    python scripts/run-figures.py render                                       rewrite the table from the records
    python scripts/run-figures.py --check                                      fail when the table is not the records'

The records (docs/figures/make-test-runs.json, newest first) are what scripts/accounted and scripts/test-streams
wrote for a run: build/accounted-make-test.json (wall, CPU-seconds, converges) and build/test-streams/*.parts (each
stream's parts and seconds). The table sits between the two marker comments in docs/testing.md; nothing else in the
file is touched.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
from pathlib import Path

from generated_table import spliced, write_or_check

ROOT = Path(__file__).resolve().parent.parent
RECORDS = ROOT / "docs" / "figures" / "make-test-runs.json"
DOC = ROOT / "docs" / "testing.md"
START, END = "<!-- run-figures:start (scripts/run-figures.py render) -->", "<!-- run-figures:end -->"
STREAMS = ("fleet", "nodes", "others", "builds")


def stream_seconds(logs: Path) -> dict[str, str]:
    """Each stream's parts' seconds, joined with ' + ' (others: pytest + molecule)."""
    out = {}
    for name in STREAMS:
        parts = logs / f"{name}.parts"
        if parts.exists():
            out[name] = " + ".join(line.split()[2] for line in parts.read_text().splitlines() if len(line.split()) == 3)
    return out


def record_of_last_run(where: str, result: str) -> dict:
    acc = json.loads((ROOT / "build" / "accounted-make-test.json").read_text())
    commit = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    return {
        "date": datetime.date.today().isoformat(),
        "commit": commit,
        "where": where,
        "result": result or ("green" if acc["exit"] == 0 else "red"),
        "wall_s": round(acc["wall_s"]),
        "cpu_s": round(acc["cpu_s"]),
        "cold_converges": acc["cold_converges"],
        "snapshot_reuses": acc["snapshot_reuses"],
        "streams": stream_seconds(ROOT / "build" / "test-streams"),
    }


def cell(value) -> str:
    return "" if value is None else str(value)


def table(records: list[dict]) -> str:
    head = "| date | where | result | wall | CPU-seconds | cold converges | " + " | ".join(STREAMS) + " |"
    lines = [head, "|" + "---|" * (6 + len(STREAMS))]
    for r in records:
        wall = f"{r['wall_s']} s ({r['wall_s'] / 60:.1f} min)" if r.get("wall_s") else ""
        streams = r.get("streams", {})
        lines.append(
            "| "
            + " | ".join(
                [r["date"], r["where"], r["result"], wall, cell(r.get("cpu_s")), cell(r.get("cold_converges"))]
                + [streams.get(name, "") for name in STREAMS]
            )
            + " |"
        )
    return "\n".join(lines)


def rendered(doc: str, records: list[dict]) -> str:
    return spliced(DOC, doc, START, END, table(records), tool="run-figures")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail when the table differs from the records")
    sub = ap.add_subparsers(dest="cmd")
    add = sub.add_parser("add", help="append the last run of this checkout")
    add.add_argument("--where", required=True, help='e.g. "fresh clone", "CI"')
    add.add_argument("--result", default="", help="default: green or red from the run's exit status")
    sub.add_parser("render", help="rewrite the table")
    args = ap.parse_args(argv)
    records = json.loads(RECORDS.read_text())
    if args.cmd == "add":
        records.insert(0, record_of_last_run(args.where, args.result))
        RECORDS.write_text(json.dumps(records, indent=1) + "\n")
    doc = DOC.read_text()
    return write_or_check(DOC, doc, rendered(doc, records), check=args.check, tool="run-figures")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
