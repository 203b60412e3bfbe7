# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The attributes every module of llmops.sglang declares (extends_documentation_fragment: llmops.sglang.attributes);
a module adds what it does in check mode (attributes.check_mode.details) and overrides a support level it differs
in."""

from __future__ import annotations


class ModuleDocFragment(object):
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check mode; it then changes nothing on the host (what it still reads or decides is in the
      details).
    support: full
  diff_mode:
    description: Would show the difference it makes with C(--diff).
    support: none
    details: The module's results say what it changed or would change; it returns no diff.
  platform:
    description: The systems the module runs on.
    support: full
    platforms: debian
    details: Debian 12, and Ubuntu 22.04 and 24.04 (the collection's support matrix, docs/gpu-stack.md).
"""
