# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Pure functions behind the build roles: build fingerprints, parallelism sized to RAM, CUDA/arch naming.

No Ansible imports, so the functions are unit-tested directly (tests/unit/test_build_plan.py).
"""

from __future__ import annotations

import hashlib
import json
import math
import re

from ansible_collections.llmops.sglang.plugins.module_utils import gpu_arch

FINGERPRINT_LEN = 16


def fingerprint(inputs: dict) -> str:
    """Stable short hash of a build's inputs: sorted-key compact JSON, sha256, first 16 hex digits."""
    canon = json.dumps(inputs, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canon.encode("utf-8")).hexdigest()[:FINGERPRINT_LEN]


def cuda_major_minor(version: str) -> str:
    """'12.8.1' or 'V12.8.93' or '12.8' -> '12.8'."""
    m = re.search(r"(\d+)\.(\d+)", str(version or ""))
    if not m:
        raise ValueError(f"cannot read a CUDA version from {version!r}")
    return f"{int(m.group(1))}.{int(m.group(2))}"


def torch_variant(cuda_version: str) -> str:
    """The PyTorch wheel variant for a CUDA toolkit: 12.8 -> cu128, 12.9 -> cu129, 13.0 -> cu130."""
    major, minor = cuda_major_minor(cuda_version).split(".")
    return f"cu{major}{minor}"


def parse_nvcc_version(text: str) -> str:
    """The 'release X.Y' of `nvcc --version`."""
    m = re.search(r"release (\d+\.\d+)", text or "")
    if not m:
        raise ValueError("nvcc --version did not print 'release X.Y'")
    return m.group(1)


def arch_number(arch: str) -> int:
    """'sm_120', '120', '12.0', '120a' -> 120 (spellings: gpu_arch.number; sm_999 and the like are refused)."""
    return gpu_arch.number(arch, known_only=True)


def flash_attn_archs(arch_list) -> str:
    """FLASH_ATTN_CUDA_ARCHS for the detected GPUs, in the tokens flash-attention accepts (gpu_arch.flash_attn_token):
    ['120'] -> '120', ['86', '90'] -> '80;90', ['103'] -> '100', ['121'] -> '120'."""
    nums = sorted({gpu_arch.flash_attn_token(a) for a in arch_list})
    if not nums:
        raise ValueError("no GPU architecture given")
    return ";".join(str(n) for n in nums)


def flash_attn_version_ok(version: str) -> bool:
    """Whether a flash-attention ref/version reads FLASH_ATTN_CUDA_ARCHS (v2.7.3 on): 'v2.8.3' -> True."""
    m = re.match(r"^v?(\d+)\.(\d+)\.(\d+)", str(version or "").strip())
    if not m:
        raise ValueError(f"flash-attention version {version!r} is not a release (vX.Y.Z)")
    return tuple(int(x) for x in m.groups()) >= gpu_arch.FLASH_ATTN_MIN_VERSION


def kernel_archs(arch_list) -> dict:
    """sgl-kernel's arch spellings for the detected GPUs.

    Architectures from sm_90 on get the arch-specific 'a' variant (sm_90a, sm_100a, sm_120a), which the kernels
    need for their wgmma/tcgen/FP4 paths; older ones are plain. Returns TORCH_CUDA_ARCH_LIST ('12.0a') and the
    CMake CUDA_ARCHITECTURES spelling ('120a').
    """
    nums = sorted({arch_number(a) for a in arch_list})
    if not nums:
        raise ValueError("no GPU architecture given")
    torch_list, cmake_list = [], []
    for n in nums:
        suffix = "a" if n >= 90 else ""
        torch_list.append(f"{n // 10}.{n % 10}{suffix}")
        cmake_list.append(f"{n}{suffix}")
    targets = sorted({gpu_arch.sgl_kernel_target(a) for a in arch_list}, key=lambda t: int(t.rstrip("a")))
    return {
        "torch_cuda_arch_list": ";".join(torch_list),
        "cmake_cuda_architectures": ";".join(cmake_list),
        "below_sm90": any(n < 90 for n in nums),
        # What sgl-kernel's CMakeLists.txt is patched to compile (it ignores TORCH_CUDA_ARCH_LIST).
        "gencodes": [gpu_arch.gencode_flag(t) for t in targets],
        # The arch part of sgl-kernel's CMAKE_ARGS. No CMAKE_CUDA_ARCHITECTURES: torch's CMake package sets it OFF
        # when sgl-kernel calls find_package(Torch), before any target exists (torch 2.9.1
        # share/cmake/Caffe2/public/cuda.cmake:321-327, "pytorch is not compatible with CMAKE_CUDA_ARCHITECTURES and
        # will ignore its value"), and where it did apply it would add compute_X PTX + sm_X to every library
        # (docs/builds.md, measured with the real CMake and nvcc).
        "cmake_arch_args": "" if any(n < 90 for n in nums) else "-DENABLE_BELOW_SM90=OFF",
    }


