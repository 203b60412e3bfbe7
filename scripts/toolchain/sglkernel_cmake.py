"""sgl-kernel's CMake arch handling through real CMake and nvcc: what the role's scoping and CMAKE_ARGS compile.

Upstream's sgl-kernel/CMakeLists.txt cannot be configured here: no registry carries it (PyPI has sgl-kernel and
sglang-kernel as wheels only, and SGLang's sdist holds only python/), and its configure step clones nine GitHub
repositories (FetchContent) and needs torch's CMake package. What decides the architectures is small, though, and
was read at sgl-project/sglang 00390b8 (sgl-kernel/CMakeLists.txt, cmake/flashmla.cmake):
- SGL_KERNEL_CUDA_FLAGS (a set() block and list(APPEND) blocks of -gencode lines) for common_ops (built twice),
  spatial_ops and deep_gemm_cpp;
- SGL_FLASH_KERNEL_CUDA_FLAGS for flash_ops (FA3): sm_90a, + sm_80/sm_86 with ENABLE_BELOW_SM90;
- FLASHMLA_CUDA_FLAGS in cmake/flashmla.cmake for flashmla_ops: sm_90a (CUDA > 12.4), sm_100a (CUDA > 12.8);
- each passed with target_compile_options($<$<COMPILE_LANGUAGE:CUDA>:...>), next to CMake's own CUDA_ARCHITECTURES
  property, which a target takes from CMAKE_CUDA_ARCHITECTURES -- after find_package(Torch), which sets that to OFF
  whenever it is defined (torch 2.9.1 share/cmake/Caffe2/public/cuda.cmake:321-327; TORCH_STEP below is that step,
  and `make toolchain-check` checks the real torch still has it).
This module writes a CMake project with exactly that shape (our text, one probe kernel per library), runs the role's
roles/sglang/files/sgl_kernel_scope.py on it, configures it with the role's CMAKE_ARGS through the real CMake
(PyPI `cmake`, as the role's build requirements) and the real nvcc, builds it with ninja and reads every object
back with cuobjdump.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from . import archprobe, cache

ROOT = Path(__file__).resolve().parents[2]
SCOPE = ROOT / "roles" / "sglang" / "files" / "sgl_kernel_scope.py"
CUDA_VERSION = "13.0"

CMAKELISTS = """cmake_minimum_required(VERSION 3.26 FATAL_ERROR)
project(sgl-kernel-arch-probe LANGUAGES CXX CUDA)
option(ENABLE_BELOW_SM90 "Enable below SM90" ON)
set(CUDA_VERSION ${CMAKE_CUDA_COMPILER_VERSION})
@TORCH_STEP@

set(SGL_KERNEL_CUDA_FLAGS
    "-O3"
    "-gencode=arch=compute_90,code=sm_90"
    "-std=c++17"
)
if (ENABLE_BELOW_SM90)
    list(APPEND SGL_KERNEL_CUDA_FLAGS
        "-gencode=arch=compute_80,code=sm_80"
        "-gencode=arch=compute_89,code=sm_89"
    )
endif()
if ("${CUDA_VERSION}" VERSION_GREATER_EQUAL "12.8")
    list(APPEND SGL_KERNEL_CUDA_FLAGS
        "-gencode=arch=compute_100a,code=sm_100a"
        "-gencode=arch=compute_120a,code=sm_120a"
    )
    if ("${CUDA_VERSION}" VERSION_GREATER_EQUAL "13.0")
        list(APPEND SGL_KERNEL_CUDA_FLAGS
            "-gencode=arch=compute_103a,code=sm_103a"
        )
    endif()
endif()
if ("${CUDA_VERSION}" VERSION_GREATER_EQUAL "12.4")
    list(APPEND SGL_KERNEL_CUDA_FLAGS
        "-gencode=arch=compute_90a,code=sm_90a"
    )
endif()

add_library(common_ops OBJECT common_ops.cu)
target_compile_options(common_ops PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${SGL_KERNEL_CUDA_FLAGS}>)

set(SGL_FLASH_KERNEL_CUDA_FLAGS
    "-O3"
    "-gencode=arch=compute_90a,code=sm_90a"
    "-std=c++17"
)
if (ENABLE_BELOW_SM90)
    list(APPEND SGL_FLASH_KERNEL_CUDA_FLAGS
        "-gencode=arch=compute_80,code=sm_80"
        "-gencode=arch=compute_86,code=sm_86"
    )
endif()
add_library(flash_ops OBJECT flash_ops.cu)
target_compile_options(flash_ops PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${SGL_FLASH_KERNEL_CUDA_FLAGS}>)

include(${CMAKE_CURRENT_LIST_DIR}/cmake/flashmla.cmake)
"""
FLASHMLA = """set(FLASHMLA_CUDA_FLAGS
    "--use_fast_math"
)
if(${CUDA_VERSION} VERSION_GREATER 12.4)
    list(APPEND FLASHMLA_CUDA_FLAGS
        "-gencode=arch=compute_90a,code=sm_90a"
    )
endif()
if(${CUDA_VERSION} VERSION_GREATER 12.8)
    list(APPEND FLASHMLA_CUDA_FLAGS
        "-gencode=arch=compute_100a,code=sm_100a"
    )
