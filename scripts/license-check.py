#!/usr/bin/env python3
"""The collection's one license policy, checked (part of `make lint`); exits 1 naming every file that breaks it.

The policy (docs/licensing.md says why, with what ansible-core, ansible-test and Ansible's collection requirements
ask of each kind of file):

1. The collection is Apache-2.0: galaxy.yml says `license: [Apache-2.0]` (no license_file), and LICENSE is the
   Apache License 2.0 text - compared with the copy Debian ships (/usr/share/common-licenses/Apache-2.0, package
   base-files), not with a text written here.
2. Every code file the collection ships (what `ansible-galaxy collection build` puts in the tarball: plugins/, roles'
   files/ scripts; galaxy.yml's build_ignore leaves the rest out) opens with the header, within its first 6 lines:
       # Copyright: llmops.sglang contributors
       # Apache License 2.0 (see LICENSE)
3. No tracked file declares another license in its opening lines (a GPL, MIT, BSD ... header or an SPDX identifier
   other than Apache-2.0), except the third-party files listed in THIRD_PARTY with the license they keep.

    scripts/license-check.py           check this checkout
    scripts/license-check.py --root D  check another tree (the tests run it on broken copies)
"""

from __future__ import annotations

import argparse
import fnmatch
import re
import subprocess
import sys
from pathlib import Path

HEADER = ("# Copyright: llmops.sglang contributors", "# Apache License 2.0 (see LICENSE)")
HEADER_WITHIN = 6  # lines: after a shebang and a coding line
DEBIAN_APACHE = Path("/usr/share/common-licenses/Apache-2.0")
# Files that keep their own license: path -> (license, where it comes from). Only what no one here wrote.
THIRD_PARTY = {
    "roles/sglang/files/patches/0001-sm120-extend-attention-block-size.patch": (
        "Apache-2.0",
        "SGLang's own change (sgl-project/sglang#14311), under SGLang's license; its preamble says so",
    ),
}
# Shipped files that are code and so carry the header: plugins' Python and the scripts roles copy to hosts (the rest -
# YAML, Jinja templates, docs - are covered by LICENSE and galaxy.yml, as in ansible-core's own tree).
CODE = re.compile(r"^(plugins/.+\.py|roles/[^/]+/files/.+)$")
# An opening comment line that declares a license.
DECLARES = re.compile(
    r"^\s*(#|//|/?\*|<!--|\{#|;)\s*.*(GNU (Lesser |Affero )?General Public License|MIT License|BSD-[0-9]-Clause"
    r"|Mozilla Public License|SPDX-License-Identifier:|Licensed under the|Apache License)"
)
OPENING = 15  # lines in which a license declaration counts


def tracked(root: Path) -> list[str]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True).stdout
    return sorted(p for p in out.decode().split("\0") if p and (root / p).is_file())


def build_ignore(root: Path) -> list[str]:
    """galaxy.yml's build_ignore patterns (what the tarball leaves out)."""
    import yaml

    return [str(p) for p in (yaml.safe_load((root / "galaxy.yml").read_text()).get("build_ignore") or [])]


def shipped(path: str, ignore: list[str]) -> bool:
    """What ansible-galaxy's build does with build_ignore: fnmatch on the path and on each of its parent dirs."""
    parts = path.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return not any(fnmatch.fnmatch(p, pat) for p in prefixes for pat in ignore)


def opening(root: Path, path: str, n: int) -> list[str] | None:
    try:
        with open(root / path, encoding="utf-8") as fh:
            return [next(fh, "").rstrip("\n") for _ in range(n)]
    except (UnicodeDecodeError, OSError):
        return None  # binary: no header to read


def check(root: Path) -> list[str]:
    problems = []
    import yaml

    galaxy = yaml.safe_load((root / "galaxy.yml").read_text())
    if galaxy.get("license") != ["Apache-2.0"] or galaxy.get("license_file"):
        problems.append(
            f"galaxy.yml: expected `license: [Apache-2.0]` and no license_file; found license={galaxy.get('license')!r}"
            f" license_file={galaxy.get('license_file')!r}. The collection is Apache-2.0 (docs/licensing.md)."
        )
    if not DEBIAN_APACHE.is_file():
        problems.append(
            f"{DEBIAN_APACHE} is missing: install Debian's base-files, the reference LICENSE is checked against"
        )
    elif " ".join((root / "LICENSE").read_text().split()) != " ".join(DEBIAN_APACHE.read_text().split()):
        problems.append(f"LICENSE: expected the Apache License 2.0 text ({DEBIAN_APACHE}); found something else")
    ignore = build_ignore(root)
    for path in tracked(root):
        head = opening(root, path, OPENING)
        if head is None or path == "LICENSE":
            continue
        declared = [line for line in head if DECLARES.search(line) and line.strip() != HEADER[1]]
        if path in THIRD_PARTY:
            continue
        if declared:
            problems.append(
                f"{path}: its opening lines declare {declared[0].strip()!r}, not the collection's license line; use"
                f" the header {' / '.join(HEADER)} (Apache-2.0), or list a third-party file in THIRD_PARTY with its"
                " license"
            )
            continue
        if shipped(path, ignore) and CODE.match(path):
            window = [line.rstrip() for line in head[:HEADER_WITHIN]]
            at = [i for i, line in enumerate(window) if line == HEADER[0]]
            if not at or window[at[0] + 1 : at[0] + 2] != [HEADER[1]]:
                problems.append(
                    f"{path}: ships in the collection without the license header in its first {HEADER_WITHIN} lines;"
                    f" add the two lines {HEADER[0]!r} and {HEADER[1]!r}"
                )
    return problems


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    args = ap.parse_args(argv)
    problems = check(args.root)
    for p in problems:
        print(f"license-check: {p}", file=sys.stderr)
    if problems:
        return 1
    print("license-check: the collection is Apache-2.0 in galaxy.yml, LICENSE and every shipped code file's header")
    return 0


if __name__ == "__main__":
    sys.exit(main())
