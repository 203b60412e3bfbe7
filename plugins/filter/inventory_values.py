# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.inventory_problems (docs: plugins/filter/inventory_problems.yml).

The knowledge lives in module_utils/inventory_values.py; this file only adapts it to Jinja."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.sglang.plugins.module_utils import inventory_values


def inventory_problems(hosts, hostvars):
    """One sentence per inventory value of ``hosts`` that would reach a unit, env file or argv and is not safe."""
    if isinstance(hosts, str) or not hasattr(hosts, "__iter__"):
        raise AnsibleFilterError("inventory_problems: expected a list of host names; found %s" % type(hosts).__name__)
    return inventory_values.inventory_problems(list(hosts), hostvars)


class FilterModule(object):
    def filters(self):
        return {"inventory_problems": inventory_problems}
