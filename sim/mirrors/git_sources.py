"""Git repositories served over dumb HTTP.

- `sgl-project/sglang.git`: real SGLang history made from the released source distributions on PyPI (tags v0.5.8,
  v0.5.9 and the newest sdist, in upstream's layout under `python/`), plus the SM120 fix of PR #14311 as one commit on
  top of v0.5.8 (branch `sm120-fix-on-v0.5.8`). The sdists carry no sgl-kernel sources, so `sgl-kernel/` is the
  stand-in CMake project (stubs/sgl-kernel).
- `llmops-sim/sglang-standin.git`: the SGLang stand-in (sim/sglang) before/after the fix, which the server stage
  installs and runs (the real SGLang cannot serve without a GPU).
- `Dao-AILab/flash-attention.git`: the flash-attention stand-in build.
"""

import ast
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import sglang_cli
import sglang_releases
from common import HERE, REPO_ROOT, Stamp, clamp_mtimes, fingerprint, reset_dir, run, write

STUBS = HERE / "stubs"
FIX_FILE = "python/sglang/srt/layers/attention/triton_ops/extend_attention.py"
# Where releases keep the SM120 fix's file (moved in 0.5.16; plugins/module_utils/sglang_flags.py owns the windows,
# the mirror just finds whichever the tree has).
FIX_FILES = (FIX_FILE, "python/sglang/kernels/ops/attention/extend_attention.py")
# _version.py: what setuptools-scm writes into a tree it built (the stand-in's sglang/_version.py); never in git.
IGNORE = shutil.ignore_patterns(
    "__pycache__", "*.pyc", ".git", "*.egg-info", "build", "dist", ".pytest_cache", "_version.py"
)
AUTHOR = ("SGLang stand-in", "sglang-sim@example.invalid")
SGLANG_COMMITS = [
    ("2025-01-01T00:00:00+00:00", "Import the SGLang stand-in tree (before the SM120 extend-attention fix)", "v0.5.8"),
    ("2025-01-02T00:00:00+00:00", "[Fix] add block size logic for sm120 smem size (#14311)", "v0.5.9"),
]
FLASH_ATTN_COMMIT = ("2025-01-01T00:00:00+00:00", "Import the flash-attention stand-in tree", "v2.8.3")
REAL_AUTHOR = ("SGLang release import", "sglang-releases@example.invalid")
FIX_BRANCH = "sm120-fix-on-v0.5.8"
FIX_BASE = "0.5.8"
FIX_MESSAGE = """[Fix] add block size logic for sm120 smem size (#14311)

The change of https://github.com/sgl-project/sglang/pull/14311 as upstream merged it (first released in 0.5.9),
reproduced on v0.5.8: the `CUDA_CAPABILITY[0] == 12` branch of extend_attention.py, taken from the first release
that has it.
"""

_MARK_BEGIN = re.compile(r"#.*sm120[-_ ]fix.*\b(begin|start)\b", re.I)
_MARK_END = re.compile(r"#.*sm120[-_ ]fix.*\bend\b", re.I)
_BRANCH = re.compile(r"^(\s*)(if|elif)\s+.*CUDA_CAPABILITY\[0\]\s*==\s*12\b.*:\s*(#.*)?$")


def _indent(line):
    return len(line) - len(line.lstrip(" \t"))


def strip_sm120_fix(text: str) -> str:
    """Return the file as it was before the fix.

    Either the lines between `# sm120-fix begin` / `# sm120-fix end` comments are removed, or the
    `if/elif ... CUDA_CAPABILITY[0] == 12:` branch with its body is removed (a following `elif` becomes `if`).
    """
    lines = text.splitlines(keepends=True)
    begin = next((i for i, line in enumerate(lines) if _MARK_BEGIN.search(line)), None)
    if begin is not None:
        end = next(i for i in range(begin, len(lines)) if _MARK_END.search(lines[i]))
        out = "".join(lines[:begin] + lines[end + 1 :])
    else:
        for i, line in enumerate(lines):
            m = _BRANCH.match(line.rstrip("\r\n"))
            if not m:
                continue
            indent, keyword = m.group(1), m.group(2)
            j = i + 1
            while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > len(indent)):
                j += 1
            if keyword == "if" and j < len(lines):
                nxt = lines[j]
                if nxt.startswith(indent + "elif "):
                    lines[j] = indent + "if " + nxt[len(indent) + 5 :]
                elif nxt.startswith(indent + "else"):
                    raise ValueError("cannot drop an if-branch followed directly by else")
            out = "".join(lines[:i] + lines[j:])
            break
        else:
            raise ValueError("no SM120 fix found (no 'CUDA_CAPABILITY[0] == 12' branch, no sm120-fix markers)")
    ast.parse(out)
    return out


