"""Git repositories over dumb HTTP: real SGLang releases (from PyPI's sdists) with the SM120 fix commit, the SGLang
stand-in before/after the fix, and flash-attention."""

import subprocess
import tarfile

import git_sources
import pytest
import sglang_releases

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


def test_standin_clone_has_fix_only_in_head(built, server, tmp_path):
    info = built["summary"]["git"]["sglang-standin"]
    assert "skipped" not in info, info
    git("clone", "-q", f"{server['git']}llmops-sim/sglang-standin.git", tmp_path / "sglang")
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


def test_real_sglang_clone_has_the_released_trees_in_upstream_layout(built, server, tmp_path):
    info = built["summary"]["git"]["sglang"]
    assert "skipped" not in info, info
    git("clone", "-q", f"{server['git']}sgl-project/sglang.git", tmp_path / "real")
    repo = tmp_path / "real"
    versions = list(info["releases"])
    assert versions[:2] == ["0.5.8", "0.5.9"] and len(versions) == 3
    assert sglang_releases.version_key(versions[2]) > sglang_releases.version_key("0.5.9")
    assert sorted(git("tag", cwd=repo).split()) == sorted(f"v{v}" for v in versions)
    # main is the newest release; history is linear through the releases.
    assert git("rev-parse", "HEAD", cwd=repo).strip() == info["tags"][f"v{versions[2]}"]
    assert git("rev-list", "--count", "HEAD", cwd=repo).strip() == "3"
    for version in versions:
        sdist = sglang_releases.CACHE / info["releases"][version]
        with tarfile.open(sdist) as tar:
            real = tar.extractfile(f"sglang-{version}/sglang/srt/layers/attention/triton_ops/extend_attention.py")
            real_text = real.read().decode()
            pyproject = tar.extractfile(f"sglang-{version}/pyproject.toml").read().decode()
        # Byte for byte the released file, at upstream's path; the sdist-only files are not in the tree.
        assert git("show", f"v{version}:{info['fix_file']}", cwd=repo) == real_text
        assert git("show", f"v{version}:python/pyproject.toml", cwd=repo) == pyproject
        tree = git("ls-tree", "-r", "--name-only", f"v{version}", cwd=repo).split()
        assert "python/PKG-INFO" not in tree and "python/sglang/_version.py" not in tree
        assert not any(p.startswith("python/sglang.egg-info/") for p in tree)
        assert "sgl-kernel/CMakeLists.txt" in tree or "sgl-kernel/pyproject.toml" in tree
        assert (FIX in real_text) == (version != "0.5.8") == info["sm120"][version]
    assert "setuptools-scm" in git("show", "v0.5.9:python/pyproject.toml", cwd=repo)


def test_real_sglang_fix_commit_is_pr_14311_on_v058(built, server, tmp_path):
    info = built["summary"]["git"]["sglang"]
    git("clone", "-q", f"{server['git']}sgl-project/sglang.git", tmp_path / "real")
    repo = tmp_path / "real"
    fix = info["fix"]
    assert fix["base"] == "v0.5.8" and fix["taken_from"] == "v0.5.9"
    head = f"origin/{fix['branch']}"
    assert git("rev-parse", head, cwd=repo).strip() == fix["commit"]
    assert git("rev-parse", f"{head}~1", cwd=repo).strip() == info["tags"]["v0.5.8"]
    assert "#14311" in git("log", "-1", "--format=%B", head, cwd=repo)
    assert git("diff", "--name-only", "v0.5.8", head, cwd=repo).split() == [info["fix_file"]]
    diff = git("diff", "-U0", "v0.5.8", head, cwd=repo)
    added = [line[1:].strip() for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    removed = [line[1:].strip() for line in diff.splitlines() if line.startswith("-") and not line.startswith("---")]
    assert removed == ["if _is_cuda and CUDA_CAPABILITY[0] >= 9:"]
    assert added[0] == "if _is_cuda and CUDA_CAPABILITY[0] == 12:" and added[-1].startswith("elif _is_cuda and")
    blocks = [a for a in added if a.startswith("BLOCK_M, BLOCK_N")]
    assert blocks == ["BLOCK_M, BLOCK_N = (64, 128)", "BLOCK_M, BLOCK_N = (64, 64)", "BLOCK_M, BLOCK_N = (32, 32)"]
    # The branch is exactly the one released in 0.5.9.
    fixed = git("show", f"{head}:{info['fix_file']}", cwd=repo)
    assert (
        fixed.split("def _get_block_sizes_for_extend_attention")[1].split("return ")[0]
        == git("show", f"v0.5.9:{info['fix_file']}", cwd=repo)
        .split("def _get_block_sizes_for_extend_attention")[1]
        .split("return ")[0]
    )


def test_transplant_refuses_files_without_the_branches():
    with pytest.raises(ValueError, match="no 'CUDA_CAPABILITY\\[0\\] == 12' branch"):
        git_sources.transplant_sm120_fix("if x:\n    y = 1\n", "z = 2\n")
    with pytest.raises(ValueError, match=">= 9"):
        git_sources.transplant_sm120_fix("x = 1\n", "if CUDA_CAPABILITY[0] == 12:\n    y = 1\n")


def test_flash_attention_clone(server, tmp_path):
    git("clone", "-q", "--branch", "v2.8.3", f"{server['git']}Dao-AILab/flash-attention.git", tmp_path / "fa")
    assert (tmp_path / "fa" / "_simbuild" / "sim_build_backend.py").exists()


def test_commit_shas_are_reproducible(built, tmp_path):
    again = git_sources.build(tmp_path / "out", built["tmp"] / "sglang-src", releases=["0.5.8"])
    assert again["sglang-standin"]["commits"] == built["summary"]["git"]["sglang-standin"]["commits"]
    assert again["sglang"]["tags"]["v0.5.8"] == built["summary"]["git"]["sglang"]["tags"]["v0.5.8"]
    assert again["flash-attention"]["commits"] == built["summary"]["git"]["flash-attention"]["commits"]


def test_strip_fix_variants():
    marked = "x = 1\n# sm120-fix begin\ny = 2\n# sm120-fix end\nz = 3\n"
    assert git_sources.strip_sm120_fix(marked) == "x = 1\nz = 3\n"
    elif_form = "if a:\n    p = 1\nelif CUDA_CAPABILITY[0] == 12:\n    p = 2\nelse:\n    p = 3\n"
    assert git_sources.strip_sm120_fix(elif_form) == "if a:\n    p = 1\nelse:\n    p = 3\n"
    with pytest.raises(ValueError):
        git_sources.strip_sm120_fix("x = 1\n")
