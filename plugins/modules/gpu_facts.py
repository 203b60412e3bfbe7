#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_facts
short_description: Report the NVIDIA GPUs of a host, their architecture and the driver state
version_added: "0.1.0"
description:
  - Runs C(nvidia-smi) with C(LANG=C) and returns one entry per GPU (name, memory in MiB, compute capability,
    the C(sm_XY) architecture string, driver version, PCI bus id) plus host-level summaries.
  - A host without the driver, without NVIDIA GPUs, or with a kernel module that does not match the installed
    user-space driver is reported through RV(gpu_state) instead of failing, so plays can decide what to do
    (for example install the driver, or ask for a reboot).
  - A value nvidia-smi cannot fill (C([N/A]), C([Not Supported]), C([Unknown Error])) never fails the task; it is
    returned as null with the reason in the GPU's C(notes). Unified-memory GPUs (GB10, GH200-class) report no
    memory size this way.
  - Without a driver, NVIDIA GPUs on the PCI bus are named through the PCI id database (C(pci.ids)) and their
    architecture is taken from the chip family in that name (for example C(GB202GL) is sm_120).
  - Read-only; supports check mode and always reports C(changed=false).
options:
  nvidia_smi:
    description:
      - Path or name of the nvidia-smi binary. A bare name is searched in E(PATH) and in C(/usr/bin).
    type: str
    default: nvidia-smi
  timeout:
    description:
      - Seconds to wait for nvidia-smi before giving up (a hung driver makes nvidia-smi block).
    type: int
    default: 30
  pci_root:
    description:
      - The sysfs directory of PCI devices. NVIDIA GPUs found there are reported in RV(pci_gpus) even when no
        driver is installed, so the architecture is known before the driver stage (compatibility gate).
    type: path
    default: /sys/bus/pci/devices
  pci_ids:
    description:
      - Candidate paths of the PCI id database, the first readable one is used (Debian/Ubuntu package C(pci.ids),
        C(hwdata) elsewhere). Without one, PCI devices are listed by id only, with no name or architecture.
    type: list
    elements: path
    default: [/usr/share/misc/pci.ids, /usr/share/hwdata/pci.ids, /usr/share/pci.ids]
  pci_ids_candidate:
    description:
      - A downloaded PCI id database to use before O(pci_ids), only once it passes the checks of
        C(plugins/module_utils/pci_ids_check.py) (size, not HTML, NVIDIA's vendor block, the class list that ends the
        file, every NVIDIA device the installed database knows, the O(pci_ids_sha256) pin). A refusal fails the task
        in one line; the installed database stays in use.
    type: path
  pci_ids_max_bytes:
    description: The largest O(pci_ids_candidate) accepted, in bytes.
    type: int
    default: 8388608
  pci_ids_sha256:
    description: When set, the sha256 O(pci_ids_candidate) must have.
    type: str
    default: ""
  fail_on_error:
    description:
      - Fail the task when nvidia-smi exists but answers with an error that is not a known driver state.
      - When V(false), such errors are returned as RV(gpu_state=error) with the output.
    type: bool
    default: true
notes:
  - Facts are also returned under C(ansible_facts.llmops_gpu) so later plays can use them without registering.
extends_documentation_fragment:
  - llmops.sglang.attributes
attributes:
  check_mode:
    details: Reads only (nvidia-smi, the PCI bus, the kernel module); the same result in check mode.
author:
  - llmops.sglang developers (@llmops)
"""

EXAMPLES = r"""
- name: Find the GPUs of the host
  llmops.sglang.gpu_facts:
  register: gpu

- name: Show what was found
  ansible.builtin.debug:
    msg: "{{ gpu.gpu_count }} x {{ gpu.gpus[0].name }} ({{ gpu.sm_list | join(', ') }})"
  when: gpu.gpu_state == 'present'

- name: Stop when the driver and kernel module disagree (a reboot is due)
  ansible.builtin.fail:
    msg: "{{ gpu.message }}"
  when: ansible_facts.llmops_gpu.gpu_state == 'driver_mismatch'
