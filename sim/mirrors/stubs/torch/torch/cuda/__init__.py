"""Simulated torch.cuda: the GPUs come from the node's profile (env SIM_GPU_PROFILE, else /etc/sim-gpu/profile.json),
the driver from /usr/lib/sim-gpu/driver-version (env SIM_GPU_DRIVER_FILE), like the simulated nvidia-smi."""

import json
import os
import warnings
from collections import namedtuple
from pathlib import Path

from ..version import arch_list as _ARCH_LIST
from ..version import cuda as _CUDA

_DeviceProperties = namedtuple(
    "_CudaDeviceProperties", "name major minor total_memory multi_processor_count uuid pci_bus_id"
)
# Lowest driver branch per CUDA major that the runtime accepts (minor-version compatibility).
_MIN_DRIVER = {12: 525, 13: 580}


def _profile_gpus():
    path = Path(os.environ.get("SIM_GPU_PROFILE", "/etc/sim-gpu/profile.json"))
    try:
        gpus = json.loads(path.read_text()).get("gpus", [])
    except (OSError, ValueError):
        return []
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return gpus
    picked = []
    for raw in visible.split(","):
        item = raw.strip()
        if not item.isdigit() or int(item) >= len(gpus):
            break  # CUDA stops at the first invalid entry
        picked.append(gpus[int(item)])
    return picked


def _driver_version():
    installed_file = Path(os.environ.get("SIM_GPU_DRIVER_FILE", "/usr/lib/sim-gpu/driver-version"))
    loaded_file = Path(os.environ.get("SIM_GPU_LOADED_FILE", "/run/sim-gpu/loaded-driver-version"))
    try:
        installed = installed_file.read_text().strip()
    except OSError:
        return None, "Found no NVIDIA driver on your system."
    try:
        loaded = loaded_file.read_text().strip()
    except OSError:
        loaded = installed
    if loaded != installed:
        return None, "Error 803: system has unsupported display driver / cuda driver combination"
    try:
        branch = int(installed.split(".")[0])
    except ValueError:
        return None, f"Unexpected driver version {installed!r}"
    need = _MIN_DRIVER.get(int(_CUDA.split(".")[0]), 0)
    if branch < need:
        return None, (
            f"The NVIDIA driver on your system is too old (found version {installed}). Please update your GPU "
            f"driver, or install a PyTorch version compiled with an older CUDA version."
        )
    return installed, None


def _state():
    gpus = _profile_gpus()
    driver, problem = _driver_version()
    if not gpus or driver is None:
        return [], problem
    return gpus, None


def is_available():
    gpus, problem = _state()
    if problem and _profile_gpus():
        warnings.warn(f"CUDA initialization: {problem}", UserWarning, stacklevel=2)
    return bool(gpus)


def device_count():
    return len(_state()[0])


def _gpu(device=None):
    gpus, problem = _state()
    index = 0 if device is None else getattr(device, "index", device)
    index = 0 if index is None else int(index)
    if not gpus:
        raise RuntimeError(problem or "No CUDA GPUs are available")
    if index >= len(gpus) or index < 0:
        raise RuntimeError("CUDA error: invalid device ordinal")
    return gpus[index]


def get_device_capability(device=None):
    major, minor = _gpu(device)["compute_cap"].split(".")
    return int(major), int(minor)


def get_device_name(device=None):
    return _gpu(device)["name"]


def get_device_properties(device=None):
    g = _gpu(device)
    major, minor = get_device_capability(device)
    return _DeviceProperties(
        g["name"],
        major,
        minor,
        int(g["memory_total_mib"]) << 20,
        int(g.get("sm_count", 188)),
        g["uuid"],
        g["pci_bus_id"],
    )


def _used_mib(gpu):
    extra = 0
    try:
        usage_dir = Path(os.environ.get("SIM_GPU_USAGE_DIR", "/run/sim-gpu/used"))
        extra = int((usage_dir / str(gpu["index"])).read_text().strip() or 0)
    except (OSError, ValueError):
        pass
    return int(gpu.get("memory_used_mib", 0)) + extra


def mem_get_info(device=None):
    g = _gpu(device)
    total = int(g["memory_total_mib"])
    return (total - _used_mib(g)) << 20, total << 20


def get_arch_list():
    if not is_available():
        return []
    return list(_ARCH_LIST)


def _launch_check(index):
    major, minor = get_device_capability(index)
    if f"sm_{major}{minor}" not in _ARCH_LIST:
        raise RuntimeError(
            "CUDA error: no kernel image is available for execution on the device\n"
            "CUDA kernel errors might be asynchronously reported at some other API call, so the stacktrace below "
            "might be incorrect."
        )


def _capability_warning():
    """Real torch warns at first CUDA use when a GPU's arch is not in the wheel's arch list."""
    for i in range(device_count()):
        major, minor = get_device_capability(i)
        if f"sm_{major}{minor}" not in _ARCH_LIST:
            warnings.warn(
                f"\n{get_device_name(i)} with CUDA capability sm_{major}{minor} is not compatible with the current "
                f"PyTorch installation.\nThe current PyTorch install supports CUDA capabilities "
                f"{' '.join(_ARCH_LIST)}.",
                UserWarning,
                stacklevel=2,
            )


def init():
    if not is_available():
        raise RuntimeError("No CUDA GPUs are available")
    _capability_warning()


def synchronize(device=None):
    _launch_check(0 if device is None else int(getattr(device, "index", device) or 0))


def current_device():
    _gpu(0)
    return 0


def set_device(device):
    _gpu(device)
