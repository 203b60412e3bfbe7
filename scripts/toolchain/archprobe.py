"""Arch flags proven by compiling: the roles' gencode lists through a real nvcc, the fatbinary read back.

For each fleet the roles' own planning code (plugins/module_utils/build_plan.py, gpu_arch.py) gives
- sgl-kernel's `-gencode` list (what roles/sglang/files/sgl_kernel_scope.py writes into its CMakeLists.txt), and
- flash-attn's FLASH_ATTN_CUDA_ARCHS, which flash-attention's own setup.py (real sdist, flash_attn_setup.py) turns
  into its nvcc `-gencode` flags.
Both flag sets are passed to the real nvcc (CUDA 13.0 from NVIDIA's PyPI wheels, cache.cuda_toolkit) on a small
probe kernel; `cuobjdump --list-elf --list-ptx` (nvidia-cuda-cuobjdump, PyPI) lists what the fatbinary holds, and that
must be exactly the planned architectures: one SASS image per target and no PTX.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))  # ansible_collections/llmops/sglang -> the checkout (see README, collection in place)
from ansible_collections.llmops.sglang.plugins.module_utils import build_plan  # noqa: E402

from . import cache  # noqa: E402

FLASH_ATTN_VERSION = "2.8.3"  # roles/flash_attn/defaults/main.yml flash_attn_version (v2.8.3)
FLEETS = {
    "8 x RTX PRO 6000 (sm_120)": ["sm_120"],
    "H100 (sm_90)": ["sm_90"],
    "B200 (sm_100)": ["sm_100"],
    "mixed: RTX PRO 6000 + H100 + B200": ["sm_120", "sm_90", "sm_100"],
}
PROBE_CU = """// llmops.sglang arch probe: one trivial kernel, compiled once per -gencode target
__global__ void llmops_arch_probe(float *out, const float *in, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 2.0f + 1.0f;
}
"""
_ELF = re.compile(r"^ELF file\s+\d+:\s+\S+\.(sm_\w+)\.cubin$", re.M)
_PTX = re.compile(r"^PTX file\s+\d+:\s+\S+\.(sm_\w+)\.ptx$", re.M)


def _gencode_pairs(flags):
    """['-gencode=arch=compute_120a,code=sm_120a'] or ['-gencode', 'arch=...'] -> ['arch=compute_120a,code=sm_120a']."""
    out, it = [], iter(flags)
    for f in it:
        if f == "-gencode":
            out.append(next(it))
        elif f.startswith("-gencode="):
            out.append(f.split("=", 1)[1])
    return out


def expected_images(pairs):
    """The SASS images a list of 'arch=compute_X,code=sm_X' pairs asks for: ['sm_120a', ...]."""
    return sorted(
        code for p in pairs for code in re.findall(r"code=\[?([\w,]+)\]?", p)[0].split(",") if code.startswith("sm_")
    )


def fatbin_contents(cuda_home: Path, path: Path) -> dict:
    """{'elf': ['sm_120a', ...], 'ptx': [...]} from the real cuobjdump."""
    proc = subprocess.run(
        [str(cuda_home / "bin" / "cuobjdump"), "--list-elf", "--list-ptx", str(path)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    text = proc.stdout + proc.stderr
    if proc.returncode != 0 and "No PTX file found" not in text:
        raise cache.ToolchainError(f"cuobjdump {path.name}: {text.strip()}")
    return {"elf": sorted(_ELF.findall(text)), "ptx": sorted(_PTX.findall(text))}


def compile_probe(cuda_home: Path, flags, workdir: Path) -> tuple:
    """nvcc -fatbin the probe kernel with these flags; (fatbinary path, seconds)."""
    import time

    src = workdir / "llmops_arch_probe.cu"
    src.write_text(PROBE_CU)
    out = workdir / "llmops_arch_probe.fatbin"
    cmd = [
        str(cuda_home / "bin" / "nvcc"),
        f"-I{cuda_home / 'include'}",
        "-isystem",
        str(cuda_home / "include" / "cccl"),
        "-fatbin",
        "-o",
        str(out),
        str(src),
        *flags,
    ]
    start = time.monotonic()
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env=dict(os.environ, PATH=f"{cuda_home / 'bin'}:{os.environ.get('PATH', '')}"),
    )
    if proc.returncode != 0:
        raise cache.ToolchainError(f"nvcc {' '.join(flags)}: {proc.stderr.strip().splitlines()[-1:]}")
    return out, round(time.monotonic() - start, 2)


def flash_attn_tree() -> Path:
    dest = cache.CACHE / "sdists" / f"flash_attn-{FLASH_ATTN_VERSION}"
    if not (dest / "setup.py").is_file():
        with tarfile.open(cache.sdist("flash-attn", FLASH_ATTN_VERSION)) as tar:
            tar.extractall(dest.parent, filter="data")
    return dest


def setup_python():
    """A Python with what flash-attn's setup.py imports besides torch (the role's build requirements)."""
    return cache.venv("flash-attn-setup", ["setuptools>=70.1", "wheel", "packaging"])


def flash_attn_flags(cuda_home: Path, archs: str, real_torch_python=None, **env_extra) -> dict:
    """What flash-attention's own setup.py passes to nvcc for this FLASH_ATTN_CUDA_ARCHS; with a real torch's Python
    also what torch's BuildExtension adds (`torch_adds`)."""
    python, argv = setup_python(), []
    env = dict(
        os.environ,
        FLASH_ATTN_CUDA_ARCHS=archs,
        FLASH_ATTENTION_FORCE_BUILD="TRUE",
        CUDA_HOME=str(cuda_home),
        PYTHONWARNINGS="ignore",
        **env_extra,
    )
    if real_torch_python:
        # torch's own environment, with setup.py's other imports from the setup virtualenv
        env["PYTHONPATH"] = str(next(python.parent.parent.glob("lib/python*/site-packages")))
        python, argv = real_torch_python, ["--real-torch"]
    proc = subprocess.run(
        [str(python), str(HERE / "flash_attn_setup.py"), str(flash_attn_tree()), *argv],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
        env=env,
    )
    if proc.returncode != 0:
        raise cache.ToolchainError(f"flash-attn setup.py: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    return json.loads(proc.stdout)


def run(cuda_version: str = "13.0") -> list:
    """One row per fleet and build: planned flags, the fatbinary's contents, whether they match exactly."""
    home = cache.cuda_toolkit(cuda_version)
    rows = []
    with tempfile.TemporaryDirectory(prefix="llmops-arch-") as tmp:
        for fleet, archs in FLEETS.items():
            kernel = build_plan.kernel_archs(archs)
            fa_archs = build_plan.flash_attn_archs(archs)
            fa = flash_attn_flags(home, fa_archs)
            for build, flags, planned in (
                ("sgl-kernel", kernel["gencodes"], [g.rsplit("code=", 1)[1] for g in kernel["gencodes"]]),
                (
                    f"flash-attn (FLASH_ATTN_CUDA_ARCHS={fa_archs})",
                    ["-gencode=" + p for p in fa["gencode"]],
                    [f"sm_{t}" for t in fa_archs.split(";")],
                ),
            ):
                work = Path(tmp) / f"{len(rows)}"
                work.mkdir()
                fatbin, seconds = compile_probe(home, flags, work)
                got = fatbin_contents(home, fatbin)
                rows.append(
                    {
                        "fleet": fleet,
                        "build": build,
                        "flags": flags,
                        "planned": sorted(planned),
                        "elf": got["elf"],
                        "ptx": got["ptx"],
                        "seconds": seconds,
                        "exact": got["elf"] == sorted(planned) and not got["ptx"],
                    }
                )
    return rows


def table(rows) -> str:
    lines = [
        "| fleet | build | nvcc flags (from the roles' plan) | fatbinary (cuobjdump) | exact |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        held = ", ".join(r["elf"]) + (f"; PTX {', '.join(r['ptx'])}" if r["ptx"] else "; no PTX")
        lines.append(
            f"| {r['fleet']} | {r['build']} | `{' '.join(r['flags'])}` | {held} | {'yes' if r['exact'] else '**no**'} |"
        )
    return "\n".join(lines)
