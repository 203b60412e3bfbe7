# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.server_node_result, server_restart_plan (docs: plugins/filter/<name>.yml).

The decisions live in module_utils/server_policy.py; this file only adapts them to Jinja."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.sglang.plugins.module_utils.server_policy import PolicyError
from ansible_collections.llmops.sglang.plugins.module_utils.server_policy import node_result as _node_result
from ansible_collections.llmops.sglang.plugins.module_utils.server_policy import restart_plan as _restart_plan


def server_node_result(own):
    if own is not None and not isinstance(own, dict):
        raise AnsibleFilterError(
            "server_node_result: expected a registered llmops.sglang.sglang_server result (a dict); found %s"
            % type(own).__name__
        )
    return _node_result(own)


def server_restart_plan(changes, attempt, drain_configured=False, allow_downtime=False, check_mode=False):
    if not isinstance(changes, dict):
        raise AnsibleFilterError(
            "server_restart_plan: expected a dict of restart causes to booleans; found %s" % type(changes).__name__
        )
    try:
        return _restart_plan(
            dict((k, bool(v)) for k, v in changes.items()),
            int(attempt),
            bool(drain_configured),
            bool(allow_downtime),
            bool(check_mode),
        )
    except (PolicyError, TypeError, ValueError) as exc:
        raise AnsibleFilterError("server_restart_plan: %s" % exc) from None


class FilterModule(object):
    def filters(self):
        return {"server_node_result": server_node_result, "server_restart_plan": server_restart_plan}
