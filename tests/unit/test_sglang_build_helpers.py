"""The sglang role's builder-side helpers on small repositories made here: the describe that setuptools-scm versions
SGLang with (roles/sglang/files/sglang_describe.py) on upstream's tagging -- releases tagged on release/vX.Y.Z
branches, never on main (upstream PR #17950) -- and the check of what a Rust extension build needs
(roles/sglang/files/sglang_rust_check.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

FILES = Path(__file__).resolve().parents[2] / "roles" / "sglang" / "files"
ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.invalid",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.invalid",
    "PATH": os.environ["PATH"],
}


def git(repo, *args):
    return subprocess.run(["git", *args], cwd=repo, env=ENV, capture_output=True, text=True, check=True).stdout.strip()


def commit(repo, msg):
    git(repo, "commit", "-q", "--allow-empty", "-m", msg)
    return git(repo, "rev-parse", "--short", "HEAD")


def describe(repo, ref):
    git(repo, "checkout", "-q", ref)
    out = subprocess.run(
        [sys.executable, str(FILES / "sglang_describe.py"), "--json"],
        cwd=repo, env=ENV, capture_output=True, text=True, check=False,
    )  # fmt: skip
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def upstream(tmp_path_factory):
    """main: v0.5.6.post2 (tagged on main, as before v0.5.7), then branch points of 0.5.8 and 0.5.9 and work on main;
    release/v0.5.8 with v0.5.8, a fix and v0.5.8.post1; release/v0.5.9 with v0.5.9."""
    repo = tmp_path_factory.mktemp("upstream")
    git(repo, "init", "-q", "-b", "main")
    commit(repo, "old")
    git(repo, "tag", "v0.5.6.post2")
    commit(repo, "work")
    commit(repo, "branch point 0.5.8")
    git(repo, "branch", "release/v0.5.8")
    commit(repo, "work")
    commit(repo, "branch point 0.5.9")
    git(repo, "branch", "release/v0.5.9")
    commit(repo, "main 1")
    commit(repo, "main 2")
    git(repo, "checkout", "-q", "release/v0.5.8")
    commit(repo, "Release v0.5.8")
    git(repo, "tag", "v0.5.8")
    commit(repo, "cherry-pick a fix")
    git(repo, "branch", "fix-on-0.5.8")
    commit(repo, "Release v0.5.8.post1")
    git(repo, "tag", "v0.5.8.post1")
    git(repo, "checkout", "-q", "release/v0.5.9")
    commit(repo, "Release v0.5.9")
    git(repo, "tag", "v0.5.9")
    return repo


def test_a_tag_names_itself(upstream):
    for tag in ("v0.5.8", "v0.5.8.post1", "v0.5.9", "v0.5.6.post2"):
        d = describe(upstream, tag)
        assert (d["describe"], d["how"], d["distance"]) == (tag, "exact", 0)


def test_main_counts_from_the_newest_release_branch_point(upstream):
    d = describe(upstream, "main")
    head = git(upstream, "rev-parse", "--short", "HEAD")
    assert d["describe"] == f"v0.5.9-2-g{head}" and d["release"] == "0.5.9" and d["how"] == "branch point of v0.5.9"
    # plain git describe, upstream's old way, would say v0.5.6.post2 plus every commit since
    assert git(upstream, "describe", "--tags").startswith("v0.5.6.post2-6-g")


def test_a_commit_on_an_old_release_branch_counts_from_that_release(upstream):
    d = describe(upstream, "fix-on-0.5.8")
    assert d["describe"].startswith("v0.5.8-1-g") and d["release"] == "0.5.8" and d["how"] == "nearest tag"


def test_no_tags_says_so(tmp_path):
    git(tmp_path, "init", "-q", "-b", "main")
    commit(tmp_path, "x")
    proc = subprocess.run([sys.executable, str(FILES / "sglang_describe.py")], cwd=tmp_path, env=ENV,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 1 and proc.stderr.strip() == "sglang_describe: no version tags"


def rust_check(checkout, path, index=""):
    env = {**ENV, "PATH": path, "HOME": str(checkout / "home")}
    proc = subprocess.run(
        [sys.executable, str(FILES / "sglang_rust_check.py"), str(checkout), index, "2"],
        env=env, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return json.loads(proc.stdout)


def test_rust_check_reads_the_checkout_and_the_host(tmp_path):
    tree = tmp_path / "sglang"
    (tree / "python").mkdir(parents=True)
    (tree / "python" / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools", "setuptools-rust>=1.10"]\n'
    )
    bare = rust_check(tree, "/nonexistent")
    assert bare["workspace"] is False and bare["declared"] is True and bare["switch"] is False
    assert bare["cargo"] is None and bare["rustc"] is None and bare["cc"] is False
    assert bare["index_reachable"] is True  # no index asked for
    (tree / "rust" / "sglang-grpc").mkdir(parents=True)
    (tree / "rust" / "Cargo.toml").write_text('[workspace]\nmembers = ["sglang-grpc"]\n')
    (tree / "rust" / "rust-toolchain.toml").write_text('[toolchain]\nchannel = "1.92"\n')
    (tree / "rust" / "sglang-grpc" / "Cargo.toml").write_text('[build-dependencies]\ntonic-build = "0.12"\n')
    (tree / "python" / "setup.py").write_text('os.environ.get("SGLANG_BUILD_RUST_EXTS")\n')
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, out in (
        ("cargo", "cargo 1.96.0 (abc 2026-01-01)"),
        ("rustc", "rustc 1.96.0 (abc 2026-01-01)"),
        ("cc", ""),
    ):
        (bin_dir / tool).write_text(f"#!/bin/sh\necho '{out}'\n")
        (bin_dir / tool).chmod(0o755)
    full = rust_check(tree, f"{bin_dir}:/usr/bin:/bin", index="http://127.0.0.1:9/")
    assert full["workspace"] and full["switch"] and full["channel"] == "1.92"
    assert (full["cargo"], full["rustc"], full["cc"]) == ("1.96.0", "1.96.0", True)
    assert full["protoc_needed"] is True  # tonic-build without protoc-bin-vendored
    assert full["index_reachable"] is False and "Connection refused" in full["index_error"]
    (tree / "rust" / "sglang-grpc" / "Cargo.toml").write_text(
        '[build-dependencies]\ntonic-build = "0.12"\nprotoc-bin-vendored = "3"\n'
    )
    assert rust_check(tree, str(bin_dir))["protoc_needed"] is False
