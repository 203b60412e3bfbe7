#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_tuning
short_description: Turn the NVIDIA UVM driver's HMM off on PCIe-only multi-GPU hosts and report the GPUs' PCIe path
version_added: "0.3.0"
description:
  - Decides whether the NVIDIA UVM kernel module runs with C(uvm_disable_hmm=1) (O(disable_hmm); V(auto) turns HMM off
    on hosts with two or more GPUs of compute capability 12.x, which have no NVLink), writes or removes the
    C(modprobe.d) file that says so (O(conf_path)), and brings the running module in line without a reboot when it
    can.
  - The option is read when C(nvidia_uvm) is loaded. When the module is not loaded, the next load reads the file.
    When it is loaded and unused, it is unloaded and loaded again (C(modprobe -r nvidia_uvm), C(modprobe nvidia_uvm)),
    and the value it then reports is read back. When a process uses it (a serving SGLang), nothing running is
    touched and the finding says the option is pending until C(nvidia_uvm) is next loaded.
  - With O(checks), reports, and never changes, the GPUs' PCIe path. C(nvidia-smi topo -m) says whether NVLink joins
    the GPUs. On a host whose GPUs talk over PCIe only, it warns when BAR1 is smaller than a GPU's memory (Resizable BAR
    off, from C(nvidia-smi -q -d MEMORY)), when the IOMMU translates the GPUs' DMA (the C(type) of their IOMMU
    groups, C(DMA) or C(DMA-FQ) rather than C(identity))
    and when a bridge's ACS redirects peer traffic (C(ACSCtl) of C(lspci -vvv), when C(lspci) is installed).
  - Every finding has a severity (C(ok), C(info), C(warning)), what was expected, what was found and what to do. None
    fails the module.
