"""The SM120 patch and marker of the sglang role against the real SGLang releases (PyPI sdists, or the wheel where a
release has no sdist, fetched into the shared cache at test time by sim/mirrors/sglang_releases.py, never committed).

The role applies roles/sglang/files/patches/0001-sm120-extend-attention-block-size.patch with `git apply` when the
fix's line (plugins/module_utils/sglang_flags.py FIX_MARKER) is not in the file where the checked-out release keeps
extend_attention.py (SGLang PR #14311, https://github.com/sgl-project/sglang/pull/14311, first released in 0.5.9).
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_flags

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sim" / "mirrors"))
import git_sources  # noqa: E402
import sglang_releases  # noqa: E402

PATCH = ROOT / "roles" / "sglang" / "files" / "patches" / "0001-sm120-extend-attention-block-size.patch"
# The patch is made for the file's place up to 0.5.15.post1 (the only releases without the fix are older).
FIX_FILE = sglang_flags.OLD_FIX_FILE
MARKER = re.compile(sglang_flags.FIX_MARKER, re.M)


@pytest.fixture(scope="module")
def releases():
    try:
        return sglang_releases.ensure()
    except (RuntimeError, OSError) as e:  # no network and no cache: a check against real releases fails, never skips
        pytest.fail(f"expected the real SGLang sdists in the cache or from the package index; found: {e}")


def released_file(artifact: Path, version: str) -> str:
    """The release's extend_attention.py, where sglang_flags says that release keeps it."""
    path = sglang_flags.sm120_fix(version)["path"].removeprefix("python/")
    return next(data for rel, data, _ in sglang_releases.python_files(artifact) if rel == path).decode()


def tree(tmp_path: Path, text: str) -> Path:
    repo = tmp_path / "sglang"
    (repo / FIX_FILE).parent.mkdir(parents=True)
    (repo / FIX_FILE).write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    return repo


def git_apply(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "apply", *args, str(PATCH)], cwd=repo, capture_output=True, text=True, check=False)


def test_marker_finds_nothing_in_real_058_and_the_fix_in_059_and_newer(releases):
    for version, sdist in releases.items():
        found = MARKER.search(released_file(sdist, version)) is not None
        assert found == (sglang_releases.version_key(version) >= sglang_releases.version_key("0.5.9")), version


def test_patch_applies_to_real_058_and_yields_the_fix_as_released_in_059(releases, tmp_path):
    before = released_file(releases["0.5.8"], "0.5.8")
    repo = tree(tmp_path, before)
    check = git_apply(repo, "--check")
    assert check.returncode == 0, check.stderr
    assert git_apply(repo).returncode == 0
    patched = (repo / FIX_FILE).read_text()
    assert MARKER.search(patched)
    # Exactly the mirror's PR #14311 commit on v0.5.8: the 0.5.9 branch transplanted into the 0.5.8 file.
    assert patched == git_sources.transplant_sm120_fix(before, released_file(releases["0.5.9"], "0.5.9"))
    compile(patched, FIX_FILE, "exec")


def test_patch_would_not_apply_to_releases_that_have_the_fix(releases, tmp_path):
    # The role never tries (the marker matches first); applying anyway fails instead of doubling the branch.
    for version, sdist in releases.items():
        if version == "0.5.8":
            continue
        repo = tree(tmp_path / version, released_file(sdist, version))
        assert git_apply(repo, "--check").returncode != 0, version


def test_patch_context_includes_the_hopper_comment_line_of_the_real_file():
    text = PATCH.read_text()
    assert "             # Hopper architecture (H100, etc.)\n" in text
    assert "+        if _is_cuda and CUDA_CAPABILITY[0] == 12:\n" in text
    assert "-        if _is_cuda and CUDA_CAPABILITY[0] >= 9:\n" in text
