# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.inventory_problems, key_problems, path_problems, account_problems, unit_problems
(docs: plugins/filter/*.yml).

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


def key_problems(keys, required=None):
    """One sentence per bad API key of ``keys`` ({variable: value}); values are never shown."""
    if not hasattr(keys, "items"):
        found = type(keys).__name__
        raise AnsibleFilterError("key_problems: expected a dict of variable name to key; found %s" % found)
    return inventory_values.key_problems(dict(keys.items()), tuple(required or ()))


def path_problems(paths, owned=None, follows=None):
    """One sentence per bad path of ``paths`` ({variable: value}); ``owned`` names the directories the collection
    owns (chowns or prunes), which must not be system directories."""
    if not hasattr(paths, "items"):
        found = type(paths).__name__
        raise AnsibleFilterError("path_problems: expected a dict of variable name to path; found %s" % found)
    return inventory_values.path_problems(dict(paths.items()), tuple(owned or ()), dict(follows or {}))


def account_problems(accounts, allow_root=False):
    """One sentence per bad account name of ``accounts`` ({variable: value}); root is refused unless allowed."""
    if not hasattr(accounts, "items"):
        found = type(accounts).__name__
        raise AnsibleFilterError("account_problems: expected a dict of variable name to account; found %s" % found)
    return inventory_values.account_problems(dict(accounts.items()), bool(allow_root))


def unit_problems(units):
    """One sentence per value of ``units`` ({variable: value}) that is not a systemd service name."""
    if not hasattr(units, "items"):
        found = type(units).__name__
        raise AnsibleFilterError("unit_problems: expected a dict of variable name to unit name; found %s" % found)
    return inventory_values.unit_problems(dict(units.items()))


class FilterModule(object):
    def filters(self):
        return {
            "inventory_problems": inventory_problems,
            "key_problems": key_problems,
            "path_problems": path_problems,
            "account_problems": account_problems,
            "unit_problems": unit_problems,
        }
