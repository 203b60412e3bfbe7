# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.fleet_topology, group_verdict, fleet_roll_batches (docs: plugins/filter/<name>.yml).

The arithmetic lives in module_utils/sglang_topology.py; this file only adapts it to Jinja."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_group import group_verdict as _group_verdict
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_topology import TopologyError
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_topology import fleet_topology as _fleet_topology
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_topology import roll_batches as _roll_batches


def fleet_topology(hosts, hostvars, defaults=None, on_error="raise", gpus=None):
    try:
        return _fleet_topology(hosts, hostvars, defaults, gpus)
    except TopologyError as exc:
        if on_error == "return":  # a role's input check reports it as its own one-line refusal
            return {"error": str(exc), "hosts": {}, "replicas": []}
        raise AnsibleFilterError(str(exc)) from None


def group_verdict(topology, hostvars, variable):
    """Per multi-node replica: ready, or the node and rank that failed first (module_utils/sglang_group.py)."""
    if not isinstance(topology, dict) or "replicas" not in topology:
        raise AnsibleFilterError(
            "group_verdict: expected the result of llmops.sglang.fleet_topology; found %r. Apply it as "
            "topology | llmops.sglang.group_verdict(hostvars, 'VARIABLE')." % (type(topology).__name__,)
        )
    results = {}
    for host in topology["hosts"]:
        value = hostvars[host].get(variable) if host in hostvars else None
        results[host] = dict(value) if isinstance(value, dict) and value else None
    return _group_verdict(topology, results)


def fleet_roll_batches(replicas, batch_size):
    """{"batches": {replica: index}} or {"error": one line} for router_roll_batch_size (module_utils)."""
    try:
        return {"batches": _roll_batches(replicas, batch_size)}
    except TopologyError as exc:
        return {"error": str(exc), "batches": {}}


class FilterModule(object):
    def filters(self):
        return {
            "fleet_topology": fleet_topology,
            "group_verdict": group_verdict,
            "fleet_roll_batches": fleet_roll_batches,
        }