_SM90_BRANCH = re.compile(r"^(\s*)if(\s+.*CUDA_CAPABILITY\[0\]\s*>=\s*9\b.*:\s*(#.*)?)$")
SM120_BLOCK = """\
{i}if _is_cuda and CUDA_CAPABILITY[0] == 12:
{i}    # sm120 workstation Blackwell (RTX PRO 6000) has ~100 KB shared memory per block (PR #14311)
{i}    if Lq <= 128:
{i}        BLOCK_M, BLOCK_N = (64, 128)
{i}    elif Lq <= 256:
{i}        BLOCK_M, BLOCK_N = (64, 64)
{i}    else:
{i}        BLOCK_M, BLOCK_N = (32, 32)
"""


def has_sm120_fix(text: str) -> bool:
    return any(_BRANCH.match(line) for line in text.splitlines()) or bool(_MARK_BEGIN.search(text))


def add_sm120_fix(text: str) -> str:
    """Return the file with the fix: an `if ... CUDA_CAPABILITY[0] == 12:` branch before the SM90+ branch."""
    lines = text.splitlines(keepends=True)
    for i, line in enumerate(lines):
        m = _SM90_BRANCH.match(line.rstrip("\r\n"))
        if m:
            indent = m.group(1)
            lines[i] = f"{indent}elif{m.group(2)}\n"
            out = "".join(lines[:i]) + SM120_BLOCK.format(i=indent) + "".join(lines[i:])
            ast.parse(out)
            return out
    raise ValueError("cannot add the SM120 fix: no 'if ... CUDA_CAPABILITY[0] >= 9:' branch found")


def _branch_span(lines, i):
    """End (exclusive) of the if/elif branch starting at line i: the deeper-indented lines, blank lines within."""
    indent = _indent(lines[i])
    j = i + 1
    while j < len(lines) and (not lines[j].strip() or _indent(lines[j]) > indent):
        j += 1
    while j > i + 1 and not lines[j - 1].strip():
        j -= 1
    return j


def transplant_sm120_fix(before: str, fixed: str) -> str:
    """`before` (a file without the fix) with the `CUDA_CAPABILITY[0] == 12` branch of `fixed` (a release that has it)
    inserted before the `CUDA_CAPABILITY[0] >= 9` branch, which becomes an `elif` -- the shape of PR #14311."""
    flines = fixed.splitlines(keepends=True)
    start = next((i for i, line in enumerate(flines) if _BRANCH.match(line.rstrip("\r\n"))), None)
    if start is None:
        raise ValueError("the fixed file has no 'CUDA_CAPABILITY[0] == 12' branch")
    branch = flines[start : _branch_span(flines, start)]
    blines = before.splitlines(keepends=True)
    for i, line in enumerate(blines):
        m = _SM90_BRANCH.match(line.rstrip("\r\n"))
        if m and _indent(line) == _indent(branch[0]):
            blines[i] = f"{m.group(1)}elif{m.group(2)}\n"
            out = "".join(blines[:i] + branch + blines[i:])
            ast.parse(out)
            return out
    raise ValueError("the file without the fix has no 'if ... CUDA_CAPABILITY[0] >= 9:' branch at the fix's indent")


def _git(args, cwd, date=None, author=AUTHOR, check=True):
    env = {
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_AUTHOR_NAME": author[0],
        "GIT_AUTHOR_EMAIL": author[1],
        "GIT_COMMITTER_NAME": author[0],
        "GIT_COMMITTER_EMAIL": author[1],
        # no detached `git gc --auto` racing the work tree's removal after the last commit
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": "gc.auto",
        "GIT_CONFIG_VALUE_0": "0",
        "GIT_CONFIG_KEY_1": "maintenance.auto",
        "GIT_CONFIG_VALUE_1": "false",
    }
    if date:
        env.update(GIT_AUTHOR_DATE=date, GIT_COMMITTER_DATE=date)
    if not check:
        proc = subprocess.run(
            ["git", *args], cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True, check=False
        )
        return proc.stdout.strip() if proc.returncode == 0 else ""
    return run(["git", *args], cwd=cwd, env=env).strip()


