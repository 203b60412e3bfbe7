#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: build_plan
short_description: Fingerprint a source build's inputs and size its parallelism to the host's RAM
version_added: "0.1.0"
description:
  - Resolves the source commit from C(git ls-remote) output, spells the detected GPU architectures the way the
    build wants them (C(FLASH_ATTN_CUDA_ARCHS=120), C(TORCH_CUDA_ARCH_LIST=12.0a)), and returns a fingerprint of
    all inputs that change the built wheel. Wheels are stored and reused under that fingerprint.
  - Derives compile jobs and nvcc threads per job from RAM and cores (see O(gib_per_thread)).
  - Pure computation; changes nothing, supports check mode.
options:
  package:
    description: Distribution name, part of the fingerprint.
    type: str
    required: true
  inputs:
    description: Further inputs that change the wheel (torch version, CUDA version, Python version, flags).
    type: dict
    default: {}
  ref:
    description: Git ref to resolve (branch, tag or 40-hex commit). The commit is added to the inputs.
    type: str
  ls_remote:
    description: Output of C(git ls-remote URL) used to resolve O(ref). Not needed when O(ref) is a commit.
    type: str
    default: ""
  arch_list:
    description: GPU architectures (C(120), C(sm_120), C(12.0)), usually the C(arch_list) of M(llmops.sglang.gpu_facts).
    type: list
    elements: str
    default: []
  arch_style:
    description:
      - How the architectures enter the inputs. V(flash_attn) gives C(FLASH_ATTN_CUDA_ARCHS) (C(90;120)),
        V(sgl_kernel) gives C(TORCH_CUDA_ARCH_LIST) (C(9.0a;12.0a)) and the CMake spelling (C(90a;120a)).
    type: str
    choices: [none, flash_attn, sgl_kernel]
    default: none
  archs_override:
    description: Use this arch string instead of deriving it from O(arch_list).
    type: str
    default: ""
  ram_mib:
    description: Host RAM in MiB (C(ansible_facts['memtotal_mb'])). Parallelism is computed only when given.
    type: int
  cpus:
    description: Cores available to the build (C(ansible_facts['processor_vcpus'])).
    type: int
    default: 1
  gib_per_thread:
    description: Peak GiB of RAM one nvcc thread needs (flash-attn about 2, sgl-kernel about 1).
    type: float
    default: 2.0
  ram_fraction:
    description: Share of RAM the build may use.
    type: float
    default: 0.75
  max_threads:
    description: Upper bound of nvcc threads per job.
    type: int
    default: 4
  jobs:
    description: Force this many parallel jobs (0 = derive).
    type: int
    default: 0
  threads:
    description: Force this many nvcc threads per job (0 = derive).
    type: int
    default: 0
extends_documentation_fragment:
  - llmops.sglang.attributes
attributes:
  check_mode:
    details: Reads only (the inputs' fingerprint and the host's RAM and CPUs); the same result in check mode.
author:
  - llmops.sglang developers (@llmops)
"""

EXAMPLES = r"""
- name: Plan the flash-attn build
  llmops.sglang.build_plan:
    package: flash-attn
    ref: v2.8.3
    ls_remote: "{{ ls_remote.stdout }}"
    arch_list: ["120"]
    arch_style: flash_attn
    inputs:
      torch: 2.9.1+cu128
      cuda: "12.8"
      python: "3.11"
    ram_mib: "{{ ansible_facts['memtotal_mb'] }}"
    cpus: "{{ ansible_facts['processor_vcpus'] }}"
    gib_per_thread: 2
  register: plan
"""

RETURN = r"""
fingerprint:
  description: First 16 hex digits of the sha256 of the sorted-key JSON of RV(inputs).
  returned: always
  type: str
  sample: 3f2a9c0d4b1e7a55
inputs:
  description: Everything the fingerprint covers (the given inputs plus C(package), C(commit), C(archs)).
  returned: always
  type: dict
commit:
  description: Resolved commit of O(ref), null without O(ref).
  returned: always
  type: str