endif()
add_library(flashmla_ops OBJECT flashmla_ops.cu)
target_compile_options(flashmla_ops PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:${FLASHMLA_CUDA_FLAGS}>)
"""
# What find_package(Torch) does to CMAKE_CUDA_ARCHITECTURES (torch's cuda.cmake), before sgl-kernel defines targets.
TORCH_STEP = """if(DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES OFF)
endif()"""
TORCH_STEP_MARK = "set(CMAKE_CUDA_ARCHITECTURES OFF)"
TARGETS = {"common_ops": "common_ops.cu", "flash_ops": "flash_ops.cu", "flashmla_ops": "flashmla_ops.cu"}


def cmake_python():
    return cache.venv("cmake", ["cmake>=3.26", "ninja"])


def project(dest: Path, torch_step=True):
    (dest / "cmake").mkdir(parents=True)
    (dest / "CMakeLists.txt").write_text(CMAKELISTS.replace("@TORCH_STEP@", TORCH_STEP if torch_step else ""))
    (dest / "cmake" / "flashmla.cmake").write_text(FLASHMLA)
    for src in TARGETS.values():
        (dest / src).write_text(archprobe.PROBE_CU)


def configure_and_build(src: Path, cmake_args: str, home: Path) -> dict:
    """{target: {'elf': [...], 'ptx': [...], 'flags': [the arch flags of its compile command]}}."""
    bindir = cmake_python().parent
    build = src / "build"
    cmd = [
        str(bindir / "cmake"),
        "-S",
        str(src),
        "-B",
        str(build),
        "-G",
        "Ninja",
        f"-DCMAKE_MAKE_PROGRAM={bindir / 'ninja'}",
        f"-DCMAKE_CUDA_COMPILER={home / 'bin' / 'nvcc'}",
        "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON",
        *shlex.split(cmake_args),
    ]
    for step in (cmd, [str(bindir / "cmake"), "--build", str(build)]):
        proc = subprocess.run(step, capture_output=True, text=True, check=False, timeout=900)
        if proc.returncode != 0:
            tail = " | ".join((proc.stdout + proc.stderr).strip().splitlines()[-4:])
            raise cache.ToolchainError(f"cmake {' '.join(step[1:3])}: {tail}")
    commands = {Path(c["file"]).name: c["command"] for c in json.loads((build / "compile_commands.json").read_text())}
    out = {}
    for target, cu in TARGETS.items():
        obj = next(build.glob(f"CMakeFiles/{target}.dir/{cu}.o"))
        got = archprobe.fatbin_contents(home, obj)
        flags = [a.strip('"') for a in shlex.split(commands[cu]) if "gencode" in a or "generate-code" in a]
        out[target] = {**got, "flags": flags}
    return out


def variants(plan):
    """(label, CMAKE_ARGS, torch's step) to compare: the role's arguments; the old -DCMAKE_CUDA_ARCHITECTURES=<fleet>
    with torch's step (what a real configure does with it) and without it (what the argument would do otherwise)."""
    arch = "-DCMAKE_CUDA_ARCHITECTURES=" + plan["cmake_cuda_architectures"]
    role = plan["cmake_arch_args"]
    return [
        ("role", role, True),
        ("CMAKE_CUDA_ARCHITECTURES, torch's find_package", f"{arch} {role}".strip(), True),
        ("CMAKE_CUDA_ARCHITECTURES, no torch", f"{arch} {role}".strip(), False),
    ]


def run(fleets=None, only_role=False) -> list:
    """Per fleet and variant: the scope script's summary and what each library's object holds."""
    sys.path.insert(0, str(ROOT))
    from ansible_collections.llmops.sglang.plugins.module_utils import build_plan

    home = cache.cuda_toolkit(CUDA_VERSION)
    rows = []
    with tempfile.TemporaryDirectory(prefix="llmops-sglk-") as tmp:
        for fleet, archs in (fleets or archprobe.FLEETS).items():
            plan = build_plan.kernel_archs(archs)
            for label, args, torch_step in variants(plan)[: 1 if only_role else None]:
                src = Path(tmp) / f"{len(rows)}"
                project(src, torch_step)
                proc = subprocess.run(
                    [
                        sys.executable,
                        str(SCOPE),
                        str(src / "CMakeLists.txt"),
                        *[f"--gencode={g}" for g in plan["gencodes"]],
                    ],
                    capture_output=True,
                    text=True,
                    check=False,
                )
                if proc.returncode != 0:
                    raise cache.ToolchainError(f"sgl_kernel_scope.py: {proc.stderr.strip()}")
                rows.append(
                    {
                        "fleet": fleet,
                        "variant": label,
                        "cmake_args": args,
                        "torch_step": torch_step,
                        "summary": json.loads(proc.stdout),
                        "targets": configure_and_build(src, args, home),
                    }
                )
    return rows


def table(rows) -> str:
    lines = [
        "| fleet | configure | CMAKE_ARGS (arch part) | library | fatbinary (cuobjdump) |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        for target, got in r["targets"].items():
            held = ", ".join(got["elf"]) + (f"; PTX {', '.join(got['ptx'])}" if got["ptx"] else "; no PTX")
            lines.append(f"| {r['fleet']} | {r['variant']} | `{r['cmake_args'] or '(none)'}` | {target} | {held} |")
    return "\n".join(lines)
