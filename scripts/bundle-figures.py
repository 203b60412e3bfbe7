#!/usr/bin/env python3
"""The wheel part of the reference deployment's bundle, measured, and its table in docs/air-gapped.md.

    python scripts/bundle-figures.py measure [--requirement sglang==0.5.9]   resolve and size the wheel set
    python scripts/bundle-figures.py render                                  rewrite the table from the record
    python scripts/bundle-figures.py --check                                 fail when the table is not the record's

`measure` asks this machine's pip (its own index configuration, nothing named here) which files a fresh venv would
install for the requirement (`pip install --dry-run --ignore-installed --report`), then the index for each file's
size (an HTTP HEAD of the URL pip resolved). It records names, versions, file names and sizes, never the URLs, in
docs/figures/reference-bundle.json, with this machine's Python and platform (wheels are per interpreter and
platform).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import datetime
import json
import platform
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

from generated_table import spliced, write_or_check

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "docs" / "figures" / "reference-bundle.json"
DOC = ROOT / "docs" / "air-gapped.md"
START, END = "<!-- bundle-figures:start (scripts/bundle-figures.py render) -->", "<!-- bundle-figures:end -->"
LARGEST = 12  # rows of their own; the rest are summed into one row


def head_size(url: str) -> int:
    with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=60) as resp:
        length = resp.headers.get("Content-Length")
    if length is None:
        raise SystemExit(f"bundle-figures: the index gave no size for {url.rsplit('/', 1)[-1]}")
    return int(length)


def measure(requirement: str) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--dry-run", "--ignore-installed"]
        run = subprocess.run([*cmd, "--report", str(report), requirement], check=False, capture_output=True, text=True)
        if run.returncode != 0:
            raise SystemExit(f"bundle-figures: pip could not resolve {requirement}:\n{run.stderr[-2000:]}")
        items = json.loads(report.read_text())["install"]
    urls = [i["download_info"]["url"] for i in items]
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        sizes = list(pool.map(head_size, urls))
    wheels = [
        {"name": i["metadata"]["name"], "version": i["metadata"]["version"], "file": u.rsplit("/", 1)[-1], "size": s}
        for i, u, s in zip(items, urls, sizes, strict=True)
    ]
    wheels.sort(key=lambda w: (-w["size"], w["name"]))
    return {
        "date": datetime.date.today().isoformat(),
        "requirement": requirement,
        "python": platform.python_version(),
        "platform": f"{platform.system()} {platform.machine()}",
        "wheels": wheels,
    }


def gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"


def table(rec: dict) -> str:
    wheels = rec["wheels"]
    total = sum(w["size"] for w in wheels)
    lines = [
        f"Measured {rec['date']}: the files a fresh venv installs for `{rec['requirement']}` (Python {rec['python']}, "
        f"{rec['platform']}), as pip resolved them from the package index, with the sizes the index gave.",
        "",
        "| part | files | size |",
        "|---|---|---|",
    ]
    for w in wheels[:LARGEST]:
        lines.append(f"| {w['name']} {w['version']} | 1 | {w['size'] / 2**20:.0f} MiB |")
    rest = wheels[LARGEST:]
    lines.append(f"| the other wheels | {len(rest)} | {sum(w['size'] for w in rest) / 2**20:.0f} MiB |")
    lines.append(f"| **all wheels** | **{len(wheels)}** | **{gib(total)}** |")
    return "\n".join(lines)


def rendered(doc: str, rec: dict) -> str:
    return spliced(DOC, doc, START, END, table(rec), tool="bundle-figures")


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="fail when the table differs from the record")
    sub = ap.add_subparsers(dest="cmd")
    m = sub.add_parser("measure", help="resolve the wheel set and record its sizes (uses the package index)")
    m.add_argument("--requirement", default="sglang==0.5.9")
    sub.add_parser("render", help="rewrite the table")
    args = ap.parse_args(argv)
    if args.cmd == "measure":
        RECORD.write_text(json.dumps(measure(args.requirement), indent=1) + "\n")
    rec = json.loads(RECORD.read_text())
    doc = DOC.read_text()
    return write_or_check(DOC, doc, rendered(doc, rec), check=args.check, tool="bundle-figures")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