archs:
  description:
    - C(flash_attn) (C(120); sm_86/sm_89 map to C(80), sm_103 to C(100), sm_121 to C(120)),
      C(torch_cuda_arch_list) (C(12.0a)), C(cmake_cuda_architectures) (C(120a)), C(below_sm90), C(gencodes) (the
      C(-gencode) flags sgl-kernel's CMakeLists.txt is patched to, e.g. C(-gencode=arch=compute_120a,code=sm_120a)),
      C(cmake_arch_args) (the arch part of sgl-kernel's C(CMAKE_ARGS), e.g. C(-DENABLE_BELOW_SM90=OFF)).
  returned: when O(arch_list) or O(archs_override) is given
  type: dict
parallelism:
  description: C(jobs), C(threads), C(derived_jobs), C(peak_mib), C(budget_mib), C(ram_mib), C(fits), C(formula).
  returned: when O(ram_mib) is given
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule

import re

from ansible_collections.llmops.sglang.plugins.module_utils.build_plan import (
    fingerprint,
    flash_attn_archs,
    flash_attn_version_ok,
    kernel_archs,
    parallelism,
    resolve_ref,
)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            package=dict(type="str", required=True),
            inputs=dict(type="dict", default={}),
            ref=dict(type="str"),
            ls_remote=dict(type="str", default=""),
            arch_list=dict(type="list", elements="str", default=[]),
            arch_style=dict(type="str", choices=["none", "flash_attn", "sgl_kernel"], default="none"),
            archs_override=dict(type="str", default=""),
            ram_mib=dict(type="int"),
            cpus=dict(type="int", default=1),
            gib_per_thread=dict(type="float", default=2.0),
            ram_fraction=dict(type="float", default=0.75),
            max_threads=dict(type="int", default=4),
            jobs=dict(type="int", default=0),
            threads=dict(type="int", default=0),
        ),
        supports_check_mode=True,
    )
    p = module.params
    inputs = dict(p["inputs"])
    inputs["package"] = p["package"]
    result = {"changed": False, "commit": None}

    if p["ref"]:
        commit = resolve_ref(p["ls_remote"], p["ref"])
        if not commit:
            module.fail_json(
                msg=f"{p['package']}: the ref {p['ref']!r} is neither a commit nor a branch or tag of the repository "
                "(git ls-remote lists no such ref). Set the version variable to a branch, tag or full commit sha."
            )
        inputs["commit"] = commit
        result["commit"] = commit

    if p["arch_style"] == "flash_attn" and p["ref"] and re.match(r"^v?\d+\.\d+\.\d+", p["ref"]):
        if not flash_attn_version_ok(p["ref"]):
            module.fail_json(
                msg=f"{p['package']}: expected flash-attention v2.7.3 or later (the first that reads "
                f"FLASH_ATTN_CUDA_ARCHS, which scopes the build to the GPUs), found {p['ref']}: set flash_attn_version "
                "to v2.7.3 or later (default v2.8.3). Nothing was built."
            )

    if p["arch_style"] != "none":
        source = [a for a in p["archs_override"].replace(",", ";").split(";") if a.strip()] or p["arch_list"]
        if not source:
            module.fail_json(
                msg=f"{p['package']}: expected at least one GPU architecture to build for, found none: "
                "is the NVIDIA driver installed (gpu_facts reads the GPUs from nvidia-smi or the PCI bus)?"
            )
        try:
            archs = {"flash_attn": flash_attn_archs(source)}
            archs.update(kernel_archs(source))
        except ValueError as e:
            module.fail_json(msg=f"{p['package']}: cannot build for {', '.join(source)}: {e}.")
        if p["archs_override"]:
            if p["arch_style"] == "sgl_kernel":
                archs["torch_cuda_arch_list"] = p["archs_override"]
        inputs["archs"] = archs["flash_attn"] if p["arch_style"] == "flash_attn" else archs["torch_cuda_arch_list"]
        result["archs"] = archs

    if p["ram_mib"] is not None:
        targets = 0
        if "archs" in result:  # nvcc threads beyond the gencode targets compiled per file only cost memory
            archs = result["archs"]
            targets = len(archs["flash_attn"].split(";")) if p["arch_style"] == "flash_attn" else len(archs["gencodes"])
        try:
            result["parallelism"] = parallelism(
                p["ram_mib"],
                p["cpus"],
                p["gib_per_thread"],
                ram_fraction=p["ram_fraction"],
                max_threads=p["max_threads"],
                jobs=p["jobs"],
                threads=p["threads"],
                targets=targets,
            )
        except ValueError as e:
            module.fail_json(msg=f"{p['package']}: cannot size the build: {e}")

    result["inputs"] = inputs
    result["fingerprint"] = fingerprint(inputs)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