options:
  disable_hmm:
    description:
      - V(auto), V(true) or V(false) (the role's C(nvidia_driver_disable_hmm)). V(false) removes the file, so the
        driver's default applies again.
    type: str
    default: auto
  gpus:
    description:
      - The host's GPUs, each with C(compute_capability) (C(12.0)) or C(sm) (C(sm_120)), as M(llmops.sglang.gpu_facts)
        returns them (or preflight's PCI list when no driver answers yet).
    type: list
    elements: dict
    default: []
  conf_path:
    description: The C(modprobe.d) file that carries the option.
    type: path
    default: /etc/modprobe.d/llmops-nvidia-uvm.conf
  checks:
    description: Read the PCIe path (C(nvidia-smi topo -m), BAR1, the IOMMU, ACS) and report it.
    type: bool
    default: true
  timeout:
    description: Seconds each command (nvidia-smi, lspci, modprobe) may take.
    type: int
    default: 60
extends_documentation_fragment:
  - llmops.sglang.attributes
attributes:
  check_mode:
    details: Reads everything and reports what it would write or unload (RV(hmm.action)); changes nothing.
author:
  - llmops.sglang developers (@llmops)
"""

EXAMPLES = r"""
- name: Turn HMM off on a PCIe-only multi-GPU host and report the PCIe path
  llmops.sglang.gpu_tuning:
    disable_hmm: auto
    gpus: "{{ preflight_gpu.gpus }}"
  register: tuning
"""

RETURN = r"""
hmm:
  description: The UVM driver's HMM setting.
  returned: always
  type: dict
  contains:
    disable:
      description: Whether HMM is to be off.
      type: bool
    why:
      description: The reason - the setting, or what V(auto) saw.
      type: str
    file:
      description: V(written), V(removed) or V(unchanged); in check mode, what would happen.
      type: str
    live:
      description: The loaded module's C(uvm_disable_hmm) (true/false), null when C(nvidia_uvm) is not loaded.
      type: bool
    action:
      description:
        - V(none) (the running module has the value, or is not loaded), V(reloaded) (it was unused, so it was
          unloaded and loaded again with the option; V(reload) in check mode), V(pending) (in use; the option takes
          effect at its next load).
      type: str
pcie_only:
  description: True when two or more GPUs are joined by PCIe only, false with NVLink, null when not read.
  returned: always
  type: bool
findings:
  description: One per check, each with C(check), C(severity), C(expected), C(found) and C(action).
  returned: always
  type: list
  elements: dict
  sample:
    - check: bar1
      severity: warning
      expected: BAR1 at least the GPU's memory (Resizable BAR on), so a peer can map all of it over PCIe
      found: "BAR1 256 MiB for 24564 MiB of memory on 8 of 8 GPUs (first: 00000000:01:00.0)"
      action: enable Above 4G Decoding and Resizable BAR in the BIOS (the role never changes firmware settings)
severity:
  description: The worst severity of RV(findings).
  returned: always
  type: str
"""

import glob
import os
import shutil

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils import host_tuning as T
from ansible_collections.llmops.sglang.plugins.module_utils.private_files import write_whole

LOCALE = {"LANG": "C", "LC_ALL": "C"}
#: Where the host says what it runs (tests point these at a fake tree).
PATHS = {
    "uvm": "/sys/module/nvidia_uvm",
    "iommu_groups": "/sys/kernel/iommu_groups",
    "pci_devices": "/sys/bus/pci/devices",
    "cmdline": "/proc/cmdline",
}


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def write(path, text):
    """The file at ``path`` holds ``text``, mode 0644, root's: written beside it and renamed over it."""
    write_whole(path, text, 0o644)


def run(module, cmd):
    """stdout of a command, or None when it is missing or fails."""
    exe = shutil.which(cmd[0])
    if not exe:
        return None
    rc, out, _err = module.run_command(["timeout", str(module.params["timeout"]), exe, *cmd[1:]], environ_update=LOCALE)
    return out if rc == 0 else None


def apply_hmm(module):
    p = module.params
    disable, why = T.hmm_wanted(p["disable_hmm"], p["gpus"])
    live = T.live_value(read(os.path.join(PATHS["uvm"], "parameters", T.UVM_OPTION)))
    refcnt_text = read(os.path.join(PATHS["uvm"], "refcnt"))
    refcnt = int(refcnt_text) if refcnt_text and refcnt_text.strip().isdigit() else None
    plan = T.uvm_plan(disable, read(p["conf_path"]), live, refcnt)
    changed = plan["write"] or plan["remove"] or plan["action"] == "reload"
    file_state = "written" if plan["write"] else "removed" if plan["remove"] else "unchanged"
    if changed and not module.check_mode:
        if plan["write"]:
            os.makedirs(os.path.dirname(p["conf_path"]), exist_ok=True)
            write(p["conf_path"], plan["content"])
        if plan["remove"]:
            os.unlink(p["conf_path"])
        if plan["action"] == "reload":
            rc, _out, _err = module.run_command(["modprobe", "-r", "nvidia_uvm"], environ_update=LOCALE)
            if rc != 0:  # a process opened it between the read and the unload: the option waits for the next load
                plan = dict(plan, action="pending", pending=True)
            else:  # loaded again at once, as it was, now with the option: its value is read back, not assumed
                module.run_command(["modprobe", "nvidia_uvm"], environ_update=LOCALE)
                live = T.live_value(read(os.path.join(PATHS["uvm"], "parameters", T.UVM_OPTION)))
                plan = dict(plan, action="reloaded")
    hmm = {"disable": disable, "why": why, "file": file_state, "live": live, "action": plan["action"]}
    return changed, hmm, T.hmm_finding(disable, why, plan, live)


def path_checks(module):
    topo_text = run(module, ["nvidia-smi", "topo", "-m"])
    try:
        topo = T.parse_topo(topo_text) if topo_text else None
    except T.TuningError:
        topo = None
    bar1 = T.parse_bar1(run(module, ["nvidia-smi", "-q", "-d", "MEMORY"]) or "")
    types = None
    if os.path.isdir(PATHS["iommu_groups"]):
        # the GPUs' own groups where sysfs links them (bus id 00000000:01:00.0 is device 0000:01:00.0), else every group
        gpu_types = [read(os.path.join(PATHS["pci_devices"], g["id"][-12:].lower(), "iommu_group", "type"))
                     for g in bar1 if g["id"]]  # fmt: skip
        types = [t for t in gpu_types if t] or [
            read(t) or "" for t in sorted(glob.glob(os.path.join(PATHS["iommu_groups"], "*", "type")))
        ]
    iommu = T.iommu_mode(types, read(PATHS["cmdline"]))
    lspci = run(module, ["lspci", "-vvv"])
    redirecting = T.acs_redirecting(T.parse_acs(lspci)) if lspci is not None else None
    count = len(topo["gpus"]) if topo else len(module.params["gpus"])
    return (None if topo is None or count < 2 else not T.nvlink(topo)), T.path_findings(
        count, topo, bar1, iommu, redirecting
    )


def main():
    module = AnsibleModule(
        argument_spec=dict(
            disable_hmm=dict(type="str", default="auto"),
            gpus=dict(type="list", elements="dict", default=[]),
            conf_path=dict(type="path", default="/etc/modprobe.d/llmops-nvidia-uvm.conf"),
            checks=dict(type="bool", default=True),
            timeout=dict(type="int", default=60),
        ),
        supports_check_mode=True,
    )
    try:
        T.setting(module.params["disable_hmm"])
    except T.TuningError as e:
        module.fail_json(msg=str(e))
    changed, hmm, hmm_found = apply_hmm(module)
    pcie_only, findings = path_checks(module) if module.params["checks"] else (None, [])
    findings = [hmm_found, *findings]
    module.exit_json(changed=changed, hmm=hmm, pcie_only=pcie_only, findings=findings, severity=T.worst(findings))


if __name__ == "__main__":
    main()
