#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: deployment_record
short_description: Write the record of what runs on a host, and the steps of a roll, into deployment.json
version_added: "0.3.0"
description:
  - The only writer of C(deployment.json) (C(llmops_state_dir)). With O(record) it writes the server role's record
    of the launch, carrying what ran before it (C(previous)) and the last roll's events from the record on the host.
    With O(events) it adds steps of a roll (drained, restarted, ready, failed, rolled back, rejoined) to the record's
    C(roll), where they happen; an event of another roll (O(roll)) starts the list again.
  - The schema, the events and the carrying rules are in C(plugins/module_utils/deployment_record.py).
  - The file is written 0600 root, to a temporary file renamed into place (never through a symlink); only when its
    content changes. Check mode writes nothing and says whether it would.
  - Every string is scrubbed of O(secrets) and of secret-looking assignments (C(api_key='...')) and bearer tokens.
options:
  path:
    description: The record (C(llmops_state_dir/deployment.json)).
    type: path
    required: true
  record:
    description: The server role's record (roles/server/tasks/record.yml). Exclusive with O(events).
    type: dict
  previous:
    description:
      - Previous values a playbook knows outright (C(driver), C(model)); without them a value that changed moves the
        old one to C(previous).
    type: dict
    default: {}
  events:
    description:
      - Roll events to add, each a mapping with C(event), optional C(at) (C(YYYY-MM-DDTHH:MM:SSZ), else now) and
        the event's detail. Exclusive with O(record).
    type: list
    elements: dict
  roll:
    description: The roll the O(events) belong to (C(fleet_roll_id), set by playbooks/fleet_roll_plan.yml).
    type: str
    default: ""
  secrets:
    description: Values that must not appear in the record (the replica's keys); never logged.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - llmops.sglang.attributes
attributes:
  check_mode:
    details: Reports whether deployment.json would change and writes nothing.
author:
  - llmops.sglang developers (@llmops)
"""

EXAMPLES = r"""
- name: Record that the replica left the router and drained
  llmops.sglang.deployment_record:
    path: /var/lib/llmops-sglang/deployment.json
    roll: 20261202T045501Z
    events:
      - {event: drained, in_flight_left: 0}
"""

RETURN = r"""
record:
  description: The record as written (or as it would be, in check mode).
  returned: always
  type: dict
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils import deployment_record as dr
from ansible_collections.llmops.sglang.plugins.module_utils.private_files import write_whole


def _read(path):
    try:
        with open(path, "rb") as fh:
            data = json.loads(fh.read().decode("utf-8"))
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, UnicodeDecodeError):
        return {}  # an unreadable record is replaced, never a reason to stop a roll
    return data if isinstance(data, dict) else {}


def _write(path, text):
    write_whole(path, text, 0o600)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            record=dict(type="dict"),
            previous=dict(type="dict", default={}),
            events=dict(type="list", elements="dict"),
            roll=dict(type="str", default=""),
            secrets=dict(type="list", elements="str", default=[], no_log=True),
        ),
        mutually_exclusive=[("record", "events")],
        required_one_of=[("record", "events")],
        supports_check_mode=True,
    )
    p = module.params
    old = _read(p["path"])
    try:
        if p["record"] is not None:
            new = dr.merge_record(old, p["record"], p["previous"], p["secrets"])
        else:
            new = dr.add_events(old, p["roll"], p["events"], p["secrets"])
    except dr.RecordError as exc:
        module.fail_json(msg="deployment record: %s. Nothing was written." % exc)
    text = json.dumps(new, indent=4, sort_keys=True) + "\n"
    changed = new != old
    if changed and not module.check_mode:
        if not os.path.isdir(os.path.dirname(p["path"])):
            module.fail_json(msg="Expected the directory of %s to exist; found none. Run the server stage." % p["path"])
        _write(p["path"], text)
    module.exit_json(changed=changed, record=new)


if __name__ == "__main__":
    main()
