"""Real SGLang releases from PyPI, cached on this machine (never committed): the trees the git mirror serves.

A release's source is its sdist when PyPI has one (up to 0.5.10.post1): `pip download sglang==X --no-deps
--no-binary sglang`. From 0.5.11 PyPI has wheels only; the tree is then rebuilt from the wheel
(`pip download sglang==X --no-deps --only-binary :all:`): the `sglang/` package (and the top-level `tools/` some
wheels carry) is upstream's `python/` directory minus the compiled extensions (`*.so`: the wheel carries their
binaries, never their Rust sources), and `python/pyproject.toml`, `python/README.md` and `python/LICENSE` are
rebuilt from the wheel's metadata (see `rebuilt_pyproject`). Downloads go to a temporary directory and are moved into
the cache whole, so a concurrent reader never sees half a file. The cache is `SGLANG_RELEASES_CACHE` (default
/var/cache/llmops-sglang-releases), shared with other users of the same releases (make conformance keeps its wheels
there too).
"""

import email.parser
import email.policy
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from pathlib import Path

CACHE = Path(os.environ.get("SGLANG_RELEASES_CACHE", "/var/cache/llmops-sglang-releases"))
# Releases the mirror commits: the last one without the SM120 fix, the first one with it, and the newest release.
DEFAULT_RELEASES = ("0.5.8", "0.5.9", "newest")
# Files an sdist has that upstream's git tree does not: generated metadata and setuptools-scm's version file.
SDIST_ONLY = ("PKG-INFO", "setup.cfg", "sglang.egg-info", "sglang/_version.py")
_SDIST = re.compile(r"^sglang-(\d+(?:\.\d+)*(?:\.post\d+)?)\.tar\.gz$")
_WHEEL = re.compile(r"^sglang-(\d+(?:\.\d+)*(?:\.post\d+)?)-.*\.whl$")
# The newest release with an sdist: its [build-system] and [tool.setuptools_scm] are the ones a rebuilt pyproject
# takes (the wheels carry neither); cached like the others.
LAST_SDIST = "0.5.10.post1"


def version_key(version: str):
    """'0.5.10.post1' -> (0, 5, 10, 1); releases only (no rc/dev)."""
    main, _, post = version.partition(".post")
    return (*(int(x) for x in main.split(".")), int(post or -1))


def _cached(cache: Path, pattern) -> dict:
    out = {}
    for p in cache.glob("sglang-*"):
        m = pattern.match(p.name)
        if m:
            out[m.group(1)] = p
    return out


def cached_sdists(cache: Path = CACHE) -> dict:
    """{version: path} of the sglang sdists in the cache."""
    return _cached(cache, _SDIST)


def cached_wheels(cache: Path = CACHE) -> dict:
    """{version: path} of the sglang wheels in the cache."""
    return _cached(cache, _WHEEL)


def _pip_download(spec: str, cache: Path, binary: bool) -> Path:
    cache.mkdir(parents=True, exist_ok=True)
    kind, pattern = ("wheel", _WHEEL) if binary else ("sdist", _SDIST)
    with tempfile.TemporaryDirectory(prefix=".dl-", dir=cache) as tmp:
        how = ["--only-binary", ":all:"] if binary else ["--no-binary", "sglang"]
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", *how, "-q", "-d", tmp, spec]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
        files = [p for p in Path(tmp).glob("sglang-*") if pattern.match(p.name)]
        if proc.returncode != 0 or len(files) != 1:
            tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
            raise RuntimeError(f"pip download {spec} ({kind}) failed ({proc.returncode}): {tail}")
        dest = cache / files[0].name
        if not dest.exists():
            shutil.move(str(files[0]), str(dest))
        return dest


def download(spec: str, cache: Path = CACHE) -> Path:
    """Download one sdist (`sglang==X` or `sglang`) with pip into the cache; return its path."""
    return _pip_download(spec, cache, binary=False)


def download_wheel(spec: str, cache: Path = CACHE) -> Path:
    return _pip_download(spec, cache, binary=True)


def source_of(version: str, cache: Path = CACHE) -> Path:
    """The cached sdist of a release, else its cached wheel, else a download: the sdist when PyPI has one."""
    have = cached_sdists(cache).get(version)
    if have:
        return have
    if version_key(version) <= version_key(LAST_SDIST):
        return download(f"sglang=={version}", cache)
    return cached_wheels(cache).get(version) or download_wheel(f"sglang=={version}", cache)


