"""Git repositories over dumb HTTP: real SGLang releases (PyPI's sdists, or the wheel where there is none) tagged as
upstream tags them, with the SM120 fix commit, the SGLang stand-in before/after the fix, and flash-attention."""

import json
import subprocess
import tomllib
import zipfile

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
    # The option table of every served real release, read from its wheel/sdist: the stand-in plays those releases.
    options = json.loads(git("show", "HEAD:python/sglang/srt/sim_release_options.json", cwd=repo))
    assert (
        sorted(options["releases"])
        == sorted(built["summary"]["git"]["sglang"]["releases"])
        == sorted(info["release_options"])
    )
    assert "--cuda-graph-max-bs-decode" not in str(options["releases"]["0.5.9"])


@pytest.fixture(scope="module")
def real(built, server, tmp_path_factory):
    """One clone of the real releases' repository for the tests that only read it (about 20 MB over dumb HTTP)."""
    repo = tmp_path_factory.mktemp("real") / "sglang"
    git("clone", "-q", f"{server['git']}sgl-project/sglang.git", repo)
    return repo


def test_real_sglang_clone_has_the_released_trees_in_upstream_layout(built, real):
    info = built["summary"]["git"]["sglang"]
    assert "skipped" not in info, info
    repo = real
    versions = list(info["releases"])
    assert versions[:2] == ["0.5.8", "0.5.9"] and len(versions) == 3
    newest = versions[2]
    assert sglang_releases.version_key(newest) > sglang_releases.version_key("0.5.10.post1")  # wheel-only on PyPI
    assert info["from_wheel"] == [newest] and info["main_release"] == newest
    assert sorted(git("tag", cwd=repo).split()) == sorted(f"v{v}" for v in versions)
    # Tagged as upstream tags: each release on release/vX.Y.Z, lightweight, never on main.
    for v in versions:
        tag = f"v{v}"
        assert git("cat-file", "-t", tag, cwd=repo).strip() == "commit"
        assert git("rev-parse", f"origin/release/{tag}", cwd=repo).strip() == info["tags"][tag]
        assert (
            subprocess.run(["git", "merge-base", "--is-ancestor", tag, "HEAD"], cwd=repo, check=False).returncode == 1
        )
        assert git("rev-parse", f"{tag}~1", cwd=repo).strip() == info["branch_points"][v]
        assert git("diff", "--stat", info["branch_points"][v], tag, cwd=repo) == ""  # the release commit adds nothing
    # main: one commit past the newest release's branch point, with exactly the newest release's tree.
    assert git("rev-parse", "HEAD", cwd=repo).strip() == info["main"]
    assert git("rev-parse", "HEAD~1", cwd=repo).strip() == info["branch_points"][newest]
    assert git("rev-parse", "HEAD^{tree}", cwd=repo) == git("rev-parse", f"v{newest}^{{tree}}", cwd=repo)
    assert git("describe", "--tags", "--always", cwd=repo).strip() == info["main"][:7]  # no tag in main's history
    for version in versions:
        artifact = sglang_releases.CACHE / info["releases"][version]
        fix_file = info["fix_files"][version]
        files = {rel: data for rel, data, _ in sglang_releases.python_files(artifact)}
        real_text = files[fix_file.removeprefix("python/")].decode()
        # Byte for byte the released file, at upstream's path; the sdist-only files are not in the tree.
        assert git("show", f"v{version}:{fix_file}", cwd=repo) == real_text
        assert git("show", f"v{version}:python/pyproject.toml", cwd=repo) == files["pyproject.toml"].decode()
        tree = git("ls-tree", "-r", "--name-only", f"v{version}", cwd=repo).splitlines()
        assert "python/PKG-INFO" not in tree and "python/sglang/_version.py" not in tree
        assert not any(p.startswith("python/sglang.egg-info/") or p.endswith(".so") for p in tree)
        assert "sgl-kernel/CMakeLists.txt" in tree or "sgl-kernel/pyproject.toml" in tree
        assert (FIX in real_text) == (version != "0.5.8") == info["sm120"][version]
    assert "setuptools-scm" in git("show", "v0.5.9:python/pyproject.toml", cwd=repo)
    assert info["fix_files"][newest] == "python/sglang/kernels/ops/attention/extend_attention.py"  # moved in 0.5.16


def test_wheel_release_tree_is_the_wheel_minus_binaries_with_pyproject_from_its_metadata(built, real):
    info = built["summary"]["git"]["sglang"]
    newest = info["main_release"]
    wheel = sglang_releases.CACHE / info["releases"][newest]
    repo = real
    with zipfile.ZipFile(wheel) as z:
        shipped = {n for n in z.namelist() if n.startswith("sglang/") and not n.endswith("/")}
        meta = z.read(next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    tree = {p.removeprefix("python/") for p in git("ls-tree", "-r", "--name-only", "HEAD", cwd=repo).splitlines()}
    binaries = {n for n in shipped if n.endswith(".so")}
    assert binaries and not binaries & tree
    assert shipped - binaries - {"sglang/_version.py"} <= tree
    pyproject = tomllib.loads(git("show", "HEAD:python/pyproject.toml", cwd=repo))
    declared = [line.split(": ", 1)[1] for line in meta.splitlines() if line.startswith("Requires-Dist: ")]
    assert pyproject["project"]["dependencies"] == [r for r in declared if "extra ==" not in r]
    assert sum(len(v) for v in pyproject["project"]["optional-dependencies"].values()) == len(declared) - len(
        pyproject["project"]["dependencies"]
    )
    assert (
        pyproject["project"]["dynamic"] == ["version"]
        and "setuptools-scm>=8.0" in pyproject["build-system"]["requires"]
    )
    assert pyproject["project"]["scripts"]["sglang"] == "sglang.cli.main:main"
    assert "Rebuilt by llmops.sglang's git mirror from " + wheel.name in git(
        "show", "HEAD:python/pyproject.toml", cwd=repo
    )


def test_real_sglang_fix_commit_is_pr_14311_on_v058(built, real):
    info = built["summary"]["git"]["sglang"]
    repo = real
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
    twice = git_sources.build(tmp_path / "out2", built["tmp"] / "sglang-src", releases=["0.5.8"])
    # The stand-in's tree holds the served releases' option tables, so its shas follow the releases served.
    assert again["sglang-standin"]["commits"] == twice["sglang-standin"]["commits"]
    assert again["sglang"]["tags"]["v0.5.8"] == built["summary"]["git"]["sglang"]["tags"]["v0.5.8"]
    assert again["flash-attention"]["commits"] == built["summary"]["git"]["flash-attention"]["commits"]


def test_strip_fix_variants():
    marked = "x = 1\n# sm120-fix begin\ny = 2\n# sm120-fix end\nz = 3\n"
    assert git_sources.strip_sm120_fix(marked) == "x = 1\nz = 3\n"
    elif_form = "if a:\n    p = 1\nelif CUDA_CAPABILITY[0] == 12:\n    p = 2\nelse:\n    p = 3\n"
    assert git_sources.strip_sm120_fix(elif_form) == "if a:\n    p = 1\nelse:\n    p = 3\n"
    with pytest.raises(ValueError):
        git_sources.strip_sm120_fix("x = 1\n")
