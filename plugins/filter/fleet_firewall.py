# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.fleet_firewall (docs: plugins/filter/fleet_firewall.yml).

The knowledge lives in module_utils/fleet_firewall.py; this file only adapts it to Jinja. It runs on the controller,
so host names in ansible_host are resolved there."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.sglang.plugins.module_utils.fleet_firewall import FirewallError
from ansible_collections.llmops.sglang.plugins.module_utils.fleet_firewall import plan as _plan


def fleet_firewall(host, hostvars, fleet, settings):
    """{"state", "ruleset", "summary"} for ``host``, or {"error": one line} for bad input (never a traceback)."""
    if not isinstance(host, str) or not hasattr(settings, "get"):
        raise AnsibleFilterError(
            "fleet_firewall: expected inventory_hostname | llmops.sglang.fleet_firewall(hostvars, llmops_fleet, "
            "{...settings...}); found %s and %s." % (type(host).__name__, type(settings).__name__)
        )
    try:
        return _plan(host, fleet, hostvars, dict(settings))
    except FirewallError as exc:
        return {"error": str(exc), "state": None, "ruleset": "", "summary": ""}


class FilterModule(object):
    def filters(self):
        return {"fleet_firewall": fleet_firewall}
