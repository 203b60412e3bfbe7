"""Git repositories over dumb HTTP: the SGLang stand-in before/after the SM120 fix, and flash-attention."""

import subprocess

import git_sources
import pytest

FIX = "CUDA_CAPABILITY[0] == 12"


def git(*args, cwd=None):
    env = {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "HOME": "/nonexistent",
        "PATH": "/usr/bin:/bin",
    }
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, env=env, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_sglang_clone_has_fix_only_in_head(built, server, tmp_path):
    info = built["summary"]["git"]["sglang"]
    assert "skipped" not in info, info
    git("clone", "-q", f"{server['git']}sgl-project/sglang.git", tmp_path / "sglang")
    repo = tmp_path / "sglang"
    log = git("log", "--format=%H %s", cwd=repo).splitlines()
    assert len(log) == 2 and [line.split()[0] for line in reversed(log)] == info["commits"]
    assert FIX in git("show", f"HEAD:{info['fix_file']}", cwd=repo)
    before = git("show", f"HEAD~1:{info['fix_file']}", cwd=repo)
    assert FIX not in before and "CUDA_CAPABILITY[0] >= 9" in before
    compile(before, "before.py", "exec")
    assert git("tag", cwd=repo).split() == ["v0.5.8", "v0.5.9"]
    assert git("rev-parse", "v0.5.8^{commit}", cwd=repo).strip() == info["commits"][0]
    assert (repo / "sgl-kernel" / "pyproject.toml").exists()


def test_flash_attention_clone(server, tmp_path):
    git("clone", "-q", "--branch", "v2.8.3", f"{server['git']}Dao-AILab/flash-attention.git", tmp_path / "fa")
    assert (tmp_path / "fa" / "_simbuild" / "sim_build_backend.py").exists()


def test_commit_shas_are_reproducible(built, tmp_path):
    again = git_sources.build(tmp_path / "out", built["tmp"] / "sglang-src")
    assert again["sglang"]["commits"] == built["summary"]["git"]["sglang"]["commits"]
    assert again["flash-attention"]["commits"] == built["summary"]["git"]["flash-attention"]["commits"]


def test_strip_fix_variants():
    marked = "x = 1\n# sm120-fix begin\ny = 2\n# sm120-fix end\nz = 3\n"
    assert git_sources.strip_sm120_fix(marked) == "x = 1\nz = 3\n"
    elif_form = "if a:\n    p = 1\nelif CUDA_CAPABILITY[0] == 12:\n    p = 2\nelse:\n    p = 3\n"
    assert git_sources.strip_sm120_fix(elif_form) == "if a:\n    p = 1\nelse:\n    p = 3\n"
    with pytest.raises(ValueError):
        git_sources.strip_sm120_fix("x = 1\n")