def _commit_tree(work: Path, tree_of: str, parent: str, date: str, *, message: str, author=REAL_AUTHOR):
    """A commit with the tree of `tree_of` on top of `parent`, made without touching the work tree."""
    return _git(["commit-tree", f"{tree_of}^{{tree}}", "-p", parent, "-m", message], work, date, author)


def _commit(work: Path, date: str, message: str, tag: str | None, *, author=AUTHOR, annotated=False):
    clamp_mtimes(work)
    _git(["add", "-A", "."], work, author=author)
    _git(["-c", "commit.gpgsign=false", "commit", "-q", "--allow-empty", "-m", message], work, date, author)
    if tag and annotated:
        _git(["-c", "tag.gpgsign=false", "tag", "-a", "-m", f"Release {tag}", tag], work, date, author)
    elif tag:
        _git(["tag", tag], work, date, author)
    return _git(["rev-parse", "HEAD"], work)


def _publish(work: Path, dest: Path, what: str = "stand-in"):
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    _git(["clone", "-q", "--bare", "--no-local", str(work), str(dest)], work.parent)
    _git(["repack", "-a", "-d", "-q"], dest)
    _git(["update-server-info"], dest)
    write(dest / "description", f"{dest.name} ({what}, llmops.sglang simulated mirror)\n")


def _add_simbuild(tree: Path):
    shutil.copytree(STUBS / "simbuild", tree / "_simbuild", ignore=IGNORE, dirs_exist_ok=True)


def build_sglang(sglang_src: Path, work_root: Path, dest: Path, sources=None):
    work = work_root / "sglang"
    reset_dir(work)
    _git(["init", "-q", "-b", "main"], work)
    shutil.copytree(sglang_src, work, ignore=IGNORE, dirs_exist_ok=True)
    # The options each served release's argparse accepts, read from its wheel/sdist: the stand-in refuses what the
    # release it plays would refuse (sim/sglang/python/sglang/srt/sim_release_options.py).
    options = sglang_cli.table(sorted((sources or {}).values())) if sources else None
    if options:
        write(work / "python/sglang/srt/sim_release_options.json", json.dumps(options, sort_keys=True) + "\n")
    # The tree's sgl-kernel becomes the stand-in *build* (a simulated CUDA compile that reads the jobs/threads/arch
    # knobs, records them and dies like the OOM killer over RAM), as upstream's sgl-kernel is a CMake build.
    _add_kernel_standin(work)
    overlay = True
    fix = work / FIX_FILE
    if not fix.exists():
        found = sorted(work.rglob("extend_attention.py"))
        if not found:
            raise FileNotFoundError(f"{sglang_src}: no {FIX_FILE}")
        fix = found[0]
    text = fix.read_text()
    if has_sm120_fix(text):
        before, after, derived = strip_sm120_fix(text), text, "before (fix stripped from the source tree's file)"
    else:
        before, after, derived = text, add_sm120_fix(text), "after (fix added to the source tree's file)"
    fix.write_text(before)
    shas = []
    (date, msg, tag) = SGLANG_COMMITS[0]
    shas.append(_commit(work, date, msg, tag))
    fix.write_text(after)
    (date, msg, tag) = SGLANG_COMMITS[1]
    shas.append(_commit(work, date, msg, tag))
    _publish(work, dest)
    return {
        "url_path": f"/git/{dest.relative_to(dest.parents[1]).as_posix()}",
        "commits": shas,
        "tags": {c[2]: s for c, s in zip(SGLANG_COMMITS, shas, strict=True)},
        "fix_file": str(fix.relative_to(work)),
        "derived": derived,
        "sgl_kernel_overlay": overlay,
        "release_options": sorted(options["releases"]) if options else [],
    }


def _add_kernel_standin(work: Path):
    """The sdists carry no sgl-kernel sources: `sgl-kernel/` is the stand-in CMake project (stubs/sgl-kernel)."""
    kernel = work / "sgl-kernel"
    shutil.rmtree(kernel, ignore_errors=True)
    shutil.copytree(STUBS / "sgl-kernel", kernel, ignore=IGNORE)
    _add_simbuild(kernel)


def release_branch(version: str) -> str:
    """Upstream's release branch of a version: release/v0.5.12 carries v0.5.12 and v0.5.12.postN (PR #25731:
    "cherry-pick #25699 onto release/v0.5.12 so the fix lands in a v0.5.12.postN patch release")."""
    return "release/v" + version.split(".post", maxsplit=1)[0]


