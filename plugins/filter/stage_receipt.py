# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.stage_settings, stage_input_digests and collection_digest (docs: plugins/filter/*.yml).

What a stage's receipt compares (plugins/module_utils/stage_receipt.py owns the rule; this file adapts it to Jinja
and reads the roles' own declarations of their inputs, meta/argument_specs.yml, from this collection)."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os

import yaml

from ansible_collections.llmops.sglang.plugins.module_utils import stage_receipt as _receipts

COLLECTION = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PUBLISHED = "Published by this role at run time."
_SPECS = {}
_DIGESTS = {}


def _specs():
    if not _SPECS:
        roles = os.path.join(COLLECTION, "roles")
        for role in sorted(os.listdir(roles)):
            path = os.path.join(roles, role, "meta", "argument_specs.yml")
            if os.path.isfile(path):
                with open(path, encoding="utf-8") as f:
                    _SPECS[role] = (yaml.safe_load(f) or {}).get("argument_specs") or {}
    return _SPECS


def _published():
    names = set()
    for entries in _specs().values():
        for entry in entries.values():
            for name, option in ((entry or {}).get("options") or {}).items():
                if PUBLISHED in ((option or {}).get("description") or []):
                    names.add(name)
    return names


def stage_settings(roles):
    """The settings the roles declare in any entry point (run-time facts, published by some role, left out)."""
    specs, published, names = _specs(), _published(), set()
    for role in roles:
        short = str(role).rsplit(".", 1)[-1]
        if short not in specs:
            raise ValueError("Expected a role of llmops.sglang; found %r" % role)
        for entry in specs[short].values():
            names.update(((entry or {}).get("options") or {}).keys())
    return sorted(names - published)


def stage_input_digests(values):
    """{name: digest} of the inputs (volatile GPU fields left out): only digests reach the host."""
    return _receipts.input_digests(dict(values))


def collection_digest(roles):
    """Digest of the roles' files and of the collection's plugins: changed code is a changed input."""
    key = tuple(sorted(str(r).rsplit(".", 1)[-1] for r in roles))
    if key not in _DIGESTS:
        h = hashlib.sha256()
        tops = [os.path.join(COLLECTION, "roles", r) for r in key] + [os.path.join(COLLECTION, "plugins")]
        for top in tops:
            for base, dirs, files in os.walk(top):
                dirs[:] = sorted(d for d in dirs if d != "__pycache__")
                for name in sorted(files):
                    if name.endswith((".pyc", ".pyo")):
                        continue
                    path = os.path.join(base, name)
                    h.update(os.path.relpath(path, COLLECTION).encode("utf-8") + b"\0")
                    with open(path, "rb") as f:
                        h.update(f.read())
        _DIGESTS[key] = h.hexdigest()[:16]
    return _DIGESTS[key]


class FilterModule(object):
    def filters(self):
        return {
            "collection_digest": collection_digest,
            "stage_input_digests": stage_input_digests,
            "stage_settings": stage_settings,
        }
