# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.gpu_compat and fabricmanager_package (docs: plugins/filter/gpu_compat.yml, fabricmanager_package.yml).

The rules and their data live in module_utils/gpu_compat.py; this file only adapts them to Jinja."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.sglang.plugins.module_utils import gpu_compat as _compat


def _plain(value):
    """Templated lists and mappings as plain Python values."""
    if isinstance(value, dict):
        return dict((k, _plain(v)) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def gpu_compat(request, gpus, scope="preflight"):
    try:
        return _compat.evaluate(_plain(request), _plain(gpus), scope)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc)) from None


def fabricmanager_package(branch, os_key):
    return _compat.fabricmanager(os_key, branch)


class FilterModule(object):
    def filters(self):
        return {"gpu_compat": gpu_compat, "fabricmanager_package": fabricmanager_package}
