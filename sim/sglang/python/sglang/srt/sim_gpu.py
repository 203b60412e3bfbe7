"""Simulated GPU hardware for the SGLang stand-in.

The "hardware" is a JSON profile (env ``SIM_GPU_PROFILE`` or ``/etc/sim-gpu/profile.json``)::

    {"description": str, "nvswitch": bool,
     "gpus": [{"index", "name", "uuid", "memory_total_mib", "memory_used_mib", "compute_cap": "12.0", "pci_bus_id"}]}

``CUDA_VISIBLE_DEVICES`` is honoured like the CUDA runtime does it (indices or ``GPU-`` UUID prefixes, parsing stops at
the first invalid entry, an empty value hides every GPU). The visible list is what torch would enumerate: rank ``i``
uses visible ordinal ``i``.

The module also defines stand-ins for the exception classes of torch / triton / safetensors. Their ``__module__`` is set
so that a Python traceback prints them exactly like the real ones (``torch.OutOfMemoryError: CUDA out of memory. ...``).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

DEFAULT_PROFILE_PATH = "/etc/sim-gpu/profile.json"

NO_DRIVER_MSG = (
    "Found no NVIDIA driver on your system. Please check that you have an NVIDIA GPU and installed a driver from "
    "http://www.nvidia.com/Download/index.aspx"
)
NO_DEVICE_MSG = "No CUDA GPUs are available"
INVALID_ORDINAL_MSG = (
    "CUDA error: invalid device ordinal\n"
    "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below might be "
    "incorrect.\n"
    "For debugging consider passing CUDA_LAUNCH_BLOCKING=1\n"
    "Compile with `TORCH_USE_CUDA_DSA` to enable device-side assertions.\n"
)

# Shared memory per block (bytes) that triton may use, by compute capability (major, minor).
# SM120 (RTX PRO 6000 / RTX 50xx) and SM86/89 have ~99 KiB, SM80 ~163 KiB, SM90/SM100 ~227 KiB.
_SMEM_LIMITS = {(8, 0): 166912, (8, 6): 101376, (8, 7): 166912, (8, 9): 101376, (9, 0): 232448}


def shared_memory_limit(capability: tuple[int, int]) -> int:
    """Triton's ``max_shared_mem`` for a device of the given compute capability."""
    if capability in _SMEM_LIMITS:
        return _SMEM_LIMITS[capability]
    major = capability[0]
    if major in (10, 11):
        return 232448
    if major == 12:
        return 101376
    if major >= 9:
        return 232448
    return 101376 if major == 8 else 49152


class OutOfMemoryError(RuntimeError):
    """Printed as ``torch.OutOfMemoryError`` in tracebacks."""


OutOfMemoryError.__module__ = "torch"


class DistBackendError(RuntimeError):
    """Printed as ``torch.distributed.DistBackendError``."""


DistBackendError.__module__ = "torch.distributed"


class DistStoreError(RuntimeError):
    """Printed as ``torch.distributed.DistStoreError`` (the TCPStore of the rendezvous)."""


DistStoreError.__module__ = "torch.distributed"


class DistNetworkError(RuntimeError):
    """Printed as ``torch.distributed.DistNetworkError`` (a client that cannot reach the store)."""


DistNetworkError.__module__ = "torch.distributed"


class OutOfResources(Exception):
    """Printed as ``triton.runtime.errors.OutOfResources``."""

    def __init__(self, required: int, limit: int, name: str):
        self.required = required
        self.limit = limit
        self.name = name
        super().__init__(
            f"out of resource: {name}, Required: {required}, Hardware limit: {limit}. "
            "Reducing block sizes or `num_stages` may help."
        )


OutOfResources.__module__ = "triton.runtime.errors"


class SafetensorError(Exception):
    """Printed as ``safetensors_rust.SafetensorError``."""


SafetensorError.__module__ = "safetensors_rust"


@dataclass(frozen=True)
class Gpu:
    ordinal: int  # index as seen by this process (after CUDA_VISIBLE_DEVICES)
    index: int  # physical index (nvidia-smi)
    name: str
    uuid: str
    memory_total_mib: int
    memory_used_mib: int
    capability: tuple[int, int]
    pci_bus_id: str

    @property
    def total_bytes(self) -> int:
        return self.memory_total_mib << 20

    @property
    def used_bytes(self) -> int:
        return self.memory_used_mib << 20


@dataclass(frozen=True)
class GpuSystem:
    """What the process can see. ``driver`` is False when there is no profile (or it lists no GPU)."""

    driver: bool
    nvswitch: bool
    gpus: tuple[Gpu, ...]
    description: str = ""

    def error_message(self) -> str:
        return NO_DRIVER_MSG if not self.driver else NO_DEVICE_MSG


def _parse_cc(value) -> tuple[int, int]:
    text = str(value)
    major, _, minor = text.partition(".")
    return int(major), int(minor or 0)


