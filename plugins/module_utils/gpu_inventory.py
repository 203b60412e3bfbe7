# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Parse what nvidia-smi reports about the GPUs of a host, and name their architecture.

Pure functions, no Ansible imports: used by the gpu_facts module and by unit tests with captured outputs.
"""

from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.module_utils import gpu_arch

# The fields gpu_facts asks nvidia-smi for, in this order (one CSV row per GPU).
QUERY_FIELDS = (
    "index",
    "name",
    "uuid",
    "memory.total",
    "memory.used",
    "memory.free",
    "compute_cap",
    "driver_version",
    "pci.bus_id",
)

# nvidia-smi exit codes and texts that mean "no usable driver" rather than "something broke".
NO_DRIVER_MARKERS = (
    "couldn't communicate with the NVIDIA driver",
    "NVIDIA-SMI has failed",
)
NO_DEVICE_MARKER = "No devices were found"
MISMATCH_MARKER = "Driver/library version mismatch"


class GpuQueryError(ValueError):
    """nvidia-smi answered with something this parser cannot read."""


def sm_string(compute_cap: str) -> str:
    """'12.0' -> 'sm_120', '9.0' -> 'sm_90', '8.6' -> 'sm_86' (gpu_arch.sm, with this parser's error)."""
    try:
        return gpu_arch.sm(compute_cap)
    except gpu_arch.ArchError as exc:
        raise GpuQueryError(f"compute capability {compute_cap!r} is not of the form MAJOR.MINOR") from exc


def parse_query_csv(text: str) -> list[dict]:
    """Parse `nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits` output."""
    gpus = []
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        cols = [c.strip() for c in line.split(",")]
        if len(cols) != len(QUERY_FIELDS):
            raise GpuQueryError(
                f"line {lineno} of nvidia-smi output has {len(cols)} fields, expected {len(QUERY_FIELDS)}: {line!r}"
            )
        row = dict(zip(QUERY_FIELDS, cols, strict=True))
        try:
            gpu = {
                "index": int(row["index"]),
                "name": row["name"],
                "uuid": row["uuid"],
                "memory_total_mib": int(row["memory.total"]),
                "memory_used_mib": int(row["memory.used"]),
                "memory_free_mib": int(row["memory.free"]),
                "compute_capability": row["compute_cap"],
                "sm": sm_string(row["compute_cap"]),
                "driver_version": row["driver_version"],
                "pci_bus_id": row["pci.bus_id"],
            }
        except ValueError as exc:
            raise GpuQueryError(f"line {lineno} of nvidia-smi output is not numeric where expected: {line!r}") from exc
        gpu["architecture"] = gpu_arch.family(gpu["compute_capability"])
        gpus.append(gpu)
    return gpus


def classify_failure(rc: int, output: str) -> str:
    """Name the state behind a failed nvidia-smi run: no_gpu, no_driver, driver_mismatch, or error."""
    if MISMATCH_MARKER in output:
        return "driver_mismatch"
    if rc == 6 or NO_DEVICE_MARKER in output:
        return "no_gpu"
    if rc == 9 or any(marker in output for marker in NO_DRIVER_MARKERS):
        return "no_driver"
    return "error"


def summarize(gpus: list[dict]) -> dict:
    """Host-level facts derived from the per-GPU list."""
    if not gpus:
        return {
            "count": 0,
            "sm_list": [],
            "arch_list": [],
            "min_memory_total_mib": None,
            "driver_version": None,
            "driver_branch": None,
            "names": [],
            "homogeneous": True,
        }
    sms = sorted({g["sm"] for g in gpus}, key=lambda s: int(s[3:]))
    driver = gpus[0]["driver_version"]
    return {
        "count": len(gpus),
        "sm_list": sms,
        "arch_list": [s[3:] for s in sms],
        "min_memory_total_mib": min(g["memory_total_mib"] for g in gpus),
        "driver_version": driver,
        "driver_branch": int(driver.split(".")[0]) if driver and driver.split(".")[0].isdigit() else None,
        "names": sorted({g["name"] for g in gpus}),
        "homogeneous": len({(g["name"], g["memory_total_mib"]) for g in gpus}) == 1,
    }


# NVIDIA PCI device ids of data-centre and workstation GPUs this collection is used with, for hosts whose driver
# is not installed yet (nvidia-smi cannot answer, but the compatibility gate must know the architecture).
NVIDIA_VENDOR_ID = "0x10de"
PCI_DISPLAY_CLASSES = ("0x0300", "0x0302")  # VGA-compatible and 3D controllers
PCI_DEVICE_TABLE = {
    "0x20b0": ("NVIDIA A100-SXM4-40GB", "8.0"),
    "0x20b2": ("NVIDIA A100-SXM4-80GB", "8.0"),
    "0x20b5": ("NVIDIA A100 80GB PCIe", "8.0"),
    "0x20f1": ("NVIDIA A100-PCIE-40GB", "8.0"),
    "0x2684": ("NVIDIA GeForce RTX 4090", "8.9"),
    "0x26b5": ("NVIDIA L40", "8.9"),
    "0x26b9": ("NVIDIA L40S", "8.9"),
    "0x2330": ("NVIDIA H100 80GB HBM3", "9.0"),
    "0x2331": ("NVIDIA H100 PCIe", "9.0"),
    "0x2335": ("NVIDIA H200", "9.0"),
    "0x2901": ("NVIDIA B200", "10.0"),
    "0x2b85": ("NVIDIA GeForce RTX 5090", "12.0"),
    "0x2bb1": ("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0"),
    "0x2bb5": ("NVIDIA RTX PRO 6000 Blackwell Server Edition", "12.0"),
}


def read_pci_gpus(root: str) -> list[dict]:
    """NVIDIA display/3D devices under a sysfs PCI devices directory (vendor, device and class files)."""
    import os

    gpus = []
    try:
        entries = sorted(os.listdir(root))
    except OSError:
        return gpus

    def read(dev, name):
        try:
            with open(os.path.join(root, dev, name)) as f:
                return f.read().strip().lower()
        except OSError:
            return ""

    for dev in entries:
        if read(dev, "vendor") != NVIDIA_VENDOR_ID or not read(dev, "class").startswith(PCI_DISPLAY_CLASSES):
            continue
        device_id = read(dev, "device")
        name, cap = PCI_DEVICE_TABLE.get(device_id, (None, None))
        gpus.append(
            {
                "pci_bus_id": dev,
                "device_id": device_id,
                "name": name,
                "compute_capability": cap,
                "sm": sm_string(cap) if cap else None,
                "architecture": gpu_arch.family(cap) if cap else "unknown",
            }
        )
    return gpus