"""

RETURN = r"""
gpu_state:
  description:
    - C(present) when nvidia-smi listed GPUs.
    - C(no_driver) when nvidia-smi is missing or cannot reach the driver (exit code 9, libnvidia-ml.so not found,
      "couldn't communicate with the NVIDIA driver").
    - C(no_gpu) when the driver runs but sees no GPU (exit code 6, "No devices were found").
    - C(unsupported_gpu) when the driver runs but supports none of the GPUs ("No supported GPUs were found"), for
      example GPUs bound to vfio-pci or GPUs that need another driver branch.
    - C(driver_mismatch) when the loaded kernel module and the user-space library differ (reboot needed).
    - C(gpu_lost) when a GPU does not answer ("Unable to determine the device handle", "GPU is lost", "fallen off the
      bus"), usually Xid 79 in dmesg.
    - C(error) for any other failure (only when O(fail_on_error=false); otherwise the module fails).
  returned: always
  type: str
  choices: [present, no_driver, no_gpu, unsupported_gpu, driver_mismatch, gpu_lost, error]
  sample: present
message:
  description: One sentence describing the state, for humans.
  returned: always
  type: str
  sample: 8 x NVIDIA RTX PRO 6000 Blackwell Workstation Edition (sm_120, 97887 MiB each), driver 580.95.05
gpu_count:
  description: Number of GPUs found.
  returned: always
  type: int
  sample: 8
gpus:
  description: One entry per GPU, in nvidia-smi index order.
  returned: always
  type: list
  elements: dict
  contains:
    index: {description: GPU index as nvidia-smi numbers it., type: int}
    name: {description: Product name., type: str, sample: NVIDIA RTX PRO 6000 Blackwell Workstation Edition}
    uuid: {description: GPU UUID., type: str}
    memory_total_mib:
      description: Total memory in MiB; null when nvidia-smi cannot report it.
      type: int
      sample: 97887
    memory_used_mib: {description: Used memory in MiB; null when nvidia-smi cannot report it., type: int}
    memory_free_mib: {description: Free memory in MiB; null when nvidia-smi cannot report it., type: int}
    unified_memory:
      description: Whether the GPU reports no memory of its own (GB10/GH200-class unified memory).
      type: bool
    compute_capability: {description: Compute capability MAJOR.MINOR; null when unknown., type: str, sample: "12.0"}
    sm: {description: Architecture as used in build flags; null when unknown., type: str, sample: sm_120}
    mig_mode: {description: MIG mode (Enabled/Disabled); null when the GPU has none., type: str}
    notes: {description: "Per column, why nvidia-smi gave no value (its placeholder and its meaning).", type: dict}
    architecture: {description: Architecture family name., type: str, sample: Blackwell}
    driver_version: {description: Driver version., type: str, sample: 580.95.05}
    pci_bus_id: {description: PCI bus id., type: str, sample: "00000000:01:00.0"}
sm_list:
  description: Distinct architectures, lowest first.
  returned: always
  type: list
  elements: str
  sample: [sm_120]
arch_list:
  description: Distinct architectures as numbers, as build variables such as FLASH_ATTN_CUDA_ARCHS want them.
  returned: always
  type: list
  elements: str
  sample: ["120"]
min_memory_total_mib:
  description:
    - Smallest total memory of any GPU (SGLang sizes by the smallest).
    - Null without GPUs or when no GPU reports it.
  returned: always
  type: int
  sample: 97887
unified_memory:
  description: Whether some GPU reports no memory of its own (unified memory shared with the CPU).
  returned: always
  type: bool
driver_version:
  description: Driver version reported by nvidia-smi, null when no driver answers.
  returned: always
  type: str
  sample: 580.95.05
driver_branch:
  description: Major driver branch, null when no driver answers.
  returned: always
  type: int
  sample: 580
homogeneous:
  description: Whether all GPUs have the same name and memory size.
  returned: always
  type: bool
nvidia_smi_output:
  description: nvidia-smi's own output when it failed.
  returned: when gpu_state is not present
  type: str
pci_gpus:
  description:
    - NVIDIA GPUs on the PCI bus, read from sysfs without the driver. C(name), C(compute_capability) and C(sm)
      are null for device ids the module does not know.
  returned: always
  type: list
  elements: dict
  sample: [{pci_bus_id: "0000:01:00.0", device_id: "0x2bb1", name: NVIDIA RTX PRO 6000 Blackwell Workstation Edition,
            compute_capability: "12.0", sm: sm_120, architecture: Blackwell}]
arch_source:
  description:
    - Where RV(sm_list) came from, C(nvidia-smi) when the driver answered, C(pci) when only the PCI bus could be
      read, C(none) when neither knows an NVIDIA GPU.
  returned: always
  type: str
  sample: nvidia-smi
ansible_facts:
  description: The same facts under C(llmops_gpu).
  returned: always
  type: dict
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils import gpu_arch, pci_ids_check
from ansible_collections.llmops.sglang.plugins.module_utils.gpu_inventory import (
    FAILURE_REASONS,
    QUERY_FIELDS,
    GpuQueryError,
    classify_failure,
    find_pci_ids,
    parse_query_csv,
    read_pci_gpus,
    read_pci_ids,
    summarize,
)


def find_nvidia_smi(module, name):
    if os.path.sep in name:
        return name if os.access(name, os.X_OK) else None
    return module.get_bin_path(name, opt_dirs=["/usr/bin", "/usr/local/bin"])


def gather(module):
    binary = find_nvidia_smi(module, module.params["nvidia_smi"])
    if binary is None:
        return {"gpu_state": "no_driver", "gpus": [], "nvidia_smi_output": "nvidia-smi not found"}
    cmd = [
        "timeout",
        str(module.params["timeout"]),
        binary,
        "--query-gpu=" + ",".join(QUERY_FIELDS),
        "--format=csv,noheader,nounits",
    ]
    rc, out, err = module.run_command(cmd, environ_update={"LANG": "C", "LC_ALL": "C"})
    if rc == 124:
        module.fail_json(
            msg=f"nvidia-smi did not answer within {module.params['timeout']} s; the driver may be hung "
            "(check dmesg for Xid errors) or the timeout too short.",
            cmd=cmd,
        )
    if rc != 0:
        state = classify_failure(rc, out + err)
        if state == "error" and module.params["fail_on_error"]:
            module.fail_json(msg=f"nvidia-smi failed with exit code {rc}: {(out + err).strip()}", rc=rc, cmd=cmd)
        return {"gpu_state": state, "gpus": [], "nvidia_smi_output": (out + err).strip()}
    try:
        gpus = parse_query_csv(out)
    except GpuQueryError as exc:
        module.fail_json(msg=f"could not read nvidia-smi's answer: {exc}", stdout=out)
    return {"gpu_state": "present" if gpus else "no_gpu", "gpus": gpus}


def describe(result):
    if result["gpu_state"] != "present":
        text = FAILURE_REASONS.get(result["gpu_state"], "nvidia-smi failed: " + result.get("nvidia_smi_output", ""))
        if result["pci_gpus"]:
            why = (
                f"not in the PCI id database {result['pci_ids']}"
                if result["pci_ids"]
                else ("no PCI id database: install pci.ids or hwdata")
            )
            names = sorted({g["name"] or f"NVIDIA device {g['device_id']} ({why})" for g in result["pci_gpus"]})
            text += f" On the PCI bus: {len(result['pci_gpus'])} x {', '.join(names)}"
            text += f" ({', '.join(result['sm_list'])})." if result["sm_list"] else "."
        return text
    groups = {}
    for gpu in result["gpus"]:
        key = (gpu["name"], gpu["sm"] or "architecture unknown", gpu["memory_total_mib"], gpu["unified_memory"])
        groups[key] = groups.get(key, 0) + 1
    parts = []
    for (name, sm, mib, unified), n in groups.items():
        size = "unified memory" if unified else ("memory not reported" if mib is None else f"{mib} MiB each")
        parts.append(f"{n} x {name} ({sm}, {size})")
    text = f"{' + '.join(parts)}, driver {result['driver_version']}"
    if any(g["mig_mode"] == "Enabled" for g in result["gpus"]):
        text += "; MIG is enabled on some GPUs (SGLang sees only their MIG instances)"
    return text


def main():
    module = AnsibleModule(
        argument_spec={
            "nvidia_smi": {"type": "str", "default": "nvidia-smi"},
            "timeout": {"type": "int", "default": 30},
            "pci_root": {"type": "path", "default": "/sys/bus/pci/devices"},
            "pci_ids": {
                "type": "list",
                "elements": "path",
                "default": ["/usr/share/misc/pci.ids", "/usr/share/hwdata/pci.ids", "/usr/share/pci.ids"],
            },
            "pci_ids_candidate": {"type": "path"},
            "pci_ids_max_bytes": {"type": "int", "default": pci_ids_check.DEFAULT_MAX_BYTES},
            "pci_ids_sha256": {"type": "str", "default": ""},
            "fail_on_error": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    if module.params["timeout"] < 1:
        module.fail_json(msg=f"timeout must be at least 1 second, got {module.params['timeout']}")
    candidate = module.params["pci_ids_candidate"]
    if candidate:
        installed = find_pci_ids(module.params["pci_ids"])
        wrong = pci_ids_check.problem(
            candidate, installed, module.params["pci_ids_max_bytes"], module.params["pci_ids_sha256"]
        )
        if wrong:
            module.fail_json(
                msg="Expected a current PCI id database; found %s. Kept the installed one (%s)." % (wrong, installed)
            )
        module.params["pci_ids"] = [candidate, *module.params["pci_ids"]]
    result = gather(module)
    result.update(summarize(result["gpus"]))
    result["gpu_count"] = result.pop("count")
    result["pci_ids"] = find_pci_ids(module.params["pci_ids"])
    try:
        ids = read_pci_ids(result["pci_ids"]) if result["pci_ids"] else {}
    except OSError as exc:
        module.fail_json(msg=f"cannot read the PCI id database {result['pci_ids']}: {exc}")
    result["pci_gpus"] = read_pci_gpus(module.params["pci_root"], ids)
    result["arch_source"] = "nvidia-smi" if result["sm_list"] else "none"
    known = sorted({g["sm"] for g in result["pci_gpus"] if g["sm"]}, key=gpu_arch.number)
    if not result["sm_list"] and known:
        # The driver is not there yet, but the bus says what the GPUs are: enough for the compatibility gate.
        result["sm_list"] = known
        result["arch_list"] = [s[3:] for s in known]
        result["arch_source"] = "pci"
    result["message"] = describe(result)
    facts = {k: v for k, v in result.items() if k != "nvidia_smi_output"}
    module.exit_json(changed=False, ansible_facts={"llmops_gpu": facts}, **result)


if __name__ == "__main__":
    main()
