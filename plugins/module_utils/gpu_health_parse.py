# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Readers for what a GPU host prints about its health: ``nvidia-smi -q``, ``nvidia-smi --query-gpu=... --format=csv``,
``lspci -vv`` and the kernel log's ``NVRM: Xid`` lines.

Every reader returns plain dicts with the same keys (``GPU_KEYS``); a value a source does not give, or that
nvidia-smi answers with ``N/A`` / ``[N/A]`` / ``[Not Supported]``, is None. The verdict lives in ``gpu_health``.
"""

from __future__ import annotations

__metaclass__ = type

import csv
import io
import re

GPU_KEYS = (
    "source", "id", "name", "persistence_mode", "performance_state", "pcie_gen_max", "pcie_gen_current",
    "pcie_width_max", "pcie_width_current", "pcie_downgraded", "ecc_uncorrectable_volatile",
    "ecc_uncorrectable_aggregate", "retired_pages_dbe", "retired_pages_pending", "remapped_rows_pending",
    "remapping_failure", "reset_required", "clock_reasons_active", "temperature_c", "slowdown_temperature_c",
    "slowdown_margin_c", "fabric_state", "fabric_status", "fabric_health",
)  # fmt: skip
MISSING = {"", "n/a", "[n/a]", "[not supported]", "not supported", "[unknown error]", "unknown error", "none"}
# The clock reasons nvidia-smi names in -q (Clocks Event Reasons since 535, Clocks Throttle Reasons before) and the
# --query-gpu field suffixes (clocks_event_reasons.X / clocks_throttle_reasons.X).
REASONS_Q = {
    "idle": "gpu_idle", "applications clocks setting": "applications_clocks_setting", "sw power cap": "sw_power_cap",
    "hw slowdown": "hw_slowdown", "hw thermal slowdown": "hw_thermal_slowdown",
    "hw power brake slowdown": "hw_power_brake_slowdown", "sync boost": "sync_boost",
    "sw thermal slowdown": "sw_thermal_slowdown", "display clock setting": "display_clock_setting",
}  # fmt: skip
# lspci prints the link speed in GT/s; PCIe generations 1-6 run at these rates.
GTS_TO_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
XID_RE = re.compile(r"NVRM: Xid \((PCI:[0-9A-Fa-f:.]+)\): (\d+),\s*(.*)")
FALLEN_RE = re.compile(r"NVRM: (?:The NVIDIA )?GPU (?:at )?(?:PCI:)?([0-9A-Fa-f:.]+)\b.*fallen off the bus")
FALLEN_CONT_RE = re.compile(r"NVRM: The NVIDIA GPU ([0-9A-Fa-f:.]+)")


class HealthParseError(ValueError):
    """Output that is not what the reader expects; the message says what was expected and what was found."""


def blank():
    return dict.fromkeys(GPU_KEYS)


def _value(raw):
    v = (raw or "").strip()
    return None if v.lower() in MISSING else v


def _int(raw):
    v = _value(raw)
    if v is None:
        return None
    m = re.match(r"^-?\d+", v.rstrip("x").strip())
    return int(m.group(0)) if m else None


def _yes(raw):
    v = _value(raw)
    return None if v is None else v.lower() in ("yes", "active", "enabled", "true")


def q_tree(text):
    """``nvidia-smi -q`` as ``[(bus_id, {path_tuple: value})]``, one entry per ``GPU <bus id>`` block."""
    gpus, current, stack = [], None, []
    if not re.search(r"^GPU [0-9A-Fa-f]{4,8}:", text, re.M) and re.search(r"^\s*[A-Z][\w .()/-]* +: ", text, re.M):
        # An excerpt (``nvidia-smi -q | grep -A8 ...``) without its ``GPU <bus id>`` line: one GPU of unknown id.
        current = {}
        gpus.append((None, current))
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith("="):
            continue
        m = re.match(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])\s*$", line)
        if m:
            current = {}
            gpus.append((m.group(1), current))
            stack = []
            continue
        if current is None:
            continue
        indent = len(line) - len(line.lstrip())
        key, sep, val = line.strip().partition(":")
        key = key.strip()
        while stack and stack[-1][0] >= indent:
            stack.pop()
        path = (*(k for _, k in stack), key)
        if sep:
            current[path] = val.strip()
        stack.append((indent, key))
    return gpus


def _find(tree, *suffixes):
    """The value of the first path ending in one of ``suffixes`` (each a tuple of keys, compared without case)."""
    for suffix in suffixes:
        want = tuple(s.lower() for s in suffix)
        for path, val in tree.items():
            if tuple(p.lower() for p in path[-len(want) :]) == want:
                return val
    return None


def _sum_uncorrectable(tree, scope):
    """Uncorrectable ECC errors under ``ECC Errors > scope``: DRAM/SRAM Uncorrectable (Hopper and later) or the
    Double Bit total (older drivers). None when every counter is N/A."""
    total, seen = 0, False
    for path, val in tree.items():
        low = [p.lower() for p in path]
        if "ecc errors" not in low or scope not in low:
            continue
        leaf = low[-1]
        if ("uncorrectable" in leaf and "threshold" not in leaf) or (
            len(low) >= 2 and low[-2] == "double bit" and leaf == "total"
        ):
            n = _int(val)
            if n is not None:
                total, seen = total + n, True
    return total if seen else None


def parse_smi_q(text):
    """GPU dicts from the text of ``nvidia-smi -q`` (all sections, or the ones ``-d`` chose)."""
    out = []
    blocks = q_tree(text)
    if not blocks:
        raise HealthParseError(
            "expected nvidia-smi -q output with 'GPU <bus id>' sections, found "
            + (repr(text.strip().splitlines()[0][:80]) if text.strip() else "nothing")
            + "; run 'nvidia-smi -q' by hand to see what the driver says"
        )
    for bus, tree in blocks:
        g = blank()
        g.update(source="nvidia-smi -q", id=bus, name=_value(_find(tree, ("Product Name",))))
        g["persistence_mode"] = _value(_find(tree, ("Persistence Mode",)))
        g["performance_state"] = _value(_find(tree, ("Performance State",)))
        g["pcie_gen_max"] = _int(_find(tree, ("PCIe Generation", "Max")))
        g["pcie_gen_current"] = _int(_find(tree, ("PCIe Generation", "Current")))
        g["pcie_width_max"] = _int(_find(tree, ("Link Width", "Max")))
        g["pcie_width_current"] = _int(_find(tree, ("Link Width", "Current")))
        g["ecc_uncorrectable_volatile"] = _sum_uncorrectable(tree, "volatile")
        g["ecc_uncorrectable_aggregate"] = _sum_uncorrectable(tree, "aggregate")
        g["retired_pages_dbe"] = _int(_find(tree, ("Retired Pages", "Double Bit ECC")))
        g["retired_pages_pending"] = _yes(_find(tree, ("Retired Pages", "Pending Page Blacklist")))
        g["remapped_rows_pending"] = _yes(_find(tree, ("Remapped Rows", "Pending")))
        g["remapping_failure"] = _yes(_find(tree, ("Remapped Rows", "Remapping Failure Occurred")))
        g["reset_required"] = _yes(_find(tree, ("GPU Reset Status", "Reset Required")))
        active = []
        for path, val in tree.items():
            low = [p.lower() for p in path]
            if any(s in ("clocks event reasons", "clocks throttle reasons") for s in low[:-1]):
                name = REASONS_Q.get(low[-1])
                if name and _yes(val):
                    active.append(name)
        has_reasons = any(
            s.lower() in ("clocks event reasons", "clocks throttle reasons") for path in tree for s in path[:-1]
        )
        g["clock_reasons_active"] = sorted(active) if has_reasons else None
        g["temperature_c"] = _int(_find(tree, ("Temperature", "GPU Current Temp")))
        g["slowdown_temperature_c"] = _int(_find(tree, ("Temperature", "GPU Slowdown Temp")))
        tlimit = _int(_find(tree, ("Temperature", "GPU T.Limit Temp")))
        slow_tlimit = _int(_find(tree, ("Temperature", "GPU Slowdown T.Limit Temp")))
        if tlimit is not None and slow_tlimit is not None:
            g["slowdown_margin_c"] = tlimit - slow_tlimit
        g["fabric_state"] = _value(_find(tree, ("Fabric", "State")))
        g["fabric_status"] = _value(_find(tree, ("Fabric", "Status")))
        g["fabric_health"] = _value(_find(tree, ("Fabric", "Health", "Summary")))
        out.append(g)
    return out


CSV_FIELDS = {
    "pci.bus_id": "id", "gpu_bus_id": "id", "name": "name", "gpu_name": "name",
    "persistence_mode": "persistence_mode", "pstate": "performance_state",
    "pcie.link.gen.current": "pcie_gen_current", "pcie.link.gen.gpucurrent": "pcie_gen_current",
    "pcie.link.gen.max": "pcie_gen_max", "pcie.link.gen.gpumax": "pcie_gen_max",
    "pcie.link.width.current": "pcie_width_current", "pcie.link.width.max": "pcie_width_max",
    "ecc.errors.uncorrected.volatile.total": "ecc_uncorrectable_volatile",
    "ecc.errors.uncorrected.aggregate.total": "ecc_uncorrectable_aggregate",
    "retired_pages.double_bit.count": "retired_pages_dbe", "retired_pages.pending": "retired_pages_pending",
    "remapped_rows.pending": "remapped_rows_pending", "remapped_rows.failure": "remapping_failure",
    "temperature.gpu": "temperature_c", "fabric.state": "fabric_state", "fabric.status": "fabric_status",
}  # fmt: skip
CSV_INTS = {"pcie_gen_current", "pcie_gen_max", "pcie_width_current", "pcie_width_max", "temperature_c",
            "ecc_uncorrectable_volatile", "ecc_uncorrectable_aggregate", "retired_pages_dbe"}  # fmt: skip
CSV_BOOLS = {"retired_pages_pending", "remapped_rows_pending", "remapping_failure"}


def parse_query_csv(text):
    """GPU dicts from ``nvidia-smi --query-gpu=... --format=csv`` output; the header row names the fields."""
    rows = [r for r in csv.reader(io.StringIO(text.strip()), skipinitialspace=True) if r]
    if not rows:
        raise HealthParseError("expected nvidia-smi --query-gpu CSV with a header row, found nothing")
    header = [re.sub(r"\s*\[.*\]$", "", h.strip()) for h in rows[0]]
    known = [h for h in header if h in CSV_FIELDS or h.startswith(("clocks_event_reasons.", "clocks_throttle_"))]
    if not known:
        raise HealthParseError(
            f"expected a --query-gpu header naming fields such as pcie.link.gen.current, found {rows[0][:4]}; "
            "query with --format=csv (not noheader) so the fields can be told apart"
        )
    out = []
    for row in rows[1:]:
        if len(row) != len(header):
            raise HealthParseError(f"expected {len(header)} fields per row as in the header, found {len(row)}: {row}")
        g = blank()
        g["source"] = "nvidia-smi --query-gpu"
        reasons = None
        for name, cell in zip(header, row, strict=True):
            raw = cell.strip()
            if name.startswith(("clocks_event_reasons.", "clocks_throttle_reasons.")):
                reason = name.split(".", 1)[1]
                if reason in ("supported", "active"):
                    continue
                reasons = reasons if reasons is not None else []
                if _yes(raw):
                    reasons.append(reason)
                continue
            key = CSV_FIELDS.get(name)
            if key is None:
                continue
            if key in CSV_INTS:
                g[key] = _int(raw.split()[0] if raw else raw)
            elif key in CSV_BOOLS:
                g[key] = _yes(raw)
            else:
                g[key] = _value(raw)
        g["clock_reasons_active"] = sorted(reasons) if reasons is not None else None
        out.append(g)
    return out


def _link(line):
    m = re.search(r"Speed ([\d.]+)GT/s(?: \((ok|downgraded)\))?, Width x(\d+)(?: \((ok|downgraded)\))?", line)
    if not m:
        return None
    downgraded = "downgraded" in (m.group(2), m.group(4))
    return GTS_TO_GEN.get(float(m.group(1))), int(m.group(3)), downgraded


def parse_lspci(text):
    """GPU dicts (PCIe link only) from ``lspci -vv``: the LnkCap and LnkSta lines of each NVIDIA VGA/3D device."""
    out, dev = [], None
    for line in text.splitlines():
        head = re.match(r"^([0-9A-Fa-f]{4}:)?([0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]) (.*)$", line)
        if head:
            dev = None
            desc = head.group(3)
            if "NVIDIA" in desc and re.search(r"VGA compatible controller|3D controller", desc):
                dev = blank()
                dev.update(source="lspci -vv", id=(head.group(1) or "") + head.group(2), name=desc.split(": ", 1)[-1])
                out.append(dev)
            continue
        if dev is None:
            continue
        s = line.strip()
        if s.startswith("LnkCap:") and dev["pcie_gen_max"] is None:
            link = _link(s)
            if link:
                dev["pcie_gen_max"], dev["pcie_width_max"], _ = link
        elif s.startswith("LnkSta:") and dev["pcie_gen_current"] is None:
            link = _link(s)
            if link:
                dev["pcie_gen_current"], dev["pcie_width_current"], dev["pcie_downgraded"] = link
    if not out and re.search(r"^\s*LnkSta:", text, re.M):
        # An excerpt (``lspci -vv | grep Lnk``) without the device line: one device of unknown address.
        dev = blank()
        dev.update(source="lspci -vv", id=None)
        for line in text.splitlines():
            s = line.strip()
            link = _link(s)
            if s.startswith("LnkCap:") and link and dev["pcie_gen_max"] is None:
                dev["pcie_gen_max"], dev["pcie_width_max"], _ = link
            elif s.startswith("LnkSta:") and link and dev["pcie_gen_current"] is None:
                dev["pcie_gen_current"], dev["pcie_width_current"], dev["pcie_downgraded"] = link
        out.append(dev)
    if not out:
        raise HealthParseError(
            "expected lspci -vv output with an NVIDIA VGA compatible or 3D controller, found none; "
            "run 'lspci -vv -d 10de:' as root to list the NVIDIA devices"
        )
    return out


def parse_kernel_log(text):
    """Xid events from kernel log text (dmesg, journalctl -k): ``[{pci, xid, detail, line}]``. A "fallen off the
    bus" message without an Xid number is reported as Xid 79, the number NVIDIA gives that failure."""
    events, lines = [], text.splitlines()
    for i, line in enumerate(lines):
        m = XID_RE.search(line)
        if m:
            events.append({"pci": m.group(1), "xid": int(m.group(2)), "detail": m.group(3).strip(), "line": line})
            continue
        if "fallen off the bus" in line and "Xid" not in line:
            m = FALLEN_RE.search(line)
            pci = m.group(1) if m else None
            for back in lines[max(0, i - 3) : i][::-1]:
                c = FALLEN_CONT_RE.search(back)
                if pci is None and c:
                    pci = c.group(1)
            events.append({"pci": pci, "xid": 79, "detail": "GPU has fallen off the bus", "line": line})
    return events
