# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.driver_plan (docs: plugins/filter/driver_plan.yml).

The package names and the rules live in module_utils/driver_packages.py; this file only adapts them to Jinja."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.sglang.plugins.module_utils import driver_packages as _packages


def _plain(value):
    """Templated lists and mappings as plain Python values."""
    if isinstance(value, dict):
        return dict((str(k), _plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def driver_plan(request):
    """{problem, packages, persistenced_package, known_branches} for a driver request."""
    return _packages.plan(_plain(request) if isinstance(request, dict) else {})


class FilterModule(object):
    def filters(self):
        return {"driver_plan": driver_plan}
