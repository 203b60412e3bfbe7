# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Prove SGLang's extend-attention kernel fits an SM120 GPU's shared memory by compiling it with the real Triton.

Run by the llmops.sglang.sglang role on the builder with the build virtualenv's Python (when triton imports there),
and by the tests and `make toolchain-check` with the Triton wheel torch pins:

    sm120_smem_probe.py --tree CHECKOUT/python --file sglang/srt/.../extend_attention.py [--capability 12.0]
                        [--limit 101376] [--dims 64:64,128:128,...] [--dtypes float16,bfloat16]

What is real: the release's own `extend_attention.py` (its `_fwd_kernel` and its `extend_attention_fwd`, which picks
BLOCK_M/BLOCK_N/num_warps/num_stages and every other constexpr exactly as the server does), Triton's own JIT binder
and compiler. What is given: the compute capability (the module reads `torch.cuda.get_device_capability()` and
`sglang.srt.utils.is_cuda()/is_hip()` at import; both answer for the capability asked), the tensors (shape, stride
and dtype only, no memory), and the target (`GPUTarget("cuda", 120, 32)` through a driver stand-in that launches
nothing). The launch `_fwd_kernel[grid](...)` is turned into Triton's own `warmup` (compile, do not run) and the
compiled kernel's `metadata.shared` (bytes of shared memory per block) is compared with the limit.

The default limit is sm_120's 99 KB = 101,376 bytes of shared memory per thread block (NVIDIA, CUDA C++ Programming
Guide, "Technical Specifications per Compute Capability": maximum shared memory per thread block 99 KB for compute
capability 12.0; 227 KB for 9.0/10.0).

Prints one JSON document: {"triton": ..., "torch": ..., "file": ..., "capability": ..., "limit": ..., "rows": [...]}
and exits 0 when every row fits, 1 when one does not, 2 when the probe cannot run (a one-line message on stderr).
"""

from __future__ import annotations

import argparse
import importlib.abc
import importlib.util
import json
import os
import sys
import time
import types

SM120_SMEM_PER_BLOCK = 101376
# (Lq, Lv): MHA/GQA head sizes 64, 128, 256 (Llama, Qwen, Gemma), MLA prefill 192/128 and MLA absorbed 576/512
# (DeepSeek-V3, GLM-5: kv_lora_rank 512 + rope 64).
DEFAULT_DIMS = ((64, 64), (128, 128), (256, 256), (192, 128), (576, 512))
DEFAULT_DTYPES = ("float16", "bfloat16")
# Modules whose answers depend on the machine: served by the probe for the capability asked. Any other sglang
# module the kernel file imports is loaded from the tree (its package __init__ files are not run).
PLATFORM_MODULES = ("sglang.srt.utils", "sglang.srt.environ")


class ProbeError(Exception):
    """The probe cannot run here; the message is one line."""


class _Dtype:
    """A dtype for the stand-in torch: Triton reads str(dtype) ('torch.bfloat16')."""

    def __init__(self, name, itemsize):
        self.name, self.itemsize = name, itemsize

    def __repr__(self):
        return f"torch.{self.name}"

    __str__ = __repr__


def _standin_torch(capability):
    """Only what extend_attention.py reads from torch when no torch is installed: the capability and dtype names."""
    torch = types.ModuleType("torch")
    sizes = {
        "float16": 2,
        "bfloat16": 2,
        "float32": 4,
        "float8_e4m3fn": 1,
        "float8_e5m2": 1,
        "int32": 4,
        "int64": 8,
        "uint8": 1,
    }
    for name, size in sizes.items():
        setattr(torch, name, _Dtype(name, size))
    torch.half, torch.float = torch.float16, torch.float32
    torch.Tensor = type("Tensor", (), {})
    torch.dtype = _Dtype
    torch.cuda = types.SimpleNamespace(get_device_capability=lambda *a, **k: capability, is_available=lambda: True)
    torch.version = types.SimpleNamespace(cuda=None, hip=None, __version__="stand-in")
    torch.__version__ = "stand-in (capability and dtypes only)"
    return torch


def _torch(capability, mode):
    if mode in ("auto", "real"):
        try:
            import torch

            torch.cuda.get_device_capability = lambda *a, **k: capability
            torch.cuda.is_available = lambda: True
            return torch, f"real {torch.__version__}"
        except ImportError:
            if mode == "real":
                raise ProbeError("--torch real: torch does not import here") from None
    torch = _standin_torch(capability)
    sys.modules["torch"] = torch
    return torch, torch.__version__


class _Platform(types.ModuleType):
    """sglang.srt.utils / sglang.srt.environ as the kernel module reads them on a CUDA device: is_cuda() is True,
    every other is_*() (hip, npu, gfx95...) False, envs.X.get() the variable's default (False). Anything else the
    module would call at launch is reported instead of guessed."""

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        if name == "is_cuda":
            return lambda *a, **k: True
        if name.startswith("is_"):
            return lambda *a, **k: False
        if name == "envs":
            return _Envs()

        def missing(*a, **k):
            raise ProbeError(f"extend_attention called {self.__name__}.{name}, which the probe does not provide")

        return missing


class _Envs:
    def __getattr__(self, name):
        return types.SimpleNamespace(get=lambda: False, value=False)


class _TreeFinder(importlib.abc.MetaPathFinder):
    """Serve `sglang.*` from the release's tree: leaf modules from their files, packages as empty namespaces."""

    def __init__(self, root):
        self.root = root

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "sglang" and not fullname.startswith("sglang."):
            return None
        if fullname in PLATFORM_MODULES:
            return importlib.util.spec_from_loader(fullname, _ModuleLoader(_Platform))
        rel = fullname.replace(".", os.sep)
        pkg = os.path.join(self.root, rel)
        if os.path.isdir(pkg):
            spec = importlib.util.spec_from_loader(fullname, _ModuleLoader(types.ModuleType), is_package=True)
            spec.submodule_search_locations = [pkg]
            return spec
        if os.path.isfile(pkg + ".py"):
            return importlib.util.spec_from_file_location(fullname, pkg + ".py")
        return None


