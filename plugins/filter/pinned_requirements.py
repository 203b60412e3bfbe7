# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""llmops.sglang.lock_problem, lock_unmet (docs: plugins/filter/*.yml).

The knowledge lives in module_utils/pinned_requirements.py; this file only adapts it to Jinja."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ansible.errors import AnsibleFilterError
from ansible_collections.llmops.sglang.plugins.module_utils import pinned_requirements


def lock_problem(text, package, version):
    """Why ``text`` is not a hash-pinned lock of ``package``==``version``; empty when it is one."""
    if text is not None and not isinstance(text, str):
        raise AnsibleFilterError(
            "lock_problem: expected the text of a requirements file; found %s" % type(text).__name__
        )
    return pinned_requirements.problem(text or "", str(package), str(version)) or ""


def lock_unmet(text, installed):
    """The pins of the lock ``text`` that ``installed`` ({name: version}) does not meet."""
    if not hasattr(installed, "items"):
        raise AnsibleFilterError(
            "lock_unmet: expected a dict of installed versions; found %s" % type(installed).__name__
        )
    return pinned_requirements.unmet(text or "", dict(installed.items()))


class FilterModule(object):
    def filters(self):
        return {"lock_problem": lock_problem, "lock_unmet": lock_unmet}
