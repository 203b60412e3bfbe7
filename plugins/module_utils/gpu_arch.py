# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""GPU architectures: the one home of what this collection knows about them.

Every spelling of an architecture that users, nvidia-smi, build systems and the PCI id database use is read here:
``sm_120``, ``sm_90a``, ``sm120a``, ``compute_90``, ``12.0``, ``12.0a``, ``120``, ``90a``, ``90`` (int), ``(12, 0)``,
and a chip name such as ``GB202GL`` from a PCI device name.

Sources (checked 2026-11, see docs/gpu-stack.md):
- compute capabilities and their products: NVIDIA's "CUDA GPU Compute Capability" table
  (https://developer.nvidia.com/cuda-gpus) and its legacy page;
- chip names: the PCI id database (https://pci-ids.ucw.cz/, Debian package ``pci.ids``), whose NVIDIA entries read
  ``<chip>[GL|GLM|M|BM] [<product>]``, e.g. ``2bb1  GB202GL [RTX PRO 6000 Blackwell Workstation Edition]``.

Pure functions, no Ansible imports; the flash-attn / sgl-kernel spellings built on top of ``parse`` live with the
build plan's users.
"""

from __future__ import annotations

import re

__all__ = [
    "CHIP_FAMILIES",
    "FAMILY",
    "FLASH_ATTN_ARCH_TOKENS",
    "FLASH_ATTN_MIN_VERSION",
    "KNOWN_CAPABILITIES",
    "ArchError",
    "chip_arch",
    "chip_of",
    "compute_capability",
    "family",
    "flash_attn_token",
    "gencode_flag",
    "is_known",
    "number",
    "parse",
    "sgl_kernel_target",
    "sm",
    "suffix",
]


class ArchError(ValueError):
    """A string that is not a GPU architecture (or not one NVIDIA has made, when ``known_only``)."""


# Compute capability -> architecture family, for every capability NVIDIA lists from Volta on
# (https://developer.nvidia.com/cuda-gpus; 7.2 Xavier and 8.7 Orin are Jetson, 10.1 is the pre-CUDA-13 number
# of Jetson Thor, renamed 11.0 in CUDA 13).
FAMILY = {
    (7, 0): "Volta",
    (7, 2): "Volta",
    (7, 5): "Turing",
    (8, 0): "Ampere",
    (8, 6): "Ampere",
    (8, 7): "Ampere",
    (8, 9): "Ada Lovelace",
    (9, 0): "Hopper",
    (10, 0): "Blackwell",
    (10, 1): "Blackwell",
    (10, 3): "Blackwell",
    (11, 0): "Blackwell",
    (12, 0): "Blackwell",
    (12, 1): "Blackwell",
}
KNOWN_CAPABILITIES = tuple(sorted(FAMILY))

# Chip name (as the PCI id database spells it, without the GL/GLM/M/BM variant suffix) -> compute capability.
# One rule per chip family, not one per device: a new board on a known chip resolves without a change here.
# Chips the database lists without any product (e.g. GB110, GB120, GB20B, GB6 in pci.ids 2025.06.09) are left out
# on purpose: no NVIDIA source ties them to a compute capability yet (docs/gpu-stack.md).
CHIP_FAMILIES = (
    (r"GV100", (7, 0)),  # Tesla V100, Quadro GV100
    (r"TU1(?:02|04|06|16|17)", (7, 5)),  # T4, Quadro RTX, RTX 20xx
    (r"GA100", (8, 0)),  # A100, A30, A800
    (r"GA10[2-7]", (8, 6)),  # A10, A40, A16, A2, RTX A6000, RTX 30xx
    (r"AD10[2-7]", (8, 9)),  # L4, L40, L40S, RTX 6000 Ada, RTX 40xx
    (r"GH100", (9, 0)),  # H100, H200, H800, H20, GH200
    (r"GB10[02]", (10, 0)),  # B200, B100, GB200
    (r"GB20[2-7]", (12, 0)),  # RTX PRO 6000/5000/4000 Blackwell, RTX 50xx
    (r"GB10", (12, 1)),  # GB10 (DGX Spark): nvidia-smi names the GPU "NVIDIA GB10"
)
_CHIP_RES = tuple((re.compile(r"^" + pat + r"(?:GL|GLM|M|BM)?$"), cc) for pat, cc in CHIP_FAMILIES)
_CHIP_TOKEN = re.compile(r"\b(?:GV|TU|GA|AD|GH|GB)\d[0-9A-Z]*\b")

_DOTTED = re.compile(r"^(\d{1,2})\.(\d)([af]?)$")
_PACKED = re.compile(r"^(?:sm_?|compute_?)?(\d{2,3})([af]?)$")


def _check(cc, text, known_only):
    if known_only and cc not in FAMILY:
        known = ", ".join(f"sm_{a}{b}" for a, b in KNOWN_CAPABILITIES)
        raise ArchError(f"GPU architecture {text!r} is not one NVIDIA makes; known architectures: {known}")
    return cc


def _split(arch):
    """(major, minor, suffix) of any accepted spelling; raises ArchError."""
    if isinstance(arch, bool):
        raise ArchError(f"GPU architecture {arch!r} is not understood: use sm_120, sm_90a, 12.0 or 120")
    if isinstance(arch, (tuple, list)) and len(arch) in (1, 2):
        try:
            return int(arch[0]), int(arch[1]) if len(arch) == 2 else 0, ""
        except (TypeError, ValueError):
            pass
    elif isinstance(arch, int):
        arch = str(arch)
    if isinstance(arch, str):
        s = arch.strip().lower()
        m = _DOTTED.match(s)
        if m:
            return int(m.group(1)), int(m.group(2)), m.group(3)
        m = _PACKED.match(s)
        if m:
            digits = m.group(1)
            return int(digits[:-1]), int(digits[-1]), m.group(2)
    raise ArchError(f"GPU architecture {arch!r} is not understood: use sm_120, sm_90a, 12.0 or 120")


def parse(arch, known_only=False):
    """Any spelling -> (major, minor): 'sm_120' -> (12, 0), '9.0a' -> (9, 0), 86 -> (8, 6), (12, 1) -> (12, 1).

    With ``known_only`` an architecture NVIDIA has not made (``sm_999``) is refused too. nvidia-smi's own
    compute_cap is read without it, so a GPU newer than this table is still reported rather than rejected.
    """
    major, minor, _ = _split(arch)
    return _check((major, minor), arch, known_only)


def suffix(arch):
    """The feature-set suffix: 'sm_90a' -> 'a', '10.0f' -> 'f', 'sm_120' -> ''."""
    return _split(arch)[2]


def number(arch, known_only=False):
    """'sm_120', '120a', '12.0', (12, 0) -> 120; what CMake's CUDA_ARCHITECTURES and flash-attn spell."""
    major, minor = parse(arch, known_only)
    return major * 10 + minor


def sm(arch, known_only=False):
    """'12.0' -> 'sm_120', '9.0' -> 'sm_90'; the spelling gpu_facts and compat.yml use."""
    return f"sm_{number(arch, known_only)}"


def compute_capability(arch, known_only=False):
    """'sm_120' -> '12.0'; nvidia-smi's compute_cap spelling."""
    major, minor = parse(arch, known_only)
    return f"{major}.{minor}"


def is_known(arch):
    """Whether ``arch`` reads as an architecture NVIDIA has made."""
    try:
        parse(arch, known_only=True)
    except ArchError:
        return False
    return True


def family(arch):
    """'sm_120' -> 'Blackwell'; 'unknown' for a well-formed capability this table does not know."""
    return FAMILY.get(parse(arch), "unknown")


def chip_of(name):
    """The chip name in a PCI/nvidia-smi device name: 'GB202GL [RTX PRO 6000 ...]' -> 'GB202GL'; None if none."""
    if not name:
        return None
    m = _CHIP_TOKEN.search(str(name))
    return m.group(0) if m else None


def chip_arch(name):
    """(major, minor) from the chip family in a device name, None when the chip is not one this table maps.

    'GV100GL [Tesla V100 PCIe 32GB]' -> (7, 0); 'AD104GL [L4]' -> (8, 9); 'GH100 [H100 SXM5 80GB]' -> (9, 0);
    'GB202GL [RTX PRO 6000 Blackwell Workstation Edition]' -> (12, 0); 'NVIDIA GB10' -> (12, 1).
    """
    if not name:
        return None
    for token in _CHIP_TOKEN.findall(str(name)):
        for rx, cc in _CHIP_RES:
            if rx.match(token):
                return cc
    return None


# --- Build spellings (owned with the build roles; see docs/builds.md) -------------------------------------------------
# flash-attention 2's setup.py (FLASH_ATTN_CUDA_ARCHS, from v2.7.3 on; checked at v2.8.3) compiles a -gencode only for
# these tokens and silently ignores any other: sm_86/sm_89 must ask for 80 (sm_80 code runs on every 8.x), sm_103 for
# 100, sm_121 for 120 (code for X.0 runs on X.y of the same major). Older versions do not read the variable.
FLASH_ATTN_ARCH_TOKENS = (80, 90, 100, 120)
FLASH_ATTN_MIN_VERSION = (2, 7, 3)
# sgl-kernel's CMakeLists.txt compiles an explicit -gencode list of its own (arch-specific 'a' targets from sm_90 on,
# plain sm_80/sm_89 below; TORCH_CUDA_ARCH_LIST is ignored). The target each GPU needs:
_SGL_KERNEL_TARGETS = {(8, 0): "80", (8, 6): "80", (8, 7): "80", (8, 9): "89"}


def flash_attn_token(arch):
    """The FLASH_ATTN_CUDA_ARCHS token that builds this GPU's kernels: 'sm_86' -> 80, 'sm_103' -> 100, 'sm_121' -> 120.

    Raises ArchError for a GPU flash-attention 2 has no kernels for (sm_70, sm_75, sm_110).
    """
    major, minor = parse(arch, known_only=True)
    token = next((t for t in FLASH_ATTN_ARCH_TOKENS if t // 10 == major and t % 10 <= minor), None)
    if token is None:
        raise ArchError(
            f"flash-attention 2 has no kernels for {sm(arch)} (FLASH_ATTN_CUDA_ARCHS accepts only "
            f"{';'.join(map(str, FLASH_ATTN_ARCH_TOKENS))}): disable flash_attn for this host"
        )
    return token


def sgl_kernel_target(arch):
    """The sgl-kernel -gencode target for this GPU: 'sm_120' -> '120a', 'sm_90' -> '90a', 'sm_86' -> '80'."""
    major, minor = parse(arch, known_only=True)
    if (major, minor) in _SGL_KERNEL_TARGETS:
        return _SGL_KERNEL_TARGETS[(major, minor)]
    if major < 9:
        raise ArchError(f"sgl-kernel has no kernels for {sm(arch)} (its CMake list starts at sm_80)")
    return f"{major * 10 + minor}a"


def gencode_flag(target):
    """'120a' -> '-gencode=arch=compute_120a,code=sm_120a' (nvcc's spelling, as sgl-kernel's CMakeLists.txt has it)."""
    return f"-gencode=arch=compute_{target},code=sm_{target}"
