"""The real wheels `import sglang` needs on a simulated node, read from the real SGLang releases and fetched from PyPI.

The real `python/sglang/__init__.py` imports the frontend language (`sglang.lang.*`, `sglang.utils`,
`sglang.global_config`, `sglang.version`) eagerly and the runtime (`sglang.srt.*`) lazily. `import_requirements()`
walks that import graph in the release's own sources (module-level imports only: a function body or a `LazyImport`
runs nothing at import time), keeps the third-party top-level modules, and maps each to the requirement the release
declares in `pyproject.toml` (`numpy`, `requests`, `IPython`, `pydantic`, `aiohttp`, ... as written there). Nothing of
the GPU stack (torch, sgl-kernel, flashinfer, ...) is imported by `import sglang`.

`ensure_wheels()` downloads those requirements, with their own dependencies, as real wheels for the nodes' Python
(Debian 12: CPython 3.11, glibc 2.36, x86_64) with the host's pip and its configuration, into
`$SIM_CACHE/pypi-sglang-imports/<key>/` (temporary directory first, then moved whole; never committed).
"""

import ast
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

import sglang_releases

CACHE = Path(os.environ.get("SIM_CACHE", "/var/cache/llmops-sim")) / "pypi-sglang-imports"
# The simulated nodes' interpreter (Debian 12's python3.11) and platform (glibc 2.36, x86_64). pip 23 does not expand
# a manylinux tag to the older ones the node also accepts, so every one is listed (2.36 down to 2.17 = manylinux2014).
NODE_PIP_TARGET = (
    *("--only-binary", ":all:", "--implementation", "cp", "--python-version", "3.11", "--abi", "cp311"),
    *(a for glibc in range(36, 16, -1) for a in ("--platform", f"manylinux_2_{glibc}_x86_64")),
    *("--platform", "manylinux2014_x86_64"),
)
# Import names that differ from the distribution name declared in pyproject.toml.
DIST_OF_IMPORT = {"IPython": "ipython", "zmq": "pyzmq", "PIL": "pillow", "yaml": "pyyaml", "attr": "attrs"}


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def req_name(req: str) -> str:
    return normalize(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", req).group(1))


def _sources(artifact: Path):
    """({module name: source} of the release's sglang package, [declared dependencies]); an sdist, or a wheel whose
    tree sglang_releases rebuilds (pyproject.toml from its metadata)."""
    modules, deps = {}, []
    for rel, data, _mode in sglang_releases.python_files(artifact):
        path = Path(rel)
        if rel == "pyproject.toml":
            deps = tomllib.loads(data.decode())["project"]["dependencies"]
        elif path.parts[0] == "sglang" and path.suffix == ".py":
            modules[".".join(path.with_suffix("").parts).removesuffix(".__init__")] = data.decode()
    return modules, deps


def _module_level_imports(tree, package: str, is_package: bool):
    """(absolute module name, imported names, guarded by try) of every import that runs when the module loads."""

    def walk(stmts, guarded):
        for node in stmts:
            if isinstance(node, ast.Import):
                for a in node.names:
                    yield a.name, [], guarded
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    parts = parts if is_package else parts[:-1]
                    parts = parts[: len(parts) - (node.level - 1)]
                    base = ".".join([*parts, base] if base else parts)
                yield base, [a.name for a in node.names], guarded
            elif isinstance(node, ast.Try):
                yield from walk(node.body, True)
                for h in node.handlers:
                    yield from walk(h.body, True)
                yield from walk(node.orelse + node.finalbody, guarded)
            elif isinstance(node, (ast.If, ast.With, ast.For, ast.While)):
                yield from walk(node.body + getattr(node, "orelse", []), guarded)
            elif isinstance(node, ast.ClassDef):
                yield from walk(node.body, guarded)

    yield from walk(tree.body, False)


def import_requirements(sdist: Path, cache: Path = CACHE) -> list:
    """The requirements (as the release declares them) of the third-party modules `import sglang` loads; the answer
    is cached per sdist and version of this file (reading an sdist takes about a second)."""
    key = hashlib.sha256(
        Path(__file__).read_bytes() + (Path(__file__).parent / "sglang_releases.py").read_bytes() + sdist.read_bytes()
    ).hexdigest()[:16]
    memo = cache / f"requirements-{sdist.name}-{key}.json"
    if memo.is_file():
        answer = json.loads(memo.read_text())
    else:
        try:
            answer = _scan(sdist)
        except ValueError as e:  # remembered too: reading a 40 MB wheel again on every mirror build costs ~30 s
            answer = {"error": str(e)}
        cache.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(answer) + "\n")
        os.replace(tmp, memo)
    if isinstance(answer, dict):
        raise ValueError(answer["error"])
    return answer


def _scan(sdist: Path) -> list:
    modules, deps = _sources(sdist)
    declared = {req_name(r): r.split("#")[0].strip() for r in deps}
    seen, queue, external = set(), ["sglang"], {}
    while queue:
        mod = queue.pop()
        if mod in seen or mod not in modules:
            continue
        seen.add(mod)
        parts = mod.split(".")
        queue += [".".join(parts[:i]) for i in range(1, len(parts))]  # parent packages run first
        is_package = any(m.startswith(mod + ".") for m in modules)
        for name, names, guarded in _module_level_imports(ast.parse(modules[mod]), mod, is_package):
            top = name.split(".")[0]
            if top == "sglang":
                queue += [name, *(f"{name}.{n}" for n in names)]
            elif top and top not in sys.stdlib_module_names and top != "__future__":
                external[top] = external.get(top, True) and guarded
    reqs, undeclared = [], []
    for top, guarded in sorted(external.items()):
        dist = normalize(DIST_OF_IMPORT.get(top, top))
        if dist in declared:
            reqs.append(declared[dist])
        elif not guarded:
            undeclared.append(top)
    if undeclared:
        raise ValueError(f"{sdist.name}: import sglang loads {undeclared}, which pyproject.toml does not declare")
    return sorted(set(reqs), key=req_name)


def ensure_wheels(requirements, cache: Path = CACHE) -> list:
    """Real wheels of `requirements` and their dependencies for the nodes' Python, cached; returns their paths."""
    reqs = sorted(set(requirements))
    key = hashlib.sha256(json.dumps([reqs, NODE_PIP_TARGET]).encode()).hexdigest()[:16]
    dest = cache / key
    if not (dest / ".complete").is_file():
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".dl-", dir=cache) as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "-q", "-d", tmp, *NODE_PIP_TARGET, *reqs]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False)
            if proc.returncode != 0:
                tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-5:])
                raise RuntimeError(f"pip download {' '.join(reqs)} failed ({proc.returncode}): {tail}")
            (Path(tmp) / ".complete").write_text(json.dumps(reqs) + "\n")
            if not (dest / ".complete").is_file():  # else a concurrent build finished the same download first
                shutil.rmtree(dest, ignore_errors=True)
                os.replace(tmp, dest)
                Path(tmp).mkdir()  # for TemporaryDirectory's cleanup
    return sorted(dest.glob("*.whl"))
