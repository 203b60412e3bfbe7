#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: stage_receipt
short_description: Whether a stage that finished on this host still matches its inputs and the state it left
version_added: "0.3.0"
description:
  - V(check) reads the stage's receipt in O(directory) and compares it, item by item, with O(inputs) and with the host
    state the receipt lists (each file's content, mode and owner; a directory's entries; the packages matching
    patterns with their versions and holds; services' enabled and active states; users and groups). Returns
    RV(converged) and, when not, RV(differences). Changes nothing.
  - V(record) writes the receipt (0600, in a 0700 directory) after the stage finished - O(inputs) and the state of
    everything in O(watch) as it is now. In check mode it writes nothing.
  - The rules are in C(plugins/module_utils/stage_receipt.py); the playbooks call this module through the
    C(stage_check) and C(stage_record) tasks of the C(llmops_defaults) role.
options:
  directory:
    description: Directory of the receipts (C(llmops_state_dir)/stages).
    type: path
    required: true
  stage:
    description: The stage's name; the receipt is C(<directory>/<stage>.json).
    type: str
    required: true
  state:
    description: V(check) or V(record).
    type: str
    choices: [check, record]
    default: check
  inputs:
    description:
      - Input name to a digest of its value (the C(llmops.sglang.stage_input_digests) filter computes them on the
        controller, so no value reaches the host).
    type: dict
    default: {}
  watch:
    description:
      - With V(record), what the stage left on the host. Keys C(files), C(trees) (directories whose entry names
        count), C(packages) (shell patterns matched against binary and source package names), C(services),
        C(users), C(groups); each a list. A list of such dicts (one per role) is merged.
    type: raw
    default: {}
extends_documentation_fragment:
  - llmops.sglang.attributes
attributes:
  check_mode:
    details: V(check) reads only; V(record) reports whether the receipt would change and writes nothing.
author:
  - llmops.sglang developers (@llmops)
"""

EXAMPLES = r"""
- name: Check whether the build stage's receipt still matches
  llmops.sglang.stage_receipt:
    directory: /var/lib/llmops-sglang/stages
    stage: build
    inputs: "{{ inputs | llmops.sglang.stage_input_digests }}"
  register: receipt
"""

RETURN = r"""
converged:
  description: With V(check), whether every input and every watched item matches the receipt.
  returned: always
  type: bool
differences:
  description: With V(check), what differs, one sentence each (at most 20).
  returned: always
  type: list
  elements: str
msg:
  description: One line for the operator.
  returned: always
  type: str
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.sglang.plugins.module_utils import stage_receipt as receipts
from ansible_collections.llmops.sglang.plugins.module_utils.private_files import write_private_files


def read_receipt(path):
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def main():
    module = AnsibleModule(
        argument_spec=dict(
            directory=dict(type="path", required=True),
            stage=dict(type="str", required=True),
            state=dict(type="str", choices=["check", "record"], default="check"),
            inputs=dict(type="dict", default={}),
            watch=dict(type="raw", default={}),
        ),
        supports_check_mode=True,
    )
    p = module.params
    stage = p["stage"]
    if not stage.replace("_", "").isalnum():
        module.fail_json(msg=f"Expected a stage name of letters, digits and underscores; found {stage!r}.")
    path = os.path.join(p["directory"], f"{stage}.json")
    inputs = {str(k): str(v) for k, v in (p["inputs"] or {}).items()}
    if p["state"] == "check":
        found = receipts.differences(read_receipt(path), inputs, stage)
        msg = f"the {stage} stage matches its receipt: nothing to do"
        if found:
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            msg = f"the {stage} stage runs: {found[0]}{more}"
        module.exit_json(changed=False, converged=not found, differences=found[:20], msg=msg)
    try:
        new = receipts.new_receipt(stage, inputs, p["watch"] or {})
    except ValueError as e:
        module.fail_json(msg=f"Expected a watch list of the {stage} stage; {e}. Nothing was written.")
    old = read_receipt(path)
    changed = old != new
    if changed and not module.check_mode:
        try:
            write_private_files(p["directory"], {f"{stage}.json": json.dumps(new, indent=1, sort_keys=True) + "\n"})
        except (OSError, ValueError) as e:
            module.fail_json(msg=f"Expected to write the {stage} stage's receipt in {p['directory']}; found: {e}. "
                             "The stage itself finished; its next run repeats every task.")  # fmt: skip
    module.exit_json(changed=changed, converged=True, differences=[],
                     msg=f"recorded the {stage} stage's receipt ({len(new['state'])} items watched)")  # fmt: skip


if __name__ == "__main__":
    main()