class _ModuleLoader(importlib.abc.Loader):
    def __init__(self, cls):
        self.cls = cls

    def create_module(self, spec):
        return self.cls(spec.name)

    def exec_module(self, module):
        return None


class _Driver:
    """Triton's active driver for compiling only: device 0, stream 0, the target asked for; never launches."""

    def __init__(self, target):
        self.target = target

    def get_current_target(self):
        return self.target

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def is_active(self):
        return True


class _FakeTensor:
    """Shape, contiguous strides and dtype; data_ptr 0 (16-byte aligned, as CUDA allocations are)."""

    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), dtype
        self.ndim = len(self.shape)

    def stride(self, dim=None):
        out, acc = [], 1
        for size in reversed(self.shape):
            out.append(acc)
            acc *= size
        out = tuple(reversed(out))
        return out if dim is None else out[dim]

    def dim(self):
        return self.ndim

    def data_ptr(self):
        return 0

    def size(self, dim=None):
        return self.shape if dim is None else self.shape[dim]

    def numel(self):
        n = 1
        for s in self.shape:
            n *= s
        return n

    def is_contiguous(self):
        return True


def _kernel_file(tree, rel):
    # Where a release keeps the kernel is plugins/module_utils/sglang_flags.py's (sm120_fix); callers pass it.
    path = rel.removeprefix("python/")
    if path and os.path.isfile(os.path.join(tree, path)):
        return path
    raise ProbeError(f"expected SGLang's extend_attention.py under {tree} at {path or '(no --file given)'}, found none")


def _launches(mod, torch, dims, dtypes):
    """Call the release's extend_attention_fwd for each configuration; yield (config, launch kwargs, compiled)."""
    real = mod._fwd_kernel
    seen = []

    class _Recorder:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                kernel = real.run(*args, grid=grid, warmup=True, **kwargs)
                seen.append((kwargs, kernel))
                return kernel

            return launch

    mod._fwd_kernel = _Recorder()
    params = __import__("inspect").signature(mod.extend_attention_fwd).parameters
    i32 = torch.int32
    for lq, lv in dims:
        for dt_name in dtypes:
            dt = getattr(torch, dt_name)
            heads, kv_heads, tokens, pool, bs = 8, (1 if lq == 576 else 8), 256, 4096, 2
            lk = lq
            args = {
                "q_extend": _FakeTensor((tokens, heads, lq), dt),
                "k_extend": _FakeTensor((tokens, kv_heads, lk), dt),
                "v_extend": _FakeTensor((tokens, kv_heads, lv), dt),
                "o_extend": _FakeTensor((tokens, heads, lv), dt),
                "k_buffer": _FakeTensor((pool, kv_heads, lk), dt),
                "v_buffer": _FakeTensor((pool, kv_heads, lv), dt),
                "qo_indptr": _FakeTensor((bs + 1,), i32),
                "kv_indptr": _FakeTensor((bs + 1,), i32),
                "kv_indices": _FakeTensor((pool,), i32),
                "custom_mask": None,
                "is_causal": True,
                "mask_indptr": None,
                "max_len_extend": tokens // bs,
            }
            # Releases from 0.5.10 on take the KV scales as positional parameters (1.0 without fp8 KV).
            for name in ("k_scale", "v_scale"):
                if name in params and params[name].default is params[name].empty:
                    args[name] = 1.0
            before = len(seen)
            mod.extend_attention_fwd(**args)
            if len(seen) != before + 1:
                raise ProbeError(f"extend_attention_fwd launched {len(seen) - before} _fwd_kernel for Lq={lq}")
            kwargs, kernel = seen[-1]
            yield {"lq": lq, "lv": lv, "dtype": dt_name}, kwargs, kernel


