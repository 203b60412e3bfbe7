#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_attempt
short_description: Decide the memory settings of SGLang's launches, before the first and after each one
version_added: "0.3.0"
description:
  - The server role's policy for its launches (module_utils C(server_policy)), with the memory planner's plan for
    the settings it chooses, so that the role runs the planner once per decision.
  - With O(step=choose), before the first launch, returns RV(plan) at the requested settings (the check that the
    weights fit and the recommendation for V(auto)), RV(settings) of the first launch (the requested ones, the
    planner's with V(auto), or the ones that last worked for the same request, from O(previous)) and RV(next_plan),
    the plan at those settings.
  - With O(step=judge), after a launch, returns RV(result) (this node's, or on a multi-node replica that is not ready
    the replica's verdict), RV(summary) (the attempt's row of the deployment record), RV(finished) and, when another
    launch follows a CUDA-graph capture OOM, RV(settings) from the advice in RV(retry) and RV(next_plan) at them;
    otherwise RV(stop_reason) says why none follows when no fraction survives the capture.
  - Reads the model's files and the build stage's record only; never changes anything.
author:
  - llmops.sglang developers (@llmops)
options:
  step:
    description: V(choose) before the first launch, V(judge) after each.
    type: str
    required: true
    choices: [choose, judge]
  planner:
    description:
      - The planner's settings, written once by the role - C(model_path), C(tp), C(gpu_mem_mib), C(gpu_arch),
        C(kv_cache_dtype), C(sglang_record), C(max_running_requests), C(margin_gib). Omitted on a host whose GPUs
        were not read; no plan is returned then.
    type: dict
  on_capture_oom:
    description: V(retry) relaunches after a capture OOM with a fraction that should survive it; V(fail) stops.
    type: str
    choices: [retry, fail]
    default: retry
  requested_fraction:
    description: The inventory's C(--mem-fraction-static), a number or V(auto) (O(step=choose)).
    type: str
  requested_graph_bs:
    description: The inventory's C(--cuda-graph-max-bs); 0 or omitted is SGLang's default (O(step=choose)).
    type: int
  previous:
    description: The host's memory record (C(request), C(effective)) from an earlier run; empty when there is none.
    type: dict
    default: {}
  request:
    description: This run's request in the shape the memory record keeps it (O(step=choose)).
    type: dict
    default: {}
  attempt:
    description: The number of the attempt just judged, from 1 (O(step=judge)).
    type: int
  max_attempts:
    description: How many launches the role allows.
    type: int
    default: 3
  fraction:
    description: The fraction the judged attempt ran with (O(step=judge)).
    type: float
  graph_bs:
    description: The CUDA-graph max batch size the judged attempt ran with; 0 or omitted is SGLang's default.
    type: int
  plan:
    description: The plan of the judged attempt (RV(next_plan) of the step before).
    type: dict
  node_result:
    description: This node's result, as M(llmops.sglang.sglang_server) returned it and the filter
      C(llmops.sglang.server_node_result) shaped it (O(step=judge)).
    type: dict
    default: {}
  multinode:
    description: Whether the replica has more than one node (then O(verdict) decides).
    type: bool
    default: false
  verdict:
    description: The replica's verdict from the filter C(llmops.sglang.group_verdict) (multi-node replicas).
    type: dict
    default: {}
  launched:
    description: Whether the judged attempt started SGLang.
    type: bool
    default: false
extends_documentation_fragment:
  - llmops.sglang.attributes
attributes:
  check_mode:
    details: Decides the same way, except that no launch follows a judged attempt.
  platform:
    platforms: posix
    details: Any POSIX host with the model's files.
notes:
  - docs/memory.md explains the planner and the retry fraction; docs/architecture.md names the files of this policy.
"""

EXAMPLES = r"""
- name: Choose the memory settings of the first launch
  llmops.sglang.sglang_attempt:
    step: choose
    planner: "{{ server_planner }}"
    requested_fraction: "0.88"
    on_capture_oom: retry
  register: first

- name: Judge attempt 1 and choose what comes next
  llmops.sglang.sglang_attempt:
    step: judge
    planner: "{{ server_planner }}"
    attempt: 1
    fraction: "{{ first.settings.fraction }}"
    plan: "{{ first.next_plan }}"
    node_result: "{{ launch }}"
    launched: "{{ launch.launched }}"
  register: judged
"""

RETURN = r"""
plan:
  description: The planner's plan at the requested settings (O(step=choose)).
  returned: when O(step=choose) and O(planner) is given
  type: dict
settings:
  description: C(fraction), C(graph_bs) (null for SGLang's default) and C(reused) of the next launch.
  returned: always
  type: dict
next_plan:
  description: The plan at RV(settings) (what the next launch is predicted to do).
  returned: when O(planner) is given
  type: dict
problem:
  description: Why no first launch can be chosen (V(auto) with no fraction that fits), or empty.
  returned: when O(step=choose)
  type: str
result:
  description: The attempt's result (this node's, or the replica's verdict with C(first_failure)).
  returned: when O(step=judge)
  type: dict
summary:
  description: The attempt's row of the deployment record's C(memory.attempts).
  returned: when O(step=judge)
  type: dict
finished:
  description: Whether no launch follows.
  returned: when O(step=judge)
  type: bool
stop_reason:
  description: Why no launch follows a capture OOM that would be retried (no fraction survives it), or empty.
  returned: when O(step=judge)
  type: str
advice:
  description:
    - When the launches end on a failure, the diagnosis' suggestion as a sentence naming the inventory variable to
      set and its value (for a capture OOM, C(server_mem_fraction_static) and the fraction that fits), or empty when
      the suggestion changes no setting.
  returned: when O(step=judge)
  type: str
retry:
  description: The advice after a capture OOM (C(mem_fraction_static), C(cuda_graph_max_bs), C(reason) ...), or null.
  returned: when O(step=judge)
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.sglang.plugins.module_utils.server_policy import run_step

ARGUMENT_SPEC = dict(
    step=dict(type="str", required=True, choices=["choose", "judge"]),
    planner=dict(type="dict"),
    on_capture_oom=dict(type="str", default="retry", choices=["retry", "fail"]),
    requested_fraction=dict(type="str"),
    requested_graph_bs=dict(type="int"),
    previous=dict(type="dict", default={}),
    request=dict(type="dict", default={}),
    attempt=dict(type="int"),
    max_attempts=dict(type="int", default=3),
    fraction=dict(type="float"),
    graph_bs=dict(type="int"),
    plan=dict(type="dict"),
    node_result=dict(type="dict", default={}),
    multinode=dict(type="bool", default=False),
    verdict=dict(type="dict", default={}),
    launched=dict(type="bool", default=False),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result, error = run_step(module.params, module.check_mode)
    if error:
        module.fail_json(msg=error)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
