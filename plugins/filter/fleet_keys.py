# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.held_keys (docs: plugins/filter/held_keys.yml).

The knowledge lives in module_utils/private_files.py; this file only adapts it to Jinja."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import binascii

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.sglang.plugins.module_utils import private_files


def held_keys(content, wanted):
    """{name: key} of ``wanted`` ({name on the control node: field in the file}) found in ``content``, a key file's
    text as slurp returns it (base64); empty or missing content gives {}."""
    if not hasattr(wanted, "items"):
        raise AnsibleFilterError("held_keys: expected a dict of key name to field; found %s" % type(wanted).__name__)
    if not content:
        return {}
    try:
        text = base64.b64decode(str(content), validate=True).decode("utf-8")
    except (binascii.Error, ValueError):
        raise AnsibleFilterError("held_keys: expected a key file's content as slurp returns it (base64)") from None
    return private_files.held_keys(text, dict(wanted.items()))


class FilterModule(object):
    def filters(self):
        return {"held_keys": held_keys}
