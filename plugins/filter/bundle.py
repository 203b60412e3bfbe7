# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.bundle_target (docs: plugins/filter/bundle_target.yml).

The knowledge lives in module_utils/bundle_manifest.py; this file only adapts it to Jinja."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible_collections.llmops.sglang.plugins.module_utils import bundle_manifest as _manifest


def _plain(value):
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return str(value) if value is not None and not isinstance(value, (bool, int, float)) else value


def bundle_target(target):
    """{target, problem}: the bundle's target in its canonical form, or the sentence that refuses it."""
    try:
        return {"target": _manifest.check_target(_plain(target)), "problem": ""}
    except _manifest.ManifestError as e:
        return {"target": None, "problem": str(e)}


class FilterModule(object):
    def filters(self):
        return {"bundle_target": bundle_target}
