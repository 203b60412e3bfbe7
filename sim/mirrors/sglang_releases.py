"""Real SGLang source releases from PyPI, cached on this machine (never committed): the trees the git mirror serves.

`pip download sglang==X --no-deps --no-binary sglang` fetches the sdist (build dependencies as wheels, so pip can
read its metadata). Downloads go to a temporary directory and are moved into the cache whole, so a concurrent reader
never sees half a file. The cache is `SGLANG_RELEASES_CACHE` (default /var/cache/llmops-sglang-releases), shared with
other users of the same releases.
"""

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

CACHE = Path(os.environ.get("SGLANG_RELEASES_CACHE", "/var/cache/llmops-sglang-releases"))
# Releases the mirror commits: the last one without the SM120 fix, the first one with it, and the newest sdist.
DEFAULT_RELEASES = ("0.5.8", "0.5.9", "newest")
# Files an sdist has that upstream's git tree does not: generated metadata and setuptools-scm's version file.
SDIST_ONLY = ("PKG-INFO", "setup.cfg", "sglang.egg-info", "sglang/_version.py")
_SDIST = re.compile(r"^sglang-(\d+(?:\.\d+)*(?:\.post\d+)?)\.tar\.gz$")


def version_key(version: str):
    """'0.5.10.post1' -> (0, 5, 10, 1); releases only (no rc/dev)."""
    main, _, post = version.partition(".post")
    return (*(int(x) for x in main.split(".")), int(post or -1))


def cached_sdists(cache: Path = CACHE) -> dict:
    """{version: path} of the sglang sdists in the cache."""
    out = {}
    for p in cache.glob("sglang-*.tar.gz"):
        m = _SDIST.match(p.name)
        if m:
            out[m.group(1)] = p
    return out


def download(spec: str, cache: Path = CACHE) -> Path:
    """Download one sdist (`sglang==X` or `sglang`) with pip into the cache; return its path."""
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".dl-", dir=cache) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "sglang", "-q", "-d", tmp, spec]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
        files = [p for p in Path(tmp).glob("sglang-*.tar.gz") if _SDIST.match(p.name)]
        if proc.returncode != 0 or len(files) != 1:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
            raise RuntimeError(f"pip download {spec} (sdist) failed ({proc.returncode}): {tail}")
        dest = cache / files[0].name
        if not dest.exists():
            shutil.move(str(files[0]), str(dest))
        return dest


def ensure(releases=DEFAULT_RELEASES, cache: Path = CACHE) -> dict:
    """{version: sdist path} for the wanted releases, downloading what the cache lacks.

    `newest` is the highest sdist in the cache above every other wanted release when there is one (so a warm cache
    builds offline), else whatever `pip download sglang` picks as the newest release with an sdist.
    """
    have = cached_sdists(cache)
    out = {}
    for rel in releases:
        if rel == "newest":
            continue
        out[rel] = have.get(rel) or download(f"sglang=={rel}", cache)
    if "newest" in releases:
        floor = max((version_key(v) for v in out), default=(0,))
        newer = sorted((v for v in cached_sdists(cache) if version_key(v) > floor), key=version_key)
        if newer:
            out[newer[-1]] = cached_sdists(cache)[newer[-1]]
        else:
            path = download("sglang", cache)
            out[_SDIST.match(path.name).group(1)] = path
    return dict(sorted(out.items(), key=lambda kv: version_key(kv[0])))


def extract_python_tree(sdist: Path, dest: Path):
    """Unpack an sglang sdist as upstream's `python/` directory (the sdist's root is upstream's python/)."""
    dest.mkdir(parents=True, exist_ok=True)
    with tarfile.open(sdist) as tar:
        members = []
        for m in tar.getmembers():
            parts = Path(m.name).parts
            if len(parts) < 2 or not (m.isfile() or m.isdir()):
                continue
            rel = Path(*parts[1:])
            if any(rel.as_posix() == s or rel.as_posix().startswith(s + "/") for s in SDIST_ONLY):
                continue
            m.name = rel.as_posix()
            members.append(m)
        tar.extractall(dest, members=members, filter="data")
