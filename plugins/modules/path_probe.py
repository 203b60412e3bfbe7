#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: path_probe
short_description: Stat several paths and read the small ones in one call, and look up accounts
version_added: "0.3.0"
description:
  - One round trip instead of one M(ansible.builtin.stat) or M(ansible.builtin.slurp) per path - the server stage
    reads a dozen records and markers before it changes anything, on every run.
  - For each entry of O(paths) returns, under the same name, C(stat) (C(exists), C(isdir), C(isreg), C(islnk),
    C(executable), C(size)) and, for an entry marked to be read that is a regular file of at most O(max_bytes),
    C(content) base64-encoded as M(ansible.builtin.slurp) returns it; a missing or unreadable file has no C(content).
  - Changes nothing; never fails on a missing path.
options:
  paths:
    description:
      - Name to C({path, read}); C(read) (default false) asks for the content.
    type: dict
    required: true
  users:
    description: Account names to look up (RV(users) says which exist).
    type: list
    elements: str
    default: []
  max_bytes:
    description: The largest file whose content is returned.
    type: int
    default: 1048576
  private_dirs:
    description:
      - Name to a directory that must be private to root (the build tree, the directories of secret files);
        RV(private_dirs) says for each why it cannot be, or null when it can.
      - It can when, if it exists, it is a real directory (not a symlink) owned by root, and every directory above it
        that exists is owned by root and writable by root alone (a sticky, world-writable directory such as
        C(/var/tmp) lets any account create the name first).
    type: dict
    default: {}
extends_documentation_fragment:
  - llmops.sglang.attributes
attributes:
  check_mode:
    details: Reads only; the same result in check mode.
author:
  - llmops.sglang developers (@llmops)
"""

EXAMPLES = r"""
- name: Read the records the server stage starts from
  llmops.sglang.path_probe:
    paths:
      build_record: {path: /var/lib/llmops-sglang/build.json, read: true}
      systemd: {path: /run/systemd/system}
    users: [sglang]
  register: probe
"""

RETURN = r"""
paths:
  description: Name to C({stat, content}) as described above.
  returned: always
  type: dict
users:
  description: Account name to C({exists, uid, gid, home}).
  returned: always
  type: dict
private_dirs:
  description: Name to the reason the directory cannot be private to root (words after its path), or null.
  returned: always
  type: dict
"""

import base64
import os
import pwd
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.sglang.plugins.module_utils.host_paths import private_dir_problem


def probe(path, read, max_bytes):
    out = {"path": path}
    try:
        st = os.stat(path)
    except OSError:
        out["stat"] = {"exists": False}
        try:
            out["stat"]["islnk"] = stat.S_ISLNK(os.lstat(path).st_mode)  # a dangling link
        except OSError:
            out["stat"]["islnk"] = False
        return out
    out["stat"] = {
        "exists": True,
        "isdir": stat.S_ISDIR(st.st_mode),
        "isreg": stat.S_ISREG(st.st_mode),
        "islnk": os.path.islink(path),
        "executable": os.access(path, os.X_OK) and not stat.S_ISDIR(st.st_mode),
        "size": st.st_size,
    }
    if read and stat.S_ISREG(st.st_mode) and st.st_size <= max_bytes:
        try:
            with open(path, "rb") as f:
                out["content"] = base64.b64encode(f.read(max_bytes + 1)[:max_bytes]).decode("ascii")
        except OSError:
            pass
    return out


def main():
    module = AnsibleModule(
        argument_spec=dict(
            paths=dict(type="dict", required=True),
            users=dict(type="list", elements="str", default=[]),
            max_bytes=dict(type="int", default=1048576),
            private_dirs=dict(type="dict", default={}),
        ),
        supports_check_mode=True,
    )
    result = {}
    for name, given in module.params["paths"].items():
        entry = {"path": given} if isinstance(given, str) else given
        if not isinstance(entry, dict) or not str(entry.get("path") or "").startswith("/"):
            module.fail_json(msg=f"Expected an absolute path under paths.{name}; found {entry!r}. Nothing was read.")
        result[name] = probe(str(entry["path"]), bool(entry.get("read")), module.params["max_bytes"])
    users = {}
    for name in module.params["users"]:
        try:
            u = pwd.getpwnam(name)
            users[name] = {"exists": True, "uid": u.pw_uid, "gid": u.pw_gid, "home": u.pw_dir}
        except KeyError:
            users[name] = {"exists": False}
    private = {name: private_dir_problem(str(path)) for name, path in module.params["private_dirs"].items()}
    module.exit_json(changed=False, paths=result, users=users, private_dirs=private)


if __name__ == "__main__":
    main()
