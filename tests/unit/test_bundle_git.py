"""The bundle_git module against a repository made here (real git): a tag, a branch and a bare commit each become one
git bundle file that clones and describes as the ref, the same commit gives the same bytes, a new commit replaces the
file, and a bad ref or URL is refused in one line before the bundle changes."""

from __future__ import annotations

import hashlib
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _module_run import run_module

ENV = {"GIT_AUTHOR_DATE": "2025-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2025-01-01T00:00:00Z",
       "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
       "GIT_COMMITTER_EMAIL": "t@example.invalid", "PATH": "/usr/bin:/bin"}  # fmt: skip


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], env=ENV, capture_output=True, text=True, check=True).stdout


@pytest.fixture
def upstream(tmp_path):
    repo = tmp_path / "upstream"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    for n in (1, 2):
        (repo / "f").write_text(str(n))
        git(repo, "add", "f")
        git(repo, "commit", "-q", "-m", f"c{n}")
        git(repo, "tag", f"v0.{n}")
    return repo


def collect(tmp_path, upstream, ref):
    root = tmp_path / "bundle"
    root.mkdir(exist_ok=True)
    args = {"root": str(root), "name": "sglang", "url": str(upstream), "ref": ref, "cache_dir": str(tmp_path / "c")}
    return root, run_module("bundle_git", args)


@pytest.mark.parametrize("ref, describes", [("v0.1", "v0.1"), ("main", "v0.2"), ("commit of v0.1", "v0.1")])
def test_a_ref_becomes_one_bundle_that_clones_as_that_ref(tmp_path, upstream, ref, describes):
    if ref.startswith("commit"):
        ref = git(upstream, "rev-parse", "v0.1^{commit}").strip()
    root, got = collect(tmp_path, upstream, ref)
    assert got["changed"] and got["commit"] == git(upstream, "rev-parse", ref + "^{commit}").strip(), got
    assert got["path"] == f"git/sglang-{got['commit']}.bundle"
    assert got["sources"] == {got["path"]: {"kind": "git", "url": str(upstream), "commit": got["commit"], "ref": ref}}
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(root / got["path"]), str(clone), "--no-checkout"], check=True,
                   capture_output=True)  # fmt: skip
    assert git(clone, "describe", "--tags", got["commit"]).strip() == describes


def test_the_same_commit_gives_the_same_bytes_and_a_new_one_replaces_the_file(tmp_path, upstream):
    root, first = collect(tmp_path, upstream, "v0.1")
    data = (root / first["path"]).read_bytes()
    (root / first["path"]).unlink()
    _, again = collect(tmp_path, upstream, "v0.1")
    assert hashlib.sha256((root / again["path"]).read_bytes()).digest() == hashlib.sha256(data).digest()
    _, unchanged = collect(tmp_path, upstream, "v0.1")
    assert unchanged["changed"] is False
    _, newer = collect(tmp_path, upstream, "v0.2")
    assert newer["changed"] and newer["removed"] == [first["path"]]
    assert sorted(p.name for p in (root / "git").iterdir()) == [Path(newer["path"]).name]


@pytest.mark.parametrize(
    "ref, url, says",
    [
        ("v9.9", None, "expected v9.9 to name a commit of"),
        ("--upload-pack=touch /tmp/x", None, "expected a tag, branch or commit"),
        ("v0.1", "-oProxyCommand=x", "expected a git URL"),
    ],
)
def test_a_bad_ref_or_url_is_refused_and_the_bundle_is_unchanged(tmp_path, upstream, ref, url, says):
    root = tmp_path / "bundle"
    root.mkdir()
    args = {
        "root": str(root),
        "name": "sglang",
        "url": url or str(upstream),
        "ref": ref,
        "cache_dir": str(tmp_path / "c"),
    }
    got = run_module("bundle_git", args)
    assert got.get("failed") and says in got["msg"] and "\n" not in got["msg"], got
    assert list(root.iterdir()) == []


def test_check_mode_names_the_commit_and_writes_nothing(tmp_path, upstream):
    root = tmp_path / "bundle"
    root.mkdir()
    args = {"root": str(root), "name": "sglang", "url": str(upstream), "ref": "v0.1", "cache_dir": str(tmp_path / "c")}
    dry = run_module("bundle_git", args, check_mode=True)
    assert dry["changed"] is True and dry["commit"] == git(upstream, "rev-parse", "v0.1^{commit}").strip(), dry
    assert list(root.iterdir()) == [] and not (tmp_path / "c").exists()
    real = run_module("bundle_git", args)
    assert real["path"] == dry["path"] and real["sources"] == dry["sources"]
    assert run_module("bundle_git", args, check_mode=True)["changed"] is False
    assert run_module("bundle_git", args | {"ref": "v9"}, check_mode=True)["msg"].startswith("expected v9 to name")
