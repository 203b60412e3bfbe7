# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""A GPU health verdict from what ``gpu_health_parse`` read: one check per GPU and topic, each with a severity
(``critical``, ``warning``, ``ok``) and one sentence that says what was expected, what was found and what to do.

The evidence behind each rule is listed in docs/gpu-health.md. A PCIe link below its maximum is only a fault when
the reading was taken under load: GPUs lower the link generation (and some the width) when idle to save power
(nvidia-smi's own field help: "These may be reduced when the GPU is not in use").
"""

from __future__ import annotations

__metaclass__ = type

SEVERITIES = ("ok", "warning", "critical")
# Xid numbers (NVIDIA's Xid catalog) that say the hardware or its memory failed; the GPU needs a reset, a reboot
# or service before it can be trusted again.
XID_CRITICAL = {
    48: "an uncorrectable double-bit ECC error (DBE); reset the GPU (or reboot) and check its remapped rows",
    64: "a row-remapping or page-retirement failure; the memory self-repair is exhausted, drain the host and "
    "have the GPU serviced (RMA)",
    74: "an NVLink error; check the NVLink connections and run the field diagnostics",
    79: "the GPU fell off the bus; check its power cabling, seating and riser, then cold-reboot the host",
    95: "an uncontained ECC error; reset the GPU (or reboot) before running anything on it",
    119: "a GSP firmware RPC timeout; reset the GPU (or reboot) and update the driver if it recurs",
}
XID_WARNING = {
    63: "an ECC page retirement or row remap was recorded; it takes effect at the next GPU reset, reset the GPU "
    "when it is drained",
    94: "a contained ECC error (the application that touched the memory was stopped); restart that application and "
    "reset the GPU when it is drained",
}
# Application-level Xids: the program on the GPU faulted, the hardware did not (NVIDIA's catalog lists them under
# user application errors).
XID_APPLICATION = {13: "graphics engine exception", 31: "GPU memory page fault", 43: "GPU stopped processing",
                   45: "preemptive cleanup after an earlier error"}  # fmt: skip
HW_SLOWDOWN = ("hw_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown")
SW_SLOWDOWN = ("sw_thermal_slowdown", "sw_power_cap")


def check(name, gpu, severity, message):
    return {"name": name, "gpu": gpu, "severity": severity, "message": message}


def _label(gpu):
    return f"GPU {gpu.get('id') or '?'}" + (f" ({gpu['name']})" if gpu.get("name") else "")


def _persistence(g):
    pm = g.get("persistence_mode")
    if pm is None:
        return None
    if pm.lower() == "enabled":
        return check("persistence_mode", g["id"], "ok", f"{_label(g)}: persistence mode is Enabled.")
    return check(
        "persistence_mode", g["id"], "warning",
        f"{_label(g)}: expected persistence mode Enabled, found {pm}; without it the driver tears the GPU down "
        "between programs (slow starts, lost state), enable nvidia-persistenced (systemctl enable --now "
        "nvidia-persistenced) or run 'nvidia-smi -pm 1'.",
    )  # fmt: skip


def _pcie(g, under_load):
    gmax, gcur, wmax, wcur = (g.get(k) for k in ("pcie_gen_max", "pcie_gen_current", "pcie_width_max",
                                                 "pcie_width_current"))  # fmt: skip
    if gcur is None and wcur is None:
        return None
    found = f"Gen{gcur} x{wcur}"
    expected = f"Gen{gmax} x{wmax}"
    low_gen = gmax is not None and gcur is not None and gcur < gmax
    low_width = wmax is not None and wcur is not None and wcur < wmax
    if not (low_gen or low_width or (g.get("pcie_downgraded") and gmax is None)):
        return check("pcie_link", g["id"], "ok", f"{_label(g)}: PCIe link at {found}, its maximum.")
    if not under_load:
        return check(
            "pcie_link", g["id"], "ok",
            f"{_label(g)}: PCIe link at {found} below its maximum {expected}, read while idle; GPUs lower the link "
            "when idle, read it again under load (under_load=true) for a verdict.",
        )  # fmt: skip
    return check(
        "pcie_link", g["id"], "critical",
        f"{_label(g)}: expected the PCIe link at {expected} under load, found {found}; the link trained down, "
        "reseat the GPU and its riser or cable, check the slot's BIOS link setting, and read it again under load.",
    )  # fmt: skip


def _ecc(g):
    vol, agg = g.get("ecc_uncorrectable_volatile"), g.get("ecc_uncorrectable_aggregate")
    if vol is None and agg is None:
        return None
    if vol:
        return check(
            "ecc_uncorrectable", g["id"], "critical",
            f"{_label(g)}: expected 0 uncorrectable ECC errors since the driver loaded, found {vol}; drain the GPU, "
            "reset it (or reboot) so pending remaps take effect, and have it serviced if the count comes back.",
        )  # fmt: skip
    if agg:
        return check(
            "ecc_uncorrectable", g["id"], "warning",
            f"{_label(g)}: no uncorrectable ECC errors since the driver loaded, but {agg} over the GPU's lifetime; "
            "watch the count and the remapped rows, service the GPU if it grows.",
        )  # fmt: skip
    return check("ecc_uncorrectable", g["id"], "ok", f"{_label(g)}: no uncorrectable ECC errors.")


def _memory_repair(g):
    out = []
    if g.get("remapping_failure"):
        out.append(check(
            "remapped_rows", g["id"], "critical",
            f"{_label(g)}: expected no row-remapping failure, found 'Remapping Failure Occurred: Yes'; the memory "
            "cannot repair itself any more, drain the host and have the GPU serviced (RMA).",
        ))  # fmt: skip
    elif g.get("remapped_rows_pending"):
        out.append(check(
            "remapped_rows", g["id"], "critical",
            f"{_label(g)}: expected no pending row remap, found 'Pending: Yes'; the remap only takes effect after "
            "a GPU reset, drain the GPU and reset it ('nvidia-smi -r -i <index>') or reboot the host.",
        ))  # fmt: skip
    elif g.get("remapped_rows_pending") is False:
        out.append(check("remapped_rows", g["id"], "ok", f"{_label(g)}: no pending row remap, no remap failure."))
    if g.get("retired_pages_pending"):
        out.append(check(
            "retired_pages", g["id"], "critical",
            f"{_label(g)}: expected no page pending retirement, found 'Pending Page Blacklist: Yes'; reset the GPU "
            "or reboot so the page is retired before it is used again.",
        ))  # fmt: skip
    elif g.get("retired_pages_dbe"):
        out.append(check(
            "retired_pages", g["id"], "warning",
            f"{_label(g)}: {g['retired_pages_dbe']} page(s) retired for double-bit ECC errors; the GPU still runs, "
            "service it when the count keeps growing.",
        ))  # fmt: skip
    if g.get("reset_required") is False:
        out.append(check("reset_required", g["id"], "ok", f"{_label(g)}: no GPU reset required."))
    if g.get("reset_required"):
        out.append(check(
            "reset_required", g["id"], "critical",
            f"{_label(g)}: expected 'Reset Required: No', found Yes; the driver asks for a GPU reset after an "
            "error, drain the GPU and reset it or reboot the host.",
        ))  # fmt: skip
    return out


def _clocks(g, under_load):
    active = g.get("clock_reasons_active")
    if active is None:
        return None
    hw = [r for r in HW_SLOWDOWN if r in active]
    sw = [r for r in SW_SLOWDOWN if r in active]
    if hw:
        return check(
            "clock_reasons", g["id"], "critical",
            f"{_label(g)}: expected no hardware slowdown, found {', '.join(hw)} active; the GPU halved its clocks "
            "for heat or power, check the cooling, the power supply and its cables.",
        )  # fmt: skip
    if "sw_thermal_slowdown" in sw:
        return check(
            "clock_reasons", g["id"], "warning",
            f"{_label(g)}: expected no thermal slowdown, found sw_thermal_slowdown active; the GPU runs hot, check "
            "airflow and fan speeds.",
        )  # fmt: skip
    if sw:
        return check(
            "clock_reasons", g["id"], "warning" if not under_load else "ok",
            f"{_label(g)}: clocks held at the power limit (sw_power_cap active)"
            + ("; expected under load." if under_load else "; unexpected while idle, check the power limit "
               "('nvidia-smi -q -d POWER').")
        )  # fmt: skip
    return check("clock_reasons", g["id"], "ok", f"{_label(g)}: no power or thermal clock reason active.")


def _temperature(g):
    cur, slow, margin = g.get("temperature_c"), g.get("slowdown_temperature_c"), g.get("slowdown_margin_c")
    if margin is not None:
        if margin <= 0:
            sev = "critical"
        elif margin <= 5:
            sev = "warning"
        else:
            return check("temperature", g["id"], "ok", f"{_label(g)}: {margin} C below its slowdown temperature.")
        return check(
            "temperature", g["id"], sev,
            f"{_label(g)}: expected more than 5 C below its slowdown temperature, found {margin} C; check cooling.",
        )  # fmt: skip
    if cur is None:
        return None
    if slow is None:
        return check("temperature", g["id"], "ok", f"{_label(g)}: {cur} C (no slowdown temperature reported).")
    if cur >= slow:
        sev = "critical"
    elif cur >= slow - 5:
        sev = "warning"
    else:
        return check("temperature", g["id"], "ok", f"{_label(g)}: {cur} C, slowdown at {slow} C.")
    return check(
        "temperature", g["id"], sev,
        f"{_label(g)}: expected below {slow - 5} C (slowdown at {slow} C), found {cur} C; check airflow and fans.",
    )  # fmt: skip


def _fabric(g):
    state, status, health = g.get("fabric_state"), g.get("fabric_status"), g.get("fabric_health")
    if state is None:
        return None
    if state.lower() != "completed":
        return check(
            "fabric", g["id"], "critical",
            f"{_label(g)}: expected NVLink fabric state Completed, found {state}; CUDA fails with error 802 "
            "(system not yet initialized) until it completes, start nvidia-fabricmanager (of the driver's version) "
            "and check its log.",
        )  # fmt: skip
    if status and status.lower() != "success":
        return check(
            "fabric", g["id"], "critical",
            f"{_label(g)}: expected fabric status Success, found {status}; restart nvidia-fabricmanager, check its "
            "log and the NVSwitch trays.",
        )  # fmt: skip
    if health and health.lower() not in ("healthy", "not supported"):
        return check(
            "fabric", g["id"], "warning",
            f"{_label(g)}: fabric registration completed but its health summary is {health}; check the NVLink "
            "bandwidth in 'nvidia-smi -q' and the fabric manager log.",
        )  # fmt: skip
    return check("fabric", g["id"], "ok", f"{_label(g)}: NVLink fabric registration Completed.")


def _xids(events):
    out = []
    seen = {}
    for e in events:
        seen.setdefault((e["pci"], e["xid"]), []).append(e)
    for (pci, xid), group in seen.items():
        n = len(group)
        times = f"{n} time{'s' if n > 1 else ''}"
        if xid in XID_CRITICAL:
            sev, why = "critical", XID_CRITICAL[xid]
        elif xid in XID_WARNING:
            sev, why = "warning", XID_WARNING[xid]
        elif xid in XID_APPLICATION:
            sev, why = "ok", f"{XID_APPLICATION[xid]}, an application error rather than a hardware fault"
        else:
            sev, why = "warning", "an Xid this check does not classify; look it up in NVIDIA's Xid catalog"
        out.append(check(
            "xid", pci, sev,
            f"GPU {pci}: Xid {xid} in the kernel log since boot ({times}): {why}.",
        ))  # fmt: skip
    if not out:
        out.append(check("xid", None, "ok", "No NVIDIA Xid error in the kernel log since boot."))
    return out


def verdict(gpus, kernel_events=None, under_load=False):
    """Checks for ``gpus`` (dicts from gpu_health_parse) and the kernel log's Xid ``kernel_events`` (None when the
    log was not read). Every GPU gets every check its source can answer."""
    checks = []
    for g in gpus:
        for c in (_persistence(g), _pcie(g, under_load), _ecc(g), _clocks(g, under_load), _temperature(g),
                  _fabric(g)):  # fmt: skip
            if c:
                checks.append(c)
        checks.extend(_memory_repair(g))
    if kernel_events is not None:
        checks.extend(_xids(kernel_events))
    return checks


def worst(checks):
    """The highest severity among ``checks`` ('ok' when there are none)."""
    return max((c["severity"] for c in checks), key=SEVERITIES.index, default="ok")


def summary(checks):
    counts = dict.fromkeys(SEVERITIES, 0)
    for c in checks:
        counts[c["severity"]] += 1
    return counts