def _visible(all_gpus: list[dict], cvd: str | None) -> list[dict]:
    if cvd is None:
        return list(all_gpus)
    chosen: list[dict] = []
    for raw in cvd.split(","):
        item = raw.strip()
        match = None
        if item.isdigit():
            idx = int(item)
            match = next((g for g in all_gpus if int(g.get("index", -1)) == idx), None)
        elif item.startswith("GPU-"):
            hits = [g for g in all_gpus if str(g.get("uuid", "")).startswith(item)]
            match = hits[0] if len(hits) == 1 else None
        if match is None or match in chosen:
            break  # CUDA stops at the first invalid (or repeated) entry
        chosen.append(match)
    return chosen


def load_system(env: dict | None = None) -> GpuSystem:
    env = os.environ if env is None else env
    path = env.get("SIM_GPU_PROFILE") or DEFAULT_PROFILE_PATH
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return GpuSystem(driver=False, nvswitch=False, gpus=())
    all_gpus = list(data.get("gpus") or [])
    if not all_gpus:
        return GpuSystem(
            driver=False, nvswitch=bool(data.get("nvswitch")), gpus=(), description=data.get("description", "")
        )
    visible = _visible(all_gpus, env.get("CUDA_VISIBLE_DEVICES"))
    gpus = tuple(
        Gpu(
            ordinal=i,
            index=int(g.get("index", i)),
            name=str(g.get("name", "NVIDIA GPU")),
            uuid=str(g.get("uuid", "")),
            memory_total_mib=int(g["memory_total_mib"]),
            memory_used_mib=int(g.get("memory_used_mib", 0)),
            capability=_parse_cc(g.get("compute_cap", "9.0")),
            pci_bus_id=str(g.get("pci_bus_id", "")),
        )
        for i, g in enumerate(visible)
    )
    return GpuSystem(
        driver=True, nvswitch=bool(data.get("nvswitch")), gpus=gpus, description=str(data.get("description", ""))
    )


_current_device = 0


def set_device(ordinal: int) -> None:
    """``torch.cuda.set_device``: raises like torch when the ordinal does not exist."""
    global _current_device
    system = load_system()
    if not system.gpus:
        raise RuntimeError(system.error_message())
    if ordinal >= len(system.gpus):
        raise RuntimeError(INVALID_ORDINAL_MSG)
    _current_device = ordinal


def get_device_capability(ordinal: int | None = None) -> tuple[int, int]:
    """Like ``torch.cuda.get_device_capability()`` (current device); raises like torch when there is none."""
    ordinal = _current_device if ordinal is None else ordinal
    system = load_system()
    if not system.gpus:
        raise RuntimeError(system.error_message())
    if ordinal >= len(system.gpus):
        raise RuntimeError(INVALID_ORDINAL_MSG)
    return system.gpus[ordinal].capability


def format_size(size: float) -> str:
    """``format_size`` of c10/cuda/CUDACachingAllocator.cpp."""
    size = max(0, int(size))
    if size <= 1024:
        return f"{size} bytes"
    if size <= 1048576:
        return f"{size / 1024.0:.2f} KiB"
    if size <= 1073741824:
        return f"{size / 1048576.0:.2f} MiB"
    return f"{size / 1073741824.0:.2f} GiB"


def cuda_oom_message(
    *,
    alloc: int,
    ordinal: int,
    total: int,
    free: int,
    process_in_use: int,
    allocated: int,
    private_pools: int,
    reserved_unallocated: int,
) -> str:
    """torch 2.9's CUDA OOM text (``OutOfMemoryError`` raised by the caching allocator)."""
    pool_msg = (
        f"with {format_size(private_pools)} allocated in private pools (e.g., CUDA Graphs), " if private_pools else ""
    )
    return (
        f"CUDA out of memory. Tried to allocate {format_size(alloc)}. GPU {ordinal} has a total capacity of "
        f"{format_size(total)} of which {format_size(free)} is free. Including non-PyTorch memory, this process has "
        f"{format_size(process_in_use)} memory in use. Of the allocated memory {format_size(allocated)} is allocated "
        f"by PyTorch, {pool_msg}and {format_size(reserved_unallocated)} is reserved by PyTorch but unallocated. "
        "If reserved but unallocated memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True "
        "to avoid fragmentation.  See documentation for Memory Management  "
        "(https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


# The SM120 fix (PR #14311) as text: an ``if``/``elif`` line testing ``CUDA_CAPABILITY[0] == 12`` in
# layers/attention/triton_ops/extend_attention.py. The stand-in itself does not grep: it *executes* the block-size
# function of its installed extend_attention.py, so the fix counts only if that branch really is taken.
SM120_FIX_PATTERN = r"^[ \t]*(?:el)?if\b[^#\n]*CUDA_CAPABILITY\[0\]\s*==\s*12\b"


def extend_attention_path() -> str:
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.join(here, "layers", "attention", "triton_ops", "extend_attention.py")


def has_sm120_fix(path: str | None = None) -> bool:
    """Textual marker check of an extend_attention.py (default: this installation's)."""
    import re

    with open(path or extend_attention_path(), encoding="utf-8") as fh:
        return re.search(SM120_FIX_PATTERN, fh.read(), re.M) is not None
