"""The real toolchains, fetched from the package registries with pip and cached on this machine (never committed).

Everything lands in `TOOLCHAIN_CACHE` (default /var/cache/llmops-toolchain): wheels and sdists as downloaded,
virtualenvs and unpacked toolkits made from them, each finished by a stamp file written last (an interrupted
download or install leaves no stamp and is done again). Indexes come from pip's own configuration (the host's
pip.conf, PIP_INDEX_URL), never from a name written here.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
from pathlib import Path

CACHE = Path(os.environ.get("TOOLCHAIN_CACHE", "/var/cache/llmops-toolchain"))
# The torch the roles install (roles/python_env/defaults/main.yml python_env_torch_version) decides Triton's version.
TORCH_VERSION_DEFAULT = "2.9.1"
# CUDA 13.0: the first toolkit whose nvcc is on PyPI (nvidia-cuda-nvcc 13.x carries nvcc, cicc, ptxas, nvlink and
# fatbinary; the 12.x wheels nvidia-cuda-nvcc-cu12 12.8/12.9 carry ptxas and libnvvm only). cuobjdump is on PyPI
# from 13.2 on only (nvidia-cuda-cuobjdump), and reads fatbinaries of older toolkits.
CUDA_WHEELS = {
    "13.0": [
        "nvidia-cuda-nvcc==13.0.88",
        "nvidia-cuda-crt==13.0.88",
        "nvidia-nvvm==13.0.88",
        "nvidia-cuda-runtime==13.0.96",
        "nvidia-cuda-cccl==13.0.85",
        "nvidia-cuda-cuobjdump==13.2.51",
    ],
}
PIP_TIMEOUT = 1800


class ToolchainError(RuntimeError):
    """A toolchain could not be fetched or made; one line."""


def _run(cmd, timeout=PIP_TIMEOUT, env=None):
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False, env=env)
    if proc.returncode != 0:
        tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-3:])
        raise ToolchainError(f"{' '.join(map(str, cmd[:6]))} ... failed ({proc.returncode}): {tail}")
    return proc.stdout


def _pip_env():
    # The toolchains are pinned by version; the host's torch cap (/etc/xdg/pip) is for other work and would refuse
    # the torch the roles pin only when that is newer than the cap, which the caller is told about by pip itself.
    return dict(os.environ, PIP_DISABLE_PIP_VERSION_CHECK="1")


def _stamped(path: Path) -> bool:
    return (path / ".llmops-done").is_file()


def _stamp(path: Path, info: dict):
    (path / ".llmops-done").write_text(json.dumps(info, sort_keys=True) + "\n")


@contextlib.contextmanager
def _building(path: Path):
    """One maker of ``path`` at a time on this machine: a second process (two test runs sharing the cache) waits for
    the first and then finds its stamp, instead of removing and re-making the tree under it (FileExistsError seen
    when a unit run overlapped a make test, 2026-12-02)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.parent / f".{path.name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def torch_requires(torch_version: str = TORCH_VERSION_DEFAULT) -> list:
    """torch's declared requirements (Requires-Dist) for this Linux x86_64 Python, read by pip from the index's
    metadata without installing; cached as JSON."""
    CACHE.mkdir(parents=True, exist_ok=True)
    dest = CACHE / f"torch-{torch_version}.requires.json"
    if dest.is_file():
        return json.loads(dest.read_text())
    with tempfile.TemporaryDirectory(prefix=".report-", dir=CACHE) as tmp:
        report = Path(tmp) / "report.json"
        _run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--dry-run",
                "--no-deps",
                "--ignore-installed",
                "-q",
                "--report",
                str(report),
                f"torch=={torch_version}",
            ],
            env=_pip_env(),
        )
        meta = json.loads(report.read_text())["install"][0]["metadata"]
    reqs = meta.get("requires_dist", [])
    dest.write_text(json.dumps(reqs, indent=1) + "\n")
    return reqs


def pinned(requirements: list, name: str) -> str:
    """'3.5.1' from ['triton==3.5.1; platform_system == "Linux" ...'] for 'triton'."""
    for req in requirements:
        spec = req.split(";")[0].strip()
        if spec.lower().replace("_", "-").startswith(name + "=="):
            return spec.split("==", 1)[1]
    raise ToolchainError(f"expected torch to pin {name}==X, found {requirements!r}")


def venv(name: str, requirements: list) -> Path:
    """A virtualenv under the cache with exactly these requirements (installed once); returns its python."""
    root = CACHE / "venvs" / name
    py = root / "bin" / "python"
    if _stamped(root):
        return py
    with _building(root):
        if _stamped(root):  # made by another process while this one waited
            return py
        shutil.rmtree(root, ignore_errors=True)
        _run([sys.executable, "-m", "venv", str(root)])
        _run([str(py), "-m", "pip", "install", "-q", *requirements], env=_pip_env())
        _stamp(root, {"requirements": requirements})
    return py


