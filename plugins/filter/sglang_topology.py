# Copyright: (c) llmops.sglang contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
"""llmops.sglang.fleet_topology: the replicas, node ranks and head addresses (docs: plugins/filter/fleet_topology.yml).

The arithmetic lives in module_utils/sglang_topology.py; this file only adapts it to Jinja."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_topology import TopologyError
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_topology import fleet_topology as _fleet_topology


def fleet_topology(hosts, hostvars, defaults=None):
    try:
        return _fleet_topology(hosts, hostvars, defaults)
    except TopologyError as exc:
        raise AnsibleFilterError(str(exc)) from None


class FilterModule(object):
    def filters(self):
        return {"fleet_topology": fleet_topology}
