#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: host_state
short_description: Read what a stage would otherwise ask for task by task, in one call
version_added: "0.4.0"
description:
  - Returns, in one module call, the checksums, ownership and modes, JSON records, package states, unit states,
    accounts and probe outputs a stage of the collection needs to decide what to change on a host (the knowledge is
    in C(plugins/module_utils/host_state.py)). A converged host then costs one round trip per stage instead of one
    per question; every change is still decided on the host's real state.
  - Reads only; never changes anything, supports check mode. Secrets are never returned - O(env_keys) gives the
    variable names of an EnvironmentFile, not their values.
options:
  files:
    description: Paths whose sha1 (the checksum of the copy and template modules) is returned; null when missing.
    type: list
    elements: path
    default: []
  paths:
    description: Paths whose kind, owner, group, mode and executability are returned; null when missing.
    type: list
    elements: path
    default: []
  json:
    description: JSON files whose content is returned; null when missing or not JSON.
    type: list
    elements: path
    default: []
  env_keys:
    description: EnvironmentFiles whose variable names (never values) are returned.
    type: list
    elements: path
    default: []
  glob_read:
    description: Glob patterns; the first MiB of every matching file is returned base64-encoded (sysfs, efivars).
    type: list
    elements: str
    default: []
  users:
    description: Accounts whose uid, primary group, home and shell are returned; null when missing.
    type: list
    elements: str
    default: []
  groups:
    description: Groups whose existence is returned.
    type: list
    elements: str
    default: []
  packages:
    description: Debian packages whose version, installed and held state are returned (one dpkg-query).
    type: list
    elements: str
    default: []
  all_packages:
    description: Return every package dpkg knows, with its version, state and source package.
    type: bool
    default: false
  units:
    description: systemd units whose ActiveState and UnitFileState are returned (one systemctl show).
    type: list
    elements: str
    default: []
  commands:
    description:
      - Read-only probe commands to run, as a mapping of a name to an argv list; each result is C({rc, stdout,
        stderr}) (rc null when the command cannot start). Only for commands that change nothing.
    type: dict
    default: {}
author:
  - llmops.sglang developers (@llmops)
"""

EXAMPLES = r"""
- name: Read the server stage's state on the host
  llmops.sglang.host_state:
    files: [/etc/systemd/system/sglang.service]
    json: [/var/lib/llmops-sglang/deployment.json]
    packages: [logrotate]
    units: [sglang.service]
  register: state
"""

RETURN = r"""
sha1:
  description: Path to sha1 (null when missing).
  returned: always
  type: dict
paths:
  description: Path to C({kind, uid, gid, owner, group, mode, executable}) (null when missing).
  returned: always
  type: dict
json:
  description: Path to the parsed content (null when missing or not JSON).
  returned: always
  type: dict
env_keys:
  description: Path to the list of variable names (null when missing).
  returned: always
  type: dict
glob_read:
  description: Pattern to a mapping of each matching path to its first MiB, base64.
  returned: always
  type: dict
users:
  description: Account to C({uid, group, home, shell}) (null when missing).
  returned: always
  type: dict
groups:
  description: Group to true when it exists.
  returned: always
  type: dict
packages:
  description: Package to C({version, installed, held}).
  returned: always
  type: dict
all_packages:
  description: Every package dpkg knows, to C({version, installed, held, source}).
  returned: when O(all_packages) is true
  type: dict
units:
  description: Unit to C({active, enabled}).
  returned: always
  type: dict
commands:
  description: Name to C({rc, stdout, stderr}).
  returned: always
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.sglang.plugins.module_utils.host_state import gather


def main():
    module = AnsibleModule(
        argument_spec=dict(
            files=dict(type="list", elements="path", default=[]),
            paths=dict(type="list", elements="path", default=[]),
            json=dict(type="list", elements="path", default=[]),
            env_keys=dict(type="list", elements="path", default=[]),
            glob_read=dict(type="list", elements="str", default=[]),
            users=dict(type="list", elements="str", default=[]),
            groups=dict(type="list", elements="str", default=[]),
            packages=dict(type="list", elements="str", default=[]),
            all_packages=dict(type="bool", default=False),
            units=dict(type="list", elements="str", default=[]),
            commands=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    for name, argv in module.params["commands"].items():
        if not isinstance(argv, list) or not argv or not all(isinstance(a, (str, int, float)) for a in argv):
            module.fail_json(
                msg="host_state: expected commands.%s to be a non-empty list of arguments; found %r. Give the argv as "
                "a YAML list." % (name, argv)
            )
    module.exit_json(changed=False, **gather(module.params))


if __name__ == "__main__":
    main()
