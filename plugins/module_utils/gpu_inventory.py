# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Read what nvidia-smi and the PCI bus say about the GPUs of a host.

Pure functions, no Ansible imports: used by the gpu_facts module and by unit tests with nvidia-smi answers collected
from public bug reports (tests/unit/fixtures/nvidia_smi/, each with its source). Architectures are named by
gpu_arch, the one home of that knowledge.
"""

from __future__ import annotations

import os
import re

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
    "mig.mode.current",
)
MEMORY_FIELDS = ("memory.total", "memory.used", "memory.free")

# What nvidia-smi prints in a column it cannot fill, and what that means for a reader.
UNAVAILABLE = {
    "[N/A]": "not available on this GPU (unified-memory GPUs such as GB10 and GH200 share system memory)",
    "N/A": "not available on this GPU",
    "[Not Supported]": "not supported by this GPU or driver",
    "[Unknown Error]": "unknown error while reading it (the GPU may be failing)",
    "[Insufficient Permissions]": "not readable without root",
    "[GPU requires reset]": "the GPU requires a reset",
    "[GPU is lost]": "the GPU is lost (fallen off the bus)",
}

# nvidia-smi texts (stdout+stderr) that name the state behind a failed run. Sources in tests/unit/test_gpu_facts.py.
NO_DRIVER_MARKERS = (
    "couldn't communicate with the NVIDIA driver",
    "NVIDIA-SMI has failed",
    "couldn't find libnvidia-ml.so",
)
NO_DEVICE_MARKER = "No devices were found"
UNSUPPORTED_MARKER = "No supported GPUs were found"
MISMATCH_MARKER = "Driver/library version mismatch"
LOST_MARKERS = ("Unable to determine the device handle", "GPU is lost", "fallen off the bus")

FAILURE_REASONS = {
    "no_driver": "No NVIDIA driver answers on this host (nvidia-smi is missing, cannot load libnvidia-ml.so or "
    "cannot reach the driver).",
    "no_gpu": "The NVIDIA driver runs but sees no GPU.",
    "unsupported_gpu": 'The NVIDIA driver runs but supports none of the GPUs ("No supported GPUs were found"): the '
    "GPUs are bound to another driver (vfio-pci passthrough) or need another driver branch.",
    "driver_mismatch": "The loaded NVIDIA kernel module and the installed driver libraries differ "
    "(Driver/library version mismatch): reboot the host to load the installed driver.",
    "gpu_lost": "A GPU does not answer (nvidia-smi cannot get its handle): check `dmesg` for Xid 79 (fallen off the "
    "bus), then reset or power-cycle the GPU.",
}


class GpuQueryError(ValueError):
    """nvidia-smi answered with something this parser cannot read."""


def sm_string(compute_cap: str) -> str:
    """'12.0' -> 'sm_120', '9.0' -> 'sm_90', '8.6' -> 'sm_86' (gpu_arch.sm, with this parser's error)."""
    try:
        return gpu_arch.sm(compute_cap)
    except gpu_arch.ArchError as exc:
        raise GpuQueryError(f"compute capability {compute_cap!r} is not of the form MAJOR.MINOR") from exc


def _cell(value):
    """(value, None) for a real value, (None, reason) for one of nvidia-smi's placeholders."""
    if value in UNAVAILABLE:
        return None, f"{value}: {UNAVAILABLE[value]}"
    return value, None


def _mib(value, field, lineno, line):
    v, why = _cell(value)
    if v is None:
        return None, why
    try:
        return int(v), None
    except ValueError:
        msg = f"line {lineno} of nvidia-smi output has {field}={value!r}, not a number: {line!r}"
        raise GpuQueryError(msg) from None


def parse_query_csv(text: str) -> list[dict]:
    """Parse `nvidia-smi --query-gpu=<QUERY_FIELDS> --format=csv,noheader,nounits` output.

    A placeholder such as [N/A] in any column never fails: the value becomes null and ``notes`` says why (GB10's
    memory columns are always [N/A]). Only a line that is not the answer to this query is refused.
    """
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
        if not row["index"].isdigit():
            raise GpuQueryError(f"line {lineno} of nvidia-smi output has no GPU index: {line!r}")
        notes = {}
        mem = {}
        for field in MEMORY_FIELDS:
            mem[field], why = _mib(row[field], field, lineno, line)
            if why:
                notes[field] = why
        cap, why = _cell(row["compute_cap"])
        cc = None
        if cap is not None:
            try:
                cc = gpu_arch.parse(cap)
            except gpu_arch.ArchError:
                why = f"{cap!r} is not a compute capability"
        if cc is None:
            cc = gpu_arch.chip_arch(row["name"])  # "NVIDIA GB10" names its chip
            notes["compute_cap"] = why + ("; taken from the chip in the name" if cc else "")
        driver, why = _cell(row["driver_version"])
        if why:
            notes["driver_version"] = why
        mig, _ = _cell(row["mig.mode.current"])
        gpu = {
            "index": int(row["index"]),
            "name": row["name"],
            "uuid": row["uuid"],
            "memory_total_mib": mem["memory.total"],
            "memory_used_mib": mem["memory.used"],
            "memory_free_mib": mem["memory.free"],
            "unified_memory": mem["memory.total"] is None and row["memory.total"] in ("[N/A]", "[Not Supported]"),
            "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
            "sm": gpu_arch.sm(cc) if cc else None,
            "architecture": gpu_arch.family(cc) if cc else "unknown",
            "driver_version": driver,
            "pci_bus_id": row["pci.bus_id"],
            "mig_mode": mig,
            "notes": notes,
        }
        gpus.append(gpu)
    return gpus


def classify_failure(rc: int, output: str) -> str:
    """Name the state behind a failed nvidia-smi run (a key of FAILURE_REASONS, or 'error')."""
    if MISMATCH_MARKER in output:
        return "driver_mismatch"
    if UNSUPPORTED_MARKER in output:
        return "unsupported_gpu"
    if rc == 6 or NO_DEVICE_MARKER in output:
        return "no_gpu"
    if rc == 9 or any(marker in output for marker in NO_DRIVER_MARKERS):
        return "no_driver"
    if any(marker in output for marker in LOST_MARKERS):
        return "gpu_lost"
    return "error"


def _sm_key(sm):
    return gpu_arch.number(sm)


def summarize(gpus: list[dict]) -> dict:
    """Host-level facts derived from the per-GPU list."""
    sms = sorted({g["sm"] for g in gpus if g.get("sm")}, key=_sm_key)
    totals = [g["memory_total_mib"] for g in gpus if g.get("memory_total_mib") is not None]
    drivers = [g["driver_version"] for g in gpus if g.get("driver_version")]
    driver = drivers[0] if drivers else None
    head = driver.split(".")[0] if driver else ""
    return {
        "count": len(gpus),
        "sm_list": sms,
        "arch_list": [s[3:] for s in sms],
        "min_memory_total_mib": min(totals) if totals else None,
        "unified_memory": any(g.get("unified_memory") for g in gpus),
        "driver_version": driver,
        "driver_branch": int(head) if head.isdigit() else None,
        "names": sorted({g["name"] for g in gpus}),
        "homogeneous": len({(g["name"], g.get("memory_total_mib")) for g in gpus}) <= 1,
    }


# --- The PCI bus, before a driver exists ------------------------------------------------------------------------

NVIDIA_VENDOR_ID = "0x10de"
PCI_DISPLAY_CLASSES = ("0x0300", "0x0302")  # VGA-compatible and 3D controllers
# Where distributions install the PCI id database: Debian/Ubuntu's pci.ids package, hwdata on Fedora/RHEL/SUSE.
PCI_IDS_PATHS = ("/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids", "/usr/share/pci.ids")
_PCI_DEVICE = re.compile(r"^\t([0-9a-fA-F]{4})  (.+)$")


def find_pci_ids(paths=PCI_IDS_PATHS):
    """The first readable PCI id database among ``paths``, or None."""
    for path in paths:
        if path and os.path.isfile(path) and os.access(path, os.R_OK):
            return path
    return None


def read_pci_ids(path, vendor="10de"):
    """{'0x2bb1': 'GB202GL [RTX PRO 6000 Blackwell Workstation Edition]', ...} for one vendor of a pci.ids file.

    Reads only up to the end of that vendor's block (the file is 1.5 MB; NVIDIA's block is about 2000 lines).
    """
    devices = {}
    head = vendor.lower().removeprefix("0x") + "  "
    inside = False
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            if not inside:
                inside = line.startswith(head)
                continue
            if line.startswith("\t\t") or line.startswith("#") or not line.strip():
                continue  # subsystems, comments
            m = _PCI_DEVICE.match(line.rstrip("\n"))
            if not m:
                break  # the next vendor
            devices["0x" + m.group(1).lower()] = m.group(2).strip()
    return devices


def product_name(pci_name):
    """'GB202GL [RTX PRO 6000 Blackwell Workstation Edition]' -> 'NVIDIA RTX PRO 6000 Blackwell Workstation Edition';
    'GB110' -> 'NVIDIA GB110' (nvidia-smi's spelling: the vendor, then the product)."""
    m = re.search(r"\[([^\]]+)\]", pci_name)
    return "NVIDIA " + (m.group(1) if m else pci_name.strip())


def read_pci_gpus(root: str, pci_ids=None) -> list[dict]:
    """NVIDIA display/3D devices under a sysfs PCI devices directory, named through the PCI id database.

    ``pci_ids`` is the parsed database (read_pci_ids) or None. The architecture comes from the chip family in the
    database's name (gpu_arch.chip_arch), so any board on a known chip resolves without a per-device table.
    """
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
        pci_name = (pci_ids or {}).get(device_id)
        cc = gpu_arch.chip_arch(pci_name)
        gpus.append(
            {
                "pci_bus_id": dev,
                "device_id": device_id,
                "pci_name": pci_name,
                "chip": gpu_arch.chip_of(pci_name),
                "name": product_name(pci_name) if pci_name else None,
                "compute_capability": f"{cc[0]}.{cc[1]}" if cc else None,
                "sm": gpu_arch.sm(cc) if cc else None,
                "architecture": gpu_arch.family(cc) if cc else "unknown",
            }
        )
    return gpus