def build_real_sglang(sources: dict, work_root: Path, dest: Path):
    """Upstream's history as far as the releases show it, tagged as upstream tags it.

    Since v0.5.7 upstream tags each release on its own release branch, cut from main, and main never contains the
    tag (PR #17950: "release tags (v0.5.7, v0.5.8, etc.) are created on separate release branches and are not part of
    the main branch history after v0.5.6.post2"; python/tools/get_version_tag.py describes main from the highest tag
    and the merge-base for that reason). So, per release, oldest first: a commit on `main` with the release's tree
    (python/ = the sdist, or the tree rebuilt from the wheel; sgl-kernel/ = the stand-in), the branch
    release/vX.Y.Z cut there, and on it the release commit with the lightweight tag vX (GitHub releases create
    lightweight tags). `main` ends one commit after the newest release's branch point, with that release's tree: a
    build of main is the newest release's source at a commit past its tag, as upstream's main is. Branch
    sm120-fix-on-v0.5.8 = v0.5.8 + PR #14311."""
    work = work_root / "sglang-real"
    reset_dir(work)
    _git(["init", "-q", "-b", "main"], work)
    tags, files, branch_points = {}, {}, {}
    for n, (version, artifact) in enumerate(sources.items()):
        for child in work.iterdir():
            if child.name != ".git":
                shutil.rmtree(child) if child.is_dir() else child.unlink()
        sglang_releases.extract_python_tree(artifact, work / "python")
        _add_kernel_standin(work)
        fix_file = next((f for f in FIX_FILES if (work / f).exists()), None)
        files[version] = (fix_file, (work / fix_file).read_text() if fix_file else None)
        date = f"2025-02-{n + 1:02d}T00:00:00+00:00"
        kind = (
            "wheel; no sdist on PyPI, pyproject.toml rebuilt from its metadata"
            if artifact.name.endswith(".whl")
            else "sdist"
        )
        branch_points[version] = _commit(
            work, date, f"SGLang {version} tree (from PyPI: {artifact.name}, {kind})", None, author=REAL_AUTHOR
        )
        branch = release_branch(version)
        parent = (
            _git(["rev-parse", "--verify", "-q", f"refs/heads/{branch}"], work, check=False) or branch_points[version]
        )
        tags[f"v{version}"] = _commit_tree(
            work, branch_points[version], parent, date.replace("T00", "T12"), message=f"Release v{version}"
        )
        _git(["update-ref", f"refs/heads/{branch}", tags[f"v{version}"]], work)
        _git(["tag", f"v{version}", tags[f"v{version}"]], work)
    newest = list(sources)[-1]
    main = _commit(
        work,
        "2025-02-28T00:00:00+00:00",
        f"Development continues on main after release/v{newest} was cut (tree unchanged: the v{newest} source)",
        None,
        author=REAL_AUTHOR,
    )
    fix = None
    fixed_release = next((v for v, (_f, text) in files.items() if text and has_sm120_fix(text)), None)
    base_file, base_text = files.get(FIX_BASE, (None, None))
    if FIX_BASE in sources and base_text and fixed_release and not has_sm120_fix(base_text):
        _git(["checkout", "-q", "-b", FIX_BRANCH, f"v{FIX_BASE}"], work)
        (work / base_file).write_text(transplant_sm120_fix(base_text, files[fixed_release][1]))
        fix = {
            "branch": FIX_BRANCH,
            "base": f"v{FIX_BASE}",
            "taken_from": f"v{fixed_release}",
            "commit": _commit(work, "2025-03-01T00:00:00+00:00", FIX_MESSAGE, None, author=REAL_AUTHOR),
        }
        _git(["checkout", "-q", "main"], work)
    _publish(work, dest, "SGLang releases from PyPI")
    return {
        "url_path": f"/git/{dest.relative_to(dest.parents[1]).as_posix()}",
        "releases": {v: p.name for v, p in sources.items()},
        "from_wheel": [v for v, p in sources.items() if p.name.endswith(".whl")],
        "tags": tags,
        "branches": {release_branch(v): tags[f"v{v}"] for v in sources},
        "branch_points": branch_points,
        "main": main,
        "main_release": newest,
        "sm120": {v: bool(text and has_sm120_fix(text)) for v, (_f, text) in files.items()},
        "fix_files": {v: f for v, (f, _t) in files.items()},
        "fix": fix,
        "fix_file": files[FIX_BASE][0] if FIX_BASE in files else None,
    }


_FETCH = re.compile(
    r"FetchContent_Declare\(\s*(\S+)\s+GIT_REPOSITORY\s+https://github\.com/([\w.-]+)/([\w.-]+?)(?:\.git)?\s+"
    r"GIT_TAG\s+(\S+)"
)


