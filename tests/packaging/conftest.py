"""The collection as users get it: built with ``ansible-galaxy collection build`` from this working tree and
installed with ``ansible-galaxy collection install -p`` into a temporary collections path.

Every command of these tests runs as a user of the installed collection would run it: from a directory outside the
repository, with no ansible.cfg, ANSIBLE_COLLECTIONS_PATH naming only the temporary path, and HOME pointing at a
temporary home (so nothing is read from or written to the real ~/.ansible, which every engineer on this machine
shares).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
COLLECTION = "llmops.sglang"


def tool(name: str) -> str:
    path = VENV_BIN / name
    return str(path) if path.exists() else (shutil.which(name) or name)


def clean_env(**extra: str) -> dict[str, str]:
    """os.environ without any ANSIBLE_* / MOLECULE_* setting (make exports some) or report directory, plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "MOLECULE_"))}
    # a user's defaults for the callback's report directory (tests/conftest.py sets one for the test session)
    env = {k: v for k, v in env.items() if k not in ("SGLANG_REPORT_DIR", "XDG_STATE_HOME")}
    env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '')}"
    env.update(extra)
    return env


def run(cmd: list[str], *, cwd: Path, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run(
        cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False, stdin=subprocess.DEVNULL
    )


def tree_fingerprint(path: Path) -> dict[str, tuple[int, int]]:
    """{relative path: (size, mtime_ns)} of every file and directory under ``path``."""
    out = {}
    for p in sorted(path.rglob("*")):
        st = p.lstat()
        out[str(p.relative_to(path))] = (st.st_size if p.is_file() else 0, st.st_mtime_ns)
    return out


@dataclass
class Installed:
    tarball: Path
    version: str
    collections: Path  # the temporary collections path (contains ansible_collections/llmops/sglang)
    home: Path  # HOME for every command
    outside: Path  # the working directory: outside the repository, no ansible.cfg

    @property
    def path(self) -> Path:
        return self.collections / "ansible_collections" / "llmops" / "sglang"

    def env(self, **extra: str) -> dict[str, str]:
        return clean_env(HOME=str(self.home), ANSIBLE_COLLECTIONS_PATH=str(self.collections), **extra)

    def run(self, cmd: list[str], *, timeout: float = 120, **extra_env: str) -> subprocess.CompletedProcess:
        return run(cmd, cwd=self.outside, env=self.env(**extra_env), timeout=timeout)


@pytest.fixture(scope="session")
def tarball(tmp_path_factory) -> Path:
    """``ansible-galaxy collection build`` of this working tree (what a release would publish)."""
    out = tmp_path_factory.mktemp("build")
    home = tmp_path_factory.mktemp("build-home")
    p = run(
        [tool("ansible-galaxy"), "collection", "build", "--output-path", str(out), str(ROOT)],
        cwd=out,
        env=clean_env(HOME=str(home)),
    )
    assert p.returncode == 0, p.stdout + p.stderr
    built = list(out.glob("llmops-sglang-*.tar.gz"))
    assert len(built) == 1, built
    return built[0]


@pytest.fixture(scope="session")
def installed(tarball, tmp_path_factory) -> Installed:
    base = tmp_path_factory.mktemp("installed")
    inst = Installed(tarball, "", base / "collections", base / "home", base / "outside")
    for d in (inst.home, inst.outside):
        d.mkdir()
    assert not inst.outside.resolve().is_relative_to(ROOT)
    p = inst.run([tool("ansible-galaxy"), "collection", "install", "-p", str(inst.collections), str(tarball)])
    assert p.returncode == 0, p.stdout + p.stderr
    with tarfile.open(tarball) as tf:
        manifest = json.load(tf.extractfile("MANIFEST.json"))
    inst.version = manifest["collection_info"]["version"]
    # The one llmops.sglang these commands can see is the one just installed, at the version just built.
    listed = inst.run([tool("ansible-galaxy"), "collection", "list", COLLECTION, "--format", "json"])
    assert listed.returncode == 0, listed.stdout + listed.stderr
    found = {
        path: cols[COLLECTION]["version"] for path, cols in json.loads(listed.stdout).items() if COLLECTION in cols
    }
    assert found == {str(inst.collections / "ansible_collections"): inst.version}, found
    return inst
