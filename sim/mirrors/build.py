#!/usr/bin/env python3
"""Generate the local mirrors (apt, pypi, git, hub) into --out, reproducibly and idempotently.

    build.py --out DIR [--base-url http://10.213.0.1:8080] [--only apt,pypi,git,hub] [--force]
             [--sglang-src DIR] [--hub-model REPO_ID=KIND_OR_DIR[:gated] ...] [--extra-wheels DIR]

Each step is skipped when the fingerprint of its inputs matches the one recorded after its last success
(DIR/.stamps/). Prints a JSON summary. Serve the result with serve.py --root DIR.
"""

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import apt_repo
import git_sources
import hub
import pypi_index

STEPS = ("apt", "pypi", "git", "hub")
DEFAULT_BASE_URL = "http://10.213.0.1:8080"


def parse_models(specs):
    models = []
    for spec in specs:
        repo_id, _, source = spec.partition("=")
        gated = source.endswith(":gated")
        source = source.removesuffix(":gated")
        if repo_id.count("/") != 1 or not source:
            raise SystemExit(f"--hub-model wants ORG/NAME=KIND_OR_DIR[:gated], got {spec!r}")
        models.append((repo_id, source, gated))
    return models


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, type=Path, help="output directory (not inside the git tree)")
    p.add_argument(
        "--base-url",
        default=DEFAULT_BASE_URL,
        help="URL the nodes will reach serve.py at; baked into the cuda-keyring sources entry",
    )
    p.add_argument("--only", default=",".join(STEPS), help="comma-separated subset of " + ",".join(STEPS))
    p.add_argument("--force", action="store_true", help="rebuild even when up to date")
    p.add_argument("--sglang-src", type=Path, help="SGLang stand-in tree (default: sim/sglang)")
    p.add_argument("--hub-model", action="append", default=None, help="ORG/NAME=KIND_OR_DIR[:gated] (repeatable)")
    p.add_argument("--extra-wheels", type=Path, help="directory of extra *.whl files to add to the index")
    args = p.parse_args(argv)
    steps = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = set(steps) - set(STEPS)
    if unknown:
        raise SystemExit(f"unknown step(s): {', '.join(sorted(unknown))}")
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    summary, timings = {}, {}
    base = args.base_url.rstrip("/")
    for step in steps:
        t0 = time.monotonic()
        if step == "apt":
            summary[step] = apt_repo.build(out, f"{base}/{apt_repo.REPO_SUBDIR}/", args.force)
        elif step == "pypi":
            extra = sorted(args.extra_wheels.glob("*.whl")) if args.extra_wheels else []
            summary[step] = pypi_index.build(out, extra, args.force)
        elif step == "git":
            summary[step] = git_sources.build(out, args.sglang_src, args.force)
        elif step == "hub":
            models = parse_models(args.hub_model) if args.hub_model else None
            summary[step] = hub.build(out, models, args.force)
        timings[step] = round(time.monotonic() - t0, 2)
    summary["seconds"] = timings
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
