#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_plan
short_description: Predict SGLang's GPU memory split for a model directory and choose mem-fraction-static
version_added: "0.1.0"
description:
  - Runs the collection's memory planner (C(sglang_memory) module_utils, docs/memory.md) on the host where the model
    is, from its C(config.json) and safetensors index, and returns the predicted KV tokens, pool size, the memory
    left for CUDA graphs, a verdict and the recommended C(--mem-fraction-static).
  - Given the result of a failed C(llmops.sglang.sglang_server) attempt (outcome V(oom_cuda_graph)) in
    O(failed_attempt), it also returns RV(retry) - the fraction (or CUDA-graph max batch size) that should survive
    the capture, computed from that attempt's logged numbers.
  - Reads files only; never changes anything.
author:
  - llmops.sglang developers (@llmops)
options:
  model_path:
    description: Model directory (with C(config.json) and the safetensors index or shards).
    type: path
    required: true
  tp:
    description: Tensor-parallel size.
    type: int
    default: 1
  pp:
    description: Pipeline-parallel size.
    type: int
    default: 1
  gpu_mem_mib:
    description: Total memory of the smallest GPU in MiB, as C(nvidia-smi --query-gpu=memory.total) prints it.
    type: int
    required: true
  gpu_arch:
    description: GPU architecture, for example C(sm_120) (selects the context overhead and SGLang's KV dtype default).
    type: str
  mem_fraction_static:
    description: The fraction to evaluate. Omit to evaluate SGLang's default for O(sglang_version).
    type: float
  kv_cache_dtype:
    description: C(--kv-cache-dtype) (V(auto) = SGLang's choice for the model and GPU).
    type: str
    default: auto
  page_size:
    description: C(--page-size); omitted = SGLang's default for the model.
    type: int
  cuda_graph_max_bs:
    description: C(--cuda-graph-max-bs); omitted = SGLang's default for the GPU.
    type: int
  sglang_version:
    description:
      - SGLang version whose arithmetic applies (the user's pin). Omitted = the version the build stage recorded in
        O(sglang_record); there is no built-in default.
    type: str
  sglang_record:
    description: The build stage's record of the installed SGLang (JSON with C(version)), read when O(sglang_version)
      is omitted.
    type: path
    default: /var/lib/llmops-sglang/sglang.json
  margin_gib:
    description: Memory kept free above the CUDA-graph estimate when recommending a fraction.
    type: float
    default: 1.0
  dp:
    description: C(--dp) with C(--enable-dp-attention) (the KV heads are split over O(tp) / O(dp) ranks).
    type: int
    default: 1
  max_running_requests:
    description: C(--max-running-requests) (sizes the request-to-token table); omitted = SGLang's default.
    type: int
  context_length:
    description: C(--context-length); omitted = the model's.
    type: int
  speculative_algorithm:
    description: C(--speculative-algorithm).
    type: str
    choices: [EAGLE, EAGLE3, NEXTN, MTP, STANDALONE, NGRAM]
  speculative_draft_model:
    description: C(--speculative-draft-model-path) (a model directory; its layers and weights are planned).
    type: path
  speculative_draft_layers:
    description: Draft layers; omitted = the draft config's (or the model's) C(num_nextn_predict_layers).
    type: int
  speculative_num_draft_tokens:
    description: C(--speculative-num-draft-tokens).
    type: int
  nsa_backend:
    description: C(--nsa-prefill-backend)/C(--nsa-decode-backend) of a DSA model (V(trtllm) stores 576 B/layer).
    type: str
  attention:
    description: KV layout (V(mha), V(mla), V(dsa)) of an architecture no SGLang release registers; such a model is
      refused without it.
    type: str
    choices: [mha, mla, dsa]
  failed_attempt:
    description:
      - The registered result of a C(llmops.sglang.sglang_server) task that failed with V(oom_cuda_graph); the module
        then returns RV(retry).
    type: dict
extends_documentation_fragment:
  - llmops.sglang.attributes
attributes:
  check_mode:
    details: Returns the same plan (the module only reads files in either mode).
"""

EXAMPLES = r"""
- name: Plan the memory split of GLM-5 on 8 x RTX PRO 6000
  llmops.sglang.sglang_plan:
    model_path: /opt/models/GLM-5
    tp: 8
    gpu_mem_mib: 97887
    gpu_arch: sm_120
  register: plan

- name: Compute the fraction after a capture OOM
  llmops.sglang.sglang_plan:
    model_path: /opt/models/GLM-5
    tp: 8
    gpu_mem_mib: 97887
    gpu_arch: sm_120
    mem_fraction_static: 0.95
    failed_attempt: "{{ server_wait }}"
  register: advice
"""

RETURN = r"""
plan:
  description: The planner's result (C(kv_tokens), C(kv_pool_gib), C(avail_after_pool_gib), C(cuda_graph_need_gib),
    C(verdict), C(recommended_mem_fraction_static), C(recommended_cuda_graph_max_bs) and the inputs).
  returned: always
  type: dict
retry:
  description: What to relaunch with after the capture OOM in O(failed_attempt) (C(mem_fraction_static),
    C(cuda_graph_max_bs), C(need_estimate_gib), C(required_avail_gib), C(reason)); C(mem_fraction_static) null when no
    fraction helps.
  returned: when O(failed_attempt) is given
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.sglang.plugins.module_utils.server_policy import retry_advice
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_memory import PlanError, plan
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_release import (
    DEFAULT_RECORD_PATH,
    resolve_sglang_version,
)


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            model_path=dict(type="path", required=True),
            tp=dict(type="int", default=1),
            pp=dict(type="int", default=1),
            gpu_mem_mib=dict(type="int", required=True),
            gpu_arch=dict(type="str"),
            mem_fraction_static=dict(type="float"),
            kv_cache_dtype=dict(type="str", default="auto"),
            page_size=dict(type="int"),
            cuda_graph_max_bs=dict(type="int"),
            sglang_version=dict(type="str"),
            sglang_record=dict(type="path", default=DEFAULT_RECORD_PATH),
            margin_gib=dict(type="float", default=1.0),
            dp=dict(type="int", default=1),
            max_running_requests=dict(type="int"),
            context_length=dict(type="int"),
            speculative_algorithm=dict(type="str", choices=["EAGLE", "EAGLE3", "NEXTN", "MTP", "STANDALONE", "NGRAM"]),
            speculative_draft_model=dict(type="path"),
            speculative_draft_layers=dict(type="int"),
            speculative_num_draft_tokens=dict(type="int", no_log=False),
            nsa_backend=dict(type="str"),
            attention=dict(type="str", choices=["mha", "mla", "dsa"]),
            failed_attempt=dict(type="dict"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    try:
        version = resolve_sglang_version(p["sglang_version"], p["sglang_record"])
        the_plan = plan(
            p["model_path"],
            gpu_mem_mib=p["gpu_mem_mib"],
            tp=p["tp"],
            pp=p["pp"],
            mem_fraction_static=p["mem_fraction_static"],
            kv_cache_dtype=p["kv_cache_dtype"],
            page_size=p["page_size"],
            sglang_version=version,
            gpu_arch=p["gpu_arch"],
            cuda_graph_max_bs=p["cuda_graph_max_bs"],
            margin_gib=p["margin_gib"],
            dp=p["dp"],
            max_running_requests=p["max_running_requests"],
            context_length=p["context_length"],
            speculative_algorithm=p["speculative_algorithm"],
            speculative_draft_model=p["speculative_draft_model"],
            speculative_draft_layers=p["speculative_draft_layers"],
            speculative_num_draft_tokens=p["speculative_num_draft_tokens"],
            nsa_backend=p["nsa_backend"],
            attention=p["attention"],
        ).as_dict()
    except (PlanError, OSError, ValueError, KeyError) as exc:
        module.fail_json(
            msg="cannot plan the memory of %s (TP %d, %d MiB GPUs): %s"
            % (p["model_path"], p["tp"], p["gpu_mem_mib"], exc)
        )
    result = {"changed": False, "plan": the_plan}
    msg = "%s: %s tokens, pool %.2f GiB, %.2f GiB left for CUDA graphs (need ~%.2f) at fraction %.2f -> %s" % (
        p["model_path"],
        the_plan["kv_tokens"],
        the_plan["kv_pool_gib"],
        the_plan["avail_after_pool_gib"],
        the_plan["cuda_graph_need_gib"],
        the_plan["mem_fraction_static"],
        the_plan["verdict"],
    )
    if p["failed_attempt"]:
        try:
            result["retry"] = retry_advice(p["failed_attempt"], the_plan, p["mem_fraction_static"])
        except (PlanError, TypeError, ValueError) as exc:
            module.fail_json(msg="cannot compute a fraction from the failed attempt: %s" % exc, plan=the_plan)
        r = result["retry"]
        msg += "; after the capture OOM at %.2f: %s" % (
            r["failed_mem_fraction_static"],
            "fraction %s%s"
            % (
                r["mem_fraction_static"],
                ", cuda_graph_max_bs %s" % r["cuda_graph_max_bs"] if r["cuda_graph_max_bs"] else "",
            )
            if r["mem_fraction_static"]
            else "no fraction fits",
        )
    result["msg"] = msg
    module.exit_json(**result)


def main():
    run_module()


if __name__ == "__main__":
    main()