def newest_on_index() -> str:
    """The newest sglang release the host's package index has (pip's own answer)."""
    cmd = [sys.executable, "-m", "pip", "index", "versions", "sglang"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    m = re.search(r"^sglang \((\d+(?:\.\d+)*(?:\.post\d+)?)\)", proc.stdout, re.M)
    if proc.returncode != 0 or not m:
        raise RuntimeError(f"pip index versions sglang failed ({proc.returncode}): {proc.stderr.strip()[-300:]}")
    return m.group(1)


def ensure(releases=DEFAULT_RELEASES, cache: Path = CACHE) -> dict:
    """{version: sdist or wheel path} for the wanted releases, downloading what the cache lacks.

    `newest` is the highest release cached (sdist or wheel) above every other wanted release when there is one (so
    a warm cache builds offline), else the newest release the package index has.
    """
    out = {rel: source_of(rel, cache) for rel in releases if rel != "newest"}
    if "newest" in releases:
        floor = max((version_key(v) for v in out), default=(0,))
        have = {**cached_wheels(cache), **cached_sdists(cache)}
        newer = sorted((v for v in have if version_key(v) > floor), key=version_key)
        version = newer[-1] if newer else newest_on_index()
        out[version] = source_of(version, cache)
    return dict(sorted(out.items(), key=lambda kv: version_key(kv[0])))


def is_wheel(path: Path) -> bool:
    return path.name.endswith(".whl")


def _sdist_files(sdist: Path):
    with tarfile.open(sdist) as tar:
        for m in tar.getmembers():
            parts = Path(m.name).parts
            if len(parts) < 2 or not m.isfile():
                continue
            rel = Path(*parts[1:]).as_posix()
            if any(rel == s or rel.startswith(s + "/") for s in SDIST_ONLY):
                continue
            yield rel, tar.extractfile(m).read(), m.mode


def wheel_metadata(wheel: Path):
    """(email.message.Message of METADATA, entry_points.txt text, LICENSE text or None) of a wheel."""
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        meta = email.parser.BytesParser(policy=email.policy.compat32).parsebytes(z.read(f"{info}/METADATA"))
        ep = z.read(f"{info}/entry_points.txt").decode() if f"{info}/entry_points.txt" in names else ""
        lic = next((n for n in names if n.startswith(f"{info}/licenses/") and not n.endswith("/")), None)
        return meta, ep, z.read(lic).decode() if lic else None


def _toml(value):
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        if not value:
            return "[]"
        return "[\n" + "".join(f"  {_toml(v)},\n" for v in value) + "]"
    raise TypeError(value)


def _key(k):
    return k if re.fullmatch(r"[A-Za-z0-9_-]+", k) else json.dumps(k)


def _sdist_build_config(cache: Path):
    """[build-system] and [tool.setuptools_scm] of the newest release that has an sdist (LAST_SDIST)."""
    sdist = cached_sdists(cache).get(LAST_SDIST) or download(f"sglang=={LAST_SDIST}", cache)
    with tarfile.open(sdist) as tar:
        data = tomllib.loads(tar.extractfile(f"sglang-{LAST_SDIST}/pyproject.toml").read().decode())
    return data["build-system"], data.get("tool", {}).get("setuptools_scm", {}), sdist.name


def rebuilt_pyproject(wheel: Path, tree_files, cache: Path = CACHE) -> str:
    """`python/pyproject.toml` for a wheel-only release, from what the wheel declares.

    [project] comes from the wheel's METADATA (name, summary, Requires-Python, classifiers, Project-URLs,
    Requires-Dist split into dependencies and extras by their `extra ==` marker) and entry_points.txt; the version is
    dynamic (setuptools-scm, as upstream). [build-system] and [tool.setuptools_scm] are those of the newest sdist
    (LAST_SDIST; setuptools-scm's git_describe_command only when the script it names is in the tree). Every file of
    the package is package data (so a build ships what the wheel ships). No Rust extension is declared: their
    sources (the repository's rust/) are in no PyPI artifact."""
    meta, entry_points, _ = wheel_metadata(wheel)
    build_system, scm, sdist_name = _sdist_build_config(cache)
    deps, extras = [], {}
    for req in meta.get_all("Requires-Dist") or []:
        m = re.search(r"""^(.*?)\s*;\s*(?:(.*?)\s+and\s+)?extra\s*==\s*["']([^"']+)["']\s*$""", req)
        if m:
            spec = m.group(1) + (f"; {m.group(2)}" if m.group(2) else "")
            extras.setdefault(m.group(3), []).append(spec)
        else:
            deps.append(req)
    for extra in meta.get_all("Provides-Extra") or []:
        extras.setdefault(extra, [])
    lines = [
        f"# Rebuilt by llmops.sglang's git mirror from {wheel.name} (PyPI has no sdist of this release):",
        "# [project] from the wheel's METADATA and entry_points.txt, [build-system] and [tool.setuptools_scm] from",
        f"# {sdist_name}.",
        "[build-system]",
        f"requires = {_toml(build_system['requires'])}",
        f"build-backend = {_toml(build_system['build-backend'])}",
        "",
        "[project]",
        f"name = {_toml(meta['Name'])}",
        'dynamic = ["version"]',
        f"description = {_toml(meta['Summary'] or '')}",
        'readme = "README.md"',
    ]
    if meta["Requires-Python"]:
        lines.append(f"requires-python = {_toml(meta['Requires-Python'])}")
    lines += ['license = { file = "LICENSE" }', f"classifiers = {_toml(meta.get_all('Classifier') or [])}"]
    lines += [f"dependencies = {_toml(deps)}", "", "[project.optional-dependencies]"]
    lines += [f"{_key(k)} = {_toml(v)}" for k, v in extras.items()]
    scripts = re.search(r"^\[console_scripts\]\n((?:[^\[\n].*\n?)*)", entry_points, re.M)
    if scripts:
        lines += ["", "[project.scripts]"]
        for line in scripts.group(1).splitlines():
            name, _, target = line.partition("=")
            if name.strip():
                lines.append(f"{_key(name.strip())} = {_toml(target.strip())}")
    urls = [u.split(",", 1) for u in meta.get_all("Project-URL") or []]
    if urls:
        lines += ["", "[project.urls]"] + [f"{json.dumps(k.strip())} = {_toml(v.strip())}" for k, v in urls]
    lines += [
        "",
        "[tool.setuptools.package-data]",
        '"sglang" = ["**/*"]',
        "",
        "[tool.setuptools.packages.find]",
        'include = ["sglang*"' + (', "tools*"' if any(p.startswith("tools/") for p in tree_files) else "") + "]",
        "",
        "[tool.setuptools_scm]",
    ]
    for k, v in scm.items():
        if k == "git_describe_command" and not any(
            isinstance(a, str) and a.removeprefix("python/") in tree_files for a in v
        ):
            continue
        lines.append(f"{_key(k)} = {json.dumps(v)}")
    return "\n".join(lines) + "\n"


def _wheel_files(wheel: Path, cache: Path):
    files = {}
    with zipfile.ZipFile(wheel) as z:
        for info in z.infolist():
            name = info.filename
            top = name.split("/")[0]
            if info.is_dir() or top.endswith((".dist-info", ".data")) or name.endswith((".so", ".pyd")):
                continue
            if name == "sglang/_version.py":  # setuptools-scm writes it at build time
                continue
            mode = (info.external_attr >> 16) or 0o644
            files[name] = (z.read(info), mode)
    meta, _, lic = wheel_metadata(wheel)
    files["pyproject.toml"] = (rebuilt_pyproject(wheel, files, cache).encode(), 0o644)
    files["README.md"] = (str(meta.get_payload() or "").encode(), 0o644)
    if lic:
        files["LICENSE"] = (lic.encode(), 0o644)
    yield from ((k, v[0], v[1]) for k, v in sorted(files.items()))


def python_files(artifact: Path, cache: Path = CACHE):
    """(path under upstream's python/, bytes, mode) of every file of a release's source tree: an sdist's files, or
    the tree rebuilt from a wheel."""
    yield from (_wheel_files(artifact, cache) if is_wheel(artifact) else _sdist_files(artifact))


def extract_python_tree(artifact: Path, dest: Path, cache: Path = CACHE):
    """Write a release's source as upstream's `python/` directory."""
    dest.mkdir(parents=True, exist_ok=True)
    for rel, data, mode in python_files(artifact, cache):
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(0o755 if mode & 0o111 else 0o644)