def parallelism(
    ram_mib: int,
    cpus: int,
    gib_per_thread: float,
    *,
    ram_fraction: float = 0.75,
    max_threads: int = 4,
    jobs: int = 0,
    threads: int = 0,
    targets: int = 0,
) -> dict:
    """Compile jobs and nvcc threads per job that fit in RAM.

    threads = min(max_threads, cpus[, targets])  -- nvcc --threads compiles a file's -gencode targets in parallel, so
              threads beyond the number of targets (1 for a single-arch fleet) only cost memory
    A positive `targets` (the gencode targets really compiled) caps the derived threads.
    jobs    = max(1, min(cpus, floor(RAM_GiB * ram_fraction / (threads * gib_per_thread))))
    A positive `jobs` or `threads` overrides the derived value (the peak is still reported, so the caller can warn).
    """
    if cpus < 1 or ram_mib < 1 or not (0 < gib_per_thread < math.inf):
        raise ValueError("cpus, ram_mib and gib_per_thread must be positive")
    if not (0 < ram_fraction <= 1):
        raise ValueError(
            f"expected ram_fraction (python_env_build_ram_fraction) in (0, 1], found {ram_fraction}: "
            "it is the share of RAM the compilers may use; set it to 0.75 or lower"
        )
    cap = min(max_threads, cpus, targets) if targets > 0 else min(max_threads, cpus)
    t = threads if threads > 0 else max(1, cap)
    budget_mib = ram_mib * ram_fraction
    derived_jobs = max(1, min(cpus, math.floor(budget_mib / (t * gib_per_thread * 1024))))
    j = jobs if jobs > 0 else derived_jobs
    peak = int(j * t * gib_per_thread * 1024)
    return {
        "jobs": j,
        "threads": t,
        "derived_jobs": derived_jobs,
        "peak_mib": peak,
        "budget_mib": int(budget_mib),
        "ram_mib": int(ram_mib),
        "fits": peak <= budget_mib,
        "formula": (
            f"threads = min({max_threads}, cores={cpus}{f', targets={targets}' if targets > 0 else ''}) = {t}; "
            f"jobs = max(1, min(cores, floor(RAM {ram_mib} MiB x "
            f"{ram_fraction} / ({t} threads x {gib_per_thread} GiB)))) = {derived_jobs}; "
            f"peak = jobs {j} x threads {t} x {gib_per_thread} GiB = {peak} MiB"
        ),
    }


def resolve_ref(ls_remote: str, ref: str) -> str | None:
    """The commit a ref names, from `git ls-remote URL` output (peeled tags win); a 40-hex ref is itself."""
    ref = str(ref).strip()
    if re.fullmatch(r"[0-9a-f]{40}", ref):
        return ref
    table = {}
    for line in (ls_remote or "").splitlines():
        parts = line.strip().split("\t")
        if len(parts) == 2 and re.fullmatch(r"[0-9a-f]{40}", parts[0]):
            table[parts[1]] = parts[0]
    for name in (f"refs/tags/{ref}^{{}}", f"refs/tags/{ref}", f"refs/heads/{ref}", ref):
        if name in table:
            return table[name]
    return None
