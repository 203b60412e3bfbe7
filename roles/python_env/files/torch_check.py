# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Read what the installed torch was built for and refuse a torch that does not match the GPUs or the CUDA toolkit.

Run by the llmops.sglang.python_env role with the service virtualenv's Python after installing torch, and by
`make toolchain-check` against the real torch wheels:

    torch_check.py --gpu-sm sm_120 [--gpu-sm sm_90 ...] [--gpu-name "NVIDIA RTX PRO 6000 ..." ...] [--cuda 12.8]

It reads the real `torch.__version__`, `torch.version.cuda`, `torch.backends.cuda.is_built()` and
`torch.cuda.get_arch_list()` -- which is empty without a usable GPU (it checks `torch.cuda.is_available()` first), so
then the list compiled into torch (`torch._C._cuda_getArchFlags()`, what get_arch_list() would return) -- and prints
one JSON document:
{"version", "cuda", "cuda_built", "arch_list", "python", "missing": [sm without kernels], "problem": one line | null}.
Exit status 0 when torch matches, 1 with the problem also on stderr (one line) when it does not, 2 when torch does
not import.

A GPU is covered when torch carries SASS for its architecture or for a lower minor of the same major: "a cubin
generated for a certain compute capability is supported to run on any GPU with the same major revision and same or
higher minor revision" (NVIDIA, CUDA C++ Programming Guide, "Binary Compatibility"), so sm_86 kernels run on sm_89,
sm_120 kernels on sm_121; PTX (`compute_XY`) entries are JIT-compiled for any capability at or above XY.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

_ARCH = re.compile(r"^(sm|compute)_(\d+)(\d)[af]?$")


def _cc(arch):
    m = _ARCH.match(arch)
    return (m.group(1), int(m.group(2)), int(m.group(3))) if m else None


def covered(gpu_sm, arch_list):
    """Whether torch's arch list has kernels that run on this GPU (exact SASS, same-major lower-minor SASS, or PTX
    at or below its capability)."""
    gpu = _cc(gpu_sm)
    if gpu is None:
        return False
    for entry in arch_list:
        kind_major_minor = _cc(entry)
        if kind_major_minor is None:
            continue
        kind, major, minor = kind_major_minor
        if kind == "sm" and major == gpu[1] and minor <= gpu[2]:
            return True
        if kind == "compute" and (major, minor) <= (gpu[1], gpu[2]):
            return True
    return False


def verdict(info, gpu_sms, gpu_names=(), cuda=""):
    """The one-line problem with this torch for these GPUs and toolkit, or None."""
    if not info["cuda_built"] or not info["cuda"]:
        return (
            f"torch {info['version']} is a CPU-only build (torch.version.cuda is None, torch.backends.cuda."
            f"is_built() is False): it cannot use the GPUs. Install a CUDA build (python_env_torch_variant, "
            f"e.g. cu128) from the PyTorch index"
        )
    missing = [sm for sm in gpu_sms if not covered(sm, info["arch_list"])]
    if missing:
        names = ", ".join(sorted({n for sm, n in zip(gpu_sms, gpu_names, strict=False) if sm in missing})) or ", ".join(
            missing
        )
        return (
            f"torch {info['version']} has no kernels for {', '.join(sorted(set(missing)))} "
            f"({names}); its arch list is {' '.join(info['arch_list'])}. Use a cu128 or newer build "
            f"(python_env_torch_variant / python_env_torch_version; CUDA 12.8 is the first with sm_120)"
        )
    if cuda and info["cuda"] != cuda:
        return (
            f"torch {info['version']} was built for CUDA {info['cuda']} but the toolkit is CUDA {cuda}. The source "
            f"builds need the same CUDA as torch: install the matching variant's toolkit or leave "
            f"python_env_torch_variant empty"
        )
    return None


def read_torch():
    import torch

    backends = getattr(torch, "backends", None)
    built = getattr(getattr(backends, "cuda", None), "is_built", None)
    arch_list, source = list(torch.cuda.get_arch_list()), "torch.cuda.get_arch_list()"
    # torch.cuda.get_arch_list() returns [] when no GPU is usable (it checks torch.cuda.is_available() first), as on a
    # build host without GPUs or before the driver is loaded; the list it would return is compiled into torch._C.
    flags = getattr(getattr(torch, "_C", None), "_cuda_getArchFlags", None)
    if not arch_list and callable(flags):
        arch_list, source = (flags() or "").split(), "torch._C._cuda_getArchFlags() (no usable GPU)"
    return {
        "version": str(torch.__version__),
        "cuda": torch.version.cuda,
        "cuda_built": bool(built()) if callable(built) else torch.version.cuda is not None,
        "arch_list": arch_list,
        "arch_list_from": source,
        "python": "{}.{}".format(*sys.version_info[:2]),
    }


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--gpu-sm", action="append", default=[])
    p.add_argument("--gpu-name", action="append", default=[])
    p.add_argument("--cuda", default="")
    a = p.parse_args(argv)
    try:
        info = read_torch()
    except Exception as e:
        print(f"import torch failed: {' '.join(f'{type(e).__name__}: {e}'.split())}", file=sys.stderr)
        return 2
    info["missing"] = [sm for sm in a.gpu_sm if not covered(sm, info["arch_list"])]
    info["problem"] = verdict(info, a.gpu_sm, a.gpu_name, a.cuda)
    print(json.dumps(info))
    if info["problem"]:
        print(info["problem"], file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
