#!/usr/bin/env python3
"""Count (and optionally run) the bad-input matrix, and write its figures into docs/bad-input.md.

The matrix is every tests/*/test_bad_input_<area>.py file: one parametrized table per file, one row per input.
Each row asserts the one-line message, the exit status, no traceback, an unchanged fingerprint and a time bound,
so a passing row is an input tried with no change, no traceback and no hang.

  python scripts/bad-input-figures.py                 rows per file (pytest --collect-only), no test is run
  python scripts/bad-input-figures.py --run           also run the rows without a node and count the outcomes
  python scripts/bad-input-figures.py --run --nodes   also the node rows (root; take the node lock first)
  ... --write                                         rewrite the figures section of docs/bad-input.md
"""

from __future__ import annotations

import argparse
import datetime as dt
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from collections import Counter, defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "bad-input.md"
BEGIN, END = "<!-- figures:begin (scripts/bad-input-figures.py --write) -->", "<!-- figures:end -->"


def matrix_files() -> list[Path]:
    return sorted(ROOT.glob("tests/*/test_bad_input_*.py"))


def pytest_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args]


def collect(files: list[Path]) -> dict[str, int]:
    """Rows per file, as pytest collects them (parametrized ids), node rows included."""
    out = subprocess.run(
        pytest_cmd("--collect-only", "-q", *map(str, files)), capture_output=True, text=True, cwd=ROOT, check=False
    )
    if out.returncode not in (0, 5):
        sys.exit(f"bad-input-figures: pytest could not collect the matrix:\n{out.stdout[-3000:]}{out.stderr[-2000:]}")
    rows: Counter = Counter()
    for line in out.stdout.splitlines():
        if "::" in line and "[" in line:  # a parametrized row: path::test[id]
            rows[line.split("::", 1)[0]] += 1
    return dict(rows)


def classify(message: str) -> str:
    """Which promise a failed row broke, from its assertion message."""
    text = message.lower()
    if "did not finish within" in text:
        return "hang"
    if "traceback" in text:
        return "traceback"
    if "changed" in text or "fingerprint" in text:
        return "change"
    return "other"


def run(files: list[Path], nodes: bool) -> dict[str, Counter]:
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "matrix.xml"
        args = ["-q", f"--junitxml={xml}", *map(str, files)]
        if not nodes:
            args += ["-m", "not node"]
        subprocess.run(pytest_cmd(*args), cwd=ROOT, check=False, stdout=subprocess.DEVNULL)
        tree = ET.parse(xml)
    results: dict[str, Counter] = defaultdict(Counter)
    for case in tree.iter("testcase"):
        if "[" not in case.get("name", ""):
            continue
        path = case.get("classname", "").replace(".", "/") + ".py"
        failure = case.find("failure")
        if failure is None:
            failure = case.find("error")
        if case.find("skipped") is not None:
            results[path]["skipped"] += 1
        elif failure is not None:
            results[path]["failed"] += 1
            results[path][classify(failure.get("message", "") + (failure.text or ""))] += 1
        else:
            results[path]["passed"] += 1
    return results


def figures_section(rows: dict[str, int], results: dict[str, Counter] | None) -> str:
    total = sum(rows.values())
    lines = [BEGIN, "", "| file | rows |" + (" passed | failed | not run |" if results else ""), "|---|---|"]
    lines[-1] += "---|---|---|" if results else ""
    for path in sorted(rows):
        cells = f"| `{path}` | {rows[path]} |"
        if results is not None:
            r = results.get(path, Counter())
            cells += f" {r['passed']} | {r['failed']} | {rows[path] - r['passed'] - r['failed']} |"
        lines.append(cells)
    lines.append("")
    if results is None:
        lines.append(f"Inputs in the matrix: **{total}** rows in {len(rows)} files (counted, not run).")
    else:
        t = sum((r for r in results.values()), Counter())
        when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
        lines += [
            f"Last run {when}: inputs tried **{t['passed'] + t['failed']}** of {total} rows "
            f"({total - t['passed'] - t['failed']} not run: node rows without `--nodes`, or skipped).",
            "",
            f"- changes made: **{t['change']}**",
            f"- tracebacks: **{t['traceback']}**",
            f"- hangs: **{t['hang']}**",
            f"- other failures (wrong message or exit status): **{t['other']}**",
        ]
    lines += ["", END]
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", action="store_true", help="run the rows (without --nodes: those that need no node)")
    ap.add_argument("--nodes", action="store_true", help="with --run: also the node rows (root, under the lock)")
    ap.add_argument("--write", action="store_true", help=f"rewrite the figures section of {DOC.relative_to(ROOT)}")
    args = ap.parse_args()
    files = matrix_files()
    if not files:
        print("bad-input-figures: no tests/*/test_bad_input_*.py file found", file=sys.stderr)
        return 1
    rows = collect(files)
    results = run(files, args.nodes) if args.run else None
    section = figures_section(rows, results)
    print(section)
    if args.write:
        text = DOC.read_text()
        if BEGIN not in text or END not in text:
            print(f"bad-input-figures: {DOC} has no figures markers", file=sys.stderr)
            return 1
        DOC.write_text(re.sub(re.escape(BEGIN) + r".*?" + re.escape(END), lambda _: section, text, flags=re.S))
        print(f"bad-input-figures: wrote {DOC.relative_to(ROOT)}", file=sys.stderr)
    failed = sum(r["failed"] for r in (results or {}).values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