def build_kernel_dependencies(work_root: Path, git_root: Path):
    """The GitHub repositories the stand-in sgl-kernel's CMake configure step clones (FetchContent), as tiny repos
    carrying the pinned tag, so a build can be pointed at this mirror instead of GitHub (sglang_kernel_git_mirror)."""
    out = {}
    for name, org, repo, tag in _FETCH.findall((STUBS / "sgl-kernel" / "CMakeLists.txt").read_text()):
        work = work_root / "deps" / org / repo
        reset_dir(work)
        _git(["init", "-q", "-b", "main"], work)
        write(work / "README.md", f"Stand-in for https://github.com/{org}/{repo} (FetchContent {name}, tag {tag}).\n")
        sha = _commit(work, "2025-01-01T00:00:00+00:00", f"Stand-in {org}/{repo} at {tag}", tag)
        dest = git_root / org / f"{repo}.git"
        _publish(work, dest)
        out[f"{org}/{repo}"] = {"url_path": f"/git/{org}/{repo}.git", "tag": tag, "commit": sha}
    return out


def build_flash_attention(work_root: Path, dest: Path):
    work = work_root / "flash-attention"
    reset_dir(work)
    _git(["init", "-q", "-b", "main"], work)
    shutil.copytree(STUBS / "flash-attention", work, ignore=IGNORE, dirs_exist_ok=True)
    _add_simbuild(work)
    date, msg, tag = FLASH_ATTN_COMMIT
    sha = _commit(work, date, msg, tag)
    _publish(work, dest)
    return {"url_path": f"/git/{dest.relative_to(dest.parents[1]).as_posix()}", "commits": [sha], "tags": {tag: sha}}


def build(out: Path, sglang_src: Path | None = None, force=False, releases=None):
    """Build the three repositories into out/www/git. `releases`: SGLang versions to import from PyPI (default
    SIM_SGLANG_RELEASES or 0.5.8 0.5.9 newest; empty: none)."""
    sglang_src = Path(sglang_src) if sglang_src else REPO_ROOT / "sim" / "sglang"
    if releases is None:
        releases = os.environ.get("SIM_SGLANG_RELEASES", " ".join(sglang_releases.DEFAULT_RELEASES)).split()
    git_root = out / "www" / "git"
    sources, sources_error = {}, None
    if releases:
        try:
            sources = sglang_releases.ensure(releases)
        except (RuntimeError, OSError, ValueError) as e:
            sources_error = f"SGLang releases {releases} not available: {e}"
    stamp = Stamp(
        out,
        "git",
        fingerprint(
            Path(__file__),
            HERE / "sglang_releases.py",
            HERE / "sglang_cli.py",
            STUBS / "simbuild",
            STUBS / "flash-attention",
            STUBS / "sgl-kernel",
            sglang_src,
            *[str(v) for v in sources],
            *sources.values(),
            sources_error or "",
        ),
    )
    summary_file = out / "git-summary.json"
    if not force and stamp.fresh(summary_file):
        return json.loads(summary_file.read_text()) | {"skipped": True}
    work_root = out / ".work" / "git"
    reset_dir(work_root)
    summary = {"root": str(git_root)}
    summary["flash-attention"] = build_flash_attention(work_root, git_root / "Dao-AILab" / "flash-attention.git")
    summary["sgl-kernel-deps"] = build_kernel_dependencies(work_root, git_root)
    if sglang_src.is_dir():
        try:
            standin = git_root / "llmops-sim" / "sglang-standin.git"
            summary["sglang-standin"] = build_sglang(sglang_src, work_root, standin, sources)
        except (FileNotFoundError, ValueError) as e:
            summary["sglang-standin"] = {"skipped": str(e)}
    else:
        summary["sglang-standin"] = {"skipped": f"no SGLang stand-in tree at {sglang_src}"}
    if sources:
        summary["sglang"] = build_real_sglang(sources, work_root, git_root / "sgl-project" / "sglang.git")
    else:
        summary["sglang"] = {"skipped": sources_error or "no SGLang releases requested (SIM_SGLANG_RELEASES empty)"}
    for key in ("sglang-standin", "sglang"):
        if "skipped" in summary[key]:
            print(f"warning: {key} repository not built: {summary[key]['skipped']}", file=sys.stderr)
    shutil.rmtree(work_root)
    write(summary_file, json.dumps(summary, indent=2) + "\n")
    stamp.done()
    return summary