def triton_python(torch_version: str = TORCH_VERSION_DEFAULT) -> tuple:
    """(python with the Triton that torch pins, triton version)."""
    version = pinned(torch_requires(torch_version), "triton")
    return venv(f"triton-{version}", [f"triton=={version}"]), version


def cuda_toolkit(version: str = "13.0") -> Path:
    """CUDA_HOME made of NVIDIA's PyPI wheels (nvcc, cicc, headers, cudart, cuobjdump), installed once."""
    if version not in CUDA_WHEELS:
        raise ToolchainError(f"expected a CUDA version with nvcc on PyPI ({', '.join(CUDA_WHEELS)}), found {version}")
    root = CACHE / f"cuda-{version}"
    home = root / "nvidia" / f"cu{version.split('.', maxsplit=1)[0]}"
    if _stamped(root):
        return home
    with _building(root):
        if not _stamped(root):  # else made by another process while this one waited
            _make_cuda(version, root, home)
    return home


def _make_cuda(version: str, root: Path, home: Path) -> None:
    shutil.rmtree(root, ignore_errors=True)
    root.mkdir(parents=True)
    _run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(root), *CUDA_WHEELS[version]],
        env=_pip_env(),
    )
    if not (home / "bin" / "nvcc").is_file():
        raise ToolchainError(f"the CUDA {version} wheels did not install {home}/bin/nvcc")
    # nvcc.profile looks for headers and libraries under targets/x86_64-linux/{include,lib64}, as a toolkit
    # installed from NVIDIA's packages lays them out (lib without a size suffix); the wheels put them in include/, lib/.
    target = home / "targets" / "x86_64-linux"
    target.mkdir(parents=True)
    (target / "include").symlink_to("../../include")
    (target / "lib").symlink_to("../../lib")
    (target / "lib64").symlink_to("../../lib")
    (home / "lib64").symlink_to("lib")
    _stamp(root, {"wheels": CUDA_WHEELS[version]})


def _index_url() -> str:
    """The index pip is configured with (PIP_INDEX_URL, pip.conf's index-url), else pip's own default."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "config", "get", "global.index-url"], capture_output=True, text=True, check=False
    )
    url = os.environ.get("PIP_INDEX_URL") or (out.stdout.strip() if out.returncode == 0 else "")
    if not url:
        from pip._internal.models.index import PyPI

        url = PyPI.simple_url
    return url.rstrip("/")


def sdist(project: str, version: str) -> Path:
    """A project's source distribution from the index (PEP 691 JSON), sha256-checked, cached.

    For sdists pip cannot download without building their metadata first (flash-attn's setup.py imports torch)."""
    norm = project.lower().replace("_", "-")
    fname = f"{norm.replace('-', '_')}-{version}.tar.gz"
    dest = CACHE / "sdists" / fname
    if dest.is_file():
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    req = urllib.request.Request(f"{_index_url()}/{norm}/", headers={"Accept": "application/vnd.pypi.simple.v1+json"})
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            files = json.load(r)["files"]
        entry = next((f for f in files if f["filename"] == fname), None)
        if entry is None:
            raise ToolchainError(f"expected {fname} on the index, found {len(files)} other files")
        with urllib.request.urlopen(entry["url"], timeout=600) as r:
            data = r.read()
    except (OSError, ValueError, KeyError) as e:
        raise ToolchainError(f"cannot fetch {fname}: {e}") from None
    if hashlib.sha256(data).hexdigest() != entry["hashes"].get("sha256"):
        raise ToolchainError(f"{fname}: sha256 does not match the index")
    with tempfile.NamedTemporaryFile(dir=dest.parent, delete=False) as tmp:
        tmp.write(data)
    os.replace(tmp.name, dest)
    return dest


def wheel(spec: str, dest_dir: Path) -> Path:
    """`pip download --no-deps --only-binary :all: SPEC` into dest_dir (whole files only); returns the wheel."""
    dest_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".dl-", dir=dest_dir) as tmp:
        _run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary", ":all:", "-d", tmp, spec],
            env=_pip_env(),
        )
        got = list(Path(tmp).glob("*.whl"))
        if len(got) != 1:
            raise ToolchainError(f"pip download {spec} gave {len(got)} wheels")
        out = dest_dir / got[0].name
        if not out.exists():
            shutil.move(str(got[0]), str(out))
        return out
