# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.build_set_name (docs: plugins/filter/build_set_name.yml).

The naming rule lives in module_utils/build_sets.py; this file only adapts it to Jinja."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.sglang.plugins.module_utils.build_sets import set_name


def build_set_name(request, label=""):
    """LABEL-FINGERPRINT of a build request (module_utils/build_sets.py set_name)."""
    try:
        return set_name(dict(request) if hasattr(request, "items") else request, label)
    except ValueError as exc:
        raise AnsibleFilterError("build_set_name: %s" % exc) from None


class FilterModule(object):
    def filters(self):
        return {"build_set_name": build_set_name}
