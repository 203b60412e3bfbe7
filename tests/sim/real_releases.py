"""Real SGLang wheels for the checks against real releases: taken from the shared cache, fetched when missing.

A check against a real release never skips: the wheel comes from the cache (``SGLANG_RELEASES``, default
/var/cache/llmops-sglang-releases, shared with ``make conformance``) or is downloaded there with pip from the package
index this host's pip configuration names (``pip download sglang==X --no-deps --only-binary :all:``, into a temporary
directory first and moved in whole, so a concurrent reader never sees half a wheel). When neither works the test fails
and says why.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

RELEASES = Path(os.environ.get("SGLANG_RELEASES", "/var/cache/llmops-sglang-releases"))


def wheel(version: str, cache: Path | None = None, package: str = "sglang") -> Path:
    """The ``package`` (sglang, or e.g. sglang-router) ``version`` wheel, from the cache or fetched into it; fails the
    test when it cannot be had."""
    cache = cache or RELEASES
    stem = package.replace("-", "_")
    found = sorted(cache.glob(f"{stem}-{version}-*.whl"))
    if found:
        return found[0]
    try:
        cache.mkdir(parents=True, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=".tmp-tests-", dir=cache)
    except OSError as exc:
        pytest.fail(f"expected the {package} {version} wheel in {cache} or a writable cache to fetch it into: {exc}")
    try:
        cmd = [sys.executable, "-m", "pip", "download", "-q", f"{package}=={version}", "--no-deps", "--only-binary",
               ":all:", "-d", tmp]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
        got = sorted(Path(tmp).glob(f"{stem}-{version}-*.whl"))
        if proc.returncode != 0 or not got:
            tail = " ".join((proc.stdout + proc.stderr).split()[-40:])
            pytest.fail(f"expected to fetch the {package} {version} wheel with pip into {cache}; pip said: {tail}")
        dest = cache / got[0].name
        os.replace(got[0], dest)
        return dest
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
