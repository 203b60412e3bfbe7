"""Two processes sharing the toolchain cache make each tree once: while one makes it (scripts/toolchain/cache.py
_building), another cannot take its lock and, once it can, finds the stamp instead of removing the tree. Seen without
the lock on 2026-12-02: a unit run overlapping a make test failed with FileExistsError in the CUDA tree."""

from __future__ import annotations

import fcntl
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from toolchain import cache  # noqa: E402

HOLDER = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from toolchain import cache
tree = Path(sys.argv[2])
with cache._building(tree):
    print("holding", flush=True)
    sys.stdin.readline()  # until the test says so
"""


def test_a_second_maker_waits_for_the_first_and_finds_its_stamp(tmp_path, monkeypatch):
    tree = tmp_path / "venvs" / "x"
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(ROOT / "scripts"), str(tree)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert holder.stdout.readline().strip() == "holding"
        with open(tree.parent / ".x.lock", "w") as fh, pytest.raises(BlockingIOError):
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)  # held by the other process
        tree.mkdir(parents=True)
        cache._stamp(tree, {"made": "by the holder"})
    finally:
        holder.communicate("\n", timeout=30)
    assert holder.returncode == 0
    # the stamped tree is used as it is: nothing is run, nothing removed
    monkeypatch.setattr(cache, "CACHE", tmp_path)
    monkeypatch.setattr(cache, "_run", lambda *a, **k: pytest.fail(f"ran {a}"))
    assert cache.venv("x", ["anything==1"]) == tree / "bin" / "python"
    assert cache._stamped(tree)