def probe(
    tree,
    rel="",
    *,
    capability=(12, 0),
    limit=SM120_SMEM_PER_BLOCK,
    dims=DEFAULT_DIMS,
    dtypes=DEFAULT_DTYPES,
    torch_mode="auto",
):
    tree = os.path.abspath(tree)
    rel = _kernel_file(tree, rel)
    torch, torch_desc = _torch(tuple(capability), torch_mode)
    try:
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.runtime.driver import driver
    except ImportError as e:
        raise ProbeError(f"triton does not import here ({e}): the compile proof needs the Triton torch pins") from None
    for name in [m for m in sys.modules if m == "sglang" or m.startswith("sglang.")]:
        del sys.modules[name]
    finder = _TreeFinder(tree)
    sys.meta_path.insert(0, finder)
    arch = capability[0] * 10 + capability[1]
    previous = getattr(driver, "_active", None)  # None unless a real driver was already made active
    driver.set_active(_Driver(GPUTarget("cuda", arch, 32)))
    rows = []
    try:
        mod = importlib.import_module(rel[:-3].replace("/", "."))
        for cfg, kw, kernel in _launches(mod, torch, dims, dtypes):
            shared = int(kernel.metadata.shared)
            rows.append(
                {
                    **cfg,
                    "block_m": kw["BLOCK_M"],
                    "block_n": kw["BLOCK_N"],
                    "block_dmodel": kw["BLOCK_DMODEL"],
                    "block_dpe": kw["BLOCK_DPE"],
                    "block_dv": kw["BLOCK_DV"],
                    "num_warps": kw.get("num_warps"),
                    "num_stages": kw.get("num_stages"),
                    "shared": shared,
                    "limit": limit,
                    "fits": shared <= limit,
                }
            )
    finally:
        sys.meta_path.remove(finder)
        driver.set_active(previous)
    return {
        "triton": triton.__version__,
        "torch": torch_desc,
        "file": rel,
        "capability": f"{capability[0]}.{capability[1]}",
        "target": f"cuda:{arch}",
        "limit": limit,
        "rows": rows,
        "fits": all(r["fits"] for r in rows),
    }


def _capability(text):
    """'12.0', '120', 'sm_120', '12.0a' -> (12, 0): the spellings gpu_facts, nvidia-smi and CMake use."""
    digits = text.strip().lower().removeprefix("sm_").rstrip("af")
    try:
        if "." in digits:
            major, minor = digits.split(".", 1)
            return int(major), int(minor)
        return int(digits[:-1]), int(digits[-1])
    except ValueError:
        raise ProbeError(f"--capability: expected a compute capability such as 12.0 or 120, found {text!r}") from None


def _dims(text):
    out = []
    for part in text.split(","):
        lq, _, lv = part.partition(":")
        out.append((int(lq), int(lv or lq)))
    return tuple(out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tree", required=True, help="the release's python/ directory (or an unpacked wheel)")
    p.add_argument("--file", required=True, help="the kernel file relative to --tree (sglang_flags' sm120_fix path)")
    p.add_argument("--capability", default="12.0")
    p.add_argument("--limit", type=int, default=SM120_SMEM_PER_BLOCK)
    p.add_argument("--dims", default=",".join(f"{a}:{b}" for a, b in DEFAULT_DIMS))
    p.add_argument("--dtypes", default=",".join(DEFAULT_DTYPES))
    p.add_argument("--torch", default="auto", choices=("auto", "real", "standin"))
    a = p.parse_args(argv)
    try:
        cap = _capability(a.capability)
        start = time.monotonic()
        out = probe(
            a.tree,
            a.file,
            capability=cap,
            limit=a.limit,
            dims=_dims(a.dims),
            dtypes=tuple(a.dtypes.split(",")),
            torch_mode=a.torch,
        )
        out["seconds"] = round(time.monotonic() - start, 1)
    except ProbeError as e:
        print(f"sm120 shared-memory probe: {e}", file=sys.stderr)
        return 2
    except ImportError as e:
        print(
            f"sm120 shared-memory probe failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}",
            file=sys.stderr,
        )
        return 2
    print(json.dumps(out))
    return 0 if out["fits"] else 1


if __name__ == "__main__":
    sys.exit(main())
