#!/usr/bin/env python3
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Write the router's hash-pinned requirements: roles/router/files/sglang-router-VERSION.txt.

    python scripts/router-lock.py 0.3.2

pip resolves sglang-router==VERSION once, for the oldest Python (CPython 3.10 on x86_64), which fixes one version of
every dependency that all of them can run; pip evaluates dependency markers for the Python it runs on, not the
target's, so the script then reads every wheel's Requires-Dist with each target's markers and adds what a target
needs besides (exceptiongroup on 3.10);
then pip downloads exactly those versions, as wheels only, for each platform the role supports: CPython 3.10 with
glibc 2.35 (Ubuntu 22.04), 3.11 with 2.36 (Debian 12) and 3.12 with 2.39 (Ubuntu 24.04), each on x86_64 and aarch64
(on a host of that platform pip picks the same file). Every file's sha256 goes into the requirements file, which the
router role installs with ``pip install --require-hashes``: a file the index serves with another digest is refused.
pip's own configuration on this machine names the index (this script names none). Nothing is written unless every
platform resolves.
"""

from __future__ import annotations

import argparse
import email.parser
import hashlib
import re
import subprocess
import sys
import tempfile
import zipfile
from collections import defaultdict
from pathlib import Path

from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # ansible_collections/llmops/sglang is this checkout (a checked-in symlink)
from ansible_collections.llmops.sglang.plugins.module_utils.pinned_requirements import (  # noqa: E402
    normalize,
    problem,
)

FILES = ROOT / "roles" / "router" / "files"
PACKAGE = "sglang-router"
# (CPython version, glibc of the newest system that runs it, the system) x architectures
PYTHONS = [("3.10", 35, "Ubuntu 22.04"), ("3.11", 36, "Debian 12"), ("3.12", 39, "Ubuntu 24.04")]
ARCHES = ["x86_64", "aarch64"]
WHEEL = re.compile(r"^(?P<name>[A-Za-z0-9_.]+)-(?P<version>[^-]+)-")


def platforms(glibc: int, arch: str) -> list[str]:
    """Every manylinux tag a glibc ``2.glibc`` host of ``arch`` accepts (pip --platform takes exact tags)."""
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(17, glibc + 1)]
    return [*tags, f"manylinux2014_{arch}", "linux_" + arch]


def download(requirements: list[str], dest: Path, python: str, glibc: int, arch: str) -> list[Path]:
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--only-binary", ":all:", "-d", str(dest),
           "--python-version", python, "--implementation", "cp", "--abi", "cp" + python.replace(".", ""),
           "--abi", "abi3", "--abi", "none"]  # fmt: skip
    for tag in platforms(glibc, arch):
        cmd += ["--platform", tag]
    proc = subprocess.run([*cmd, *requirements], capture_output=True, text=True, timeout=900, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise SystemExit(f"router-lock: pip could not download for CPython {python} {arch}: {tail}")
    return sorted(dest.glob("*.whl"))


def pins(files: list[Path]) -> dict[str, str]:
    out = {}
    for f in files:
        m = WHEEL.match(f.name)
        if not m:
            raise SystemExit(f"router-lock: cannot read a name and version from {f.name}")
        out[normalize(m["name"])] = m["version"]
    return out


def missing(files: list[Path], python: str, arch: str) -> list[str]:
    """The requirements the wheels in ``files`` have on CPython ``python`` on ``arch`` and that no file satisfies."""
    env = {"python_version": python, "python_full_version": python + ".0", "platform_machine": arch,
           "sys_platform": "linux", "platform_system": "Linux", "os_name": "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}  # fmt: skip
    have = pins(files)
    out = []
    for f in files:
        with zipfile.ZipFile(f) as z:
            meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
            headers = email.parser.Parser().parsestr(z.read(meta).decode("utf-8"))
        for line in headers.get_all("Requires-Dist") or []:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate(env):
                continue
            name = normalize(req.name)
            if name not in have:
                out.append(f"{name}{req.specifier}")
            elif not req.specifier.contains(have[name], prereleases=True):
                raise SystemExit(f"router-lock: {f.name} needs {line} on CPython {python}; the lock has {have[name]}")
    return sorted(set(out))


def render(version: str, digests: dict[str, dict[str, set[str]]]) -> str:
    systems = ", ".join(f"{system} (CPython {py})" for py, _glibc, system in PYTHONS)
    lines = [
        "# Copyright: llmops.sglang contributors",
        "# Apache License 2.0 (see LICENSE)",
        f"# {PACKAGE} {version} and its dependencies, hash-pinned: every wheel pip picks",
        f"# on {systems},",
        f"# on {' and '.join(ARCHES)}. The router role installs this file with pip install --require-hashes.",
        f"# Generated by scripts/router-lock.py {version}; do not edit.",
    ]
    for name in sorted(digests):
        ((ver, hashes),) = digests[name].items()
        lines.append(f"{name}=={ver} \\")
        lines += [
            f"    --hash=sha256:{h}" + (" \\" if i < len(hashes) - 1 else "") for i, h in enumerate(sorted(hashes))
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("version", help="the sglang-router release, e.g. 0.3.2")
    args = parser.parse_args(argv)
    if not re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", args.version):
        raise SystemExit(f"router-lock: expected a release such as 0.3.2; found {args.version!r}")
    digests: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    with tempfile.TemporaryDirectory() as tmp:
        oldest_python, oldest_glibc, _system = PYTHONS[0]
        first = download([f"{PACKAGE}=={args.version}"], Path(tmp) / "resolve", oldest_python, oldest_glibc, "x86_64")
        pinned = [f"{n}=={v}" for n, v in sorted(pins(first).items())]
        # what a target's markers add (a dependency the running Python did not need), pinned for every target
        for python, glibc, _system in PYTHONS:
            for arch in ARCHES:
                dest = Path(tmp) / f"more-{python}-{arch}"
                while more := missing(download([*pinned, "--no-deps"], dest, python, glibc, arch), python, arch):
                    added = pins(download([*more, "--no-deps"], dest / "added", python, glibc, arch))
                    pinned += [f"{n}=={v}" for n, v in sorted(added.items())]
                    for f in (dest / "added").glob("*.whl"):
                        f.rename(dest / f.name)
        for python, glibc, _system in PYTHONS:
            for arch in ARCHES:
                dest = Path(tmp) / f"{python}-{arch}"
                files = download([*pinned, "--no-deps"], dest, python, glibc, arch)
                got = pins(files)
                if got != dict(p.split("==", 1) for p in pinned):
                    raise SystemExit(f"router-lock: CPython {python} {arch} got {got}, expected {pinned}")
                for f in files:
                    m = WHEEL.match(f.name)
                    digests[normalize(m["name"])][m["version"]].add(hashlib.sha256(f.read_bytes()).hexdigest())
    text = render(args.version, digests)
    wrong = problem(text, PACKAGE, args.version)  # the role's own check of a lock (lock_problem)
    if wrong:
        raise SystemExit(f"router-lock: the lock would not pass the role's check: {wrong}")
    out = FILES / f"{PACKAGE}-{args.version}.txt"
    out.write_text(text)
    count = sum(len(h) for v in digests.values() for h in v.values())
    print(f"router-lock: {out.relative_to(ROOT)}: {len(digests)} packages, {count} files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
