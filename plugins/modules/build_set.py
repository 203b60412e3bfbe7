#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: build_set
short_description: Build sets and model revisions side by side, the pointer the server uses, retention, disk check
version_added: "0.3.0"
description:
  - Each build set (torch, SGLang, sgl-kernel, flash-attn) is a virtualenv in O(root) named by its request's
    fingerprint. The server runs from O(pointer), a symlink to one set, switched atomically (a new symlink renamed
    over the old one). C(ROOT/history.json) keeps the order of the sets the pointer named, newest first (with
    O(kind=model) C(.NAME.history.json) beside O(pointer), each host's own, also where O(root) is a share).
  - V(inspect) reads the state and, with O(name), what switching to it would do; changes nothing.
  - V(prepare) runs before a new set is installed - removes the sets beyond O(keep), then checks the free disk against
    the largest set on the host (or O(min_free_gib)); fails in one line before anything is installed when it does
    not fit.
  - V(point) points O(pointer) at O(name) on a first install only (no pointer yet, or one naming a set that was never
    completed, so nothing runs from it), also before the set is complete; otherwise it changes nothing.
  - V(switch) points O(pointer) at O(name) (a set name or V(previous)), records the history and removes the sets
    beyond O(keep). An unkeyed virtualenv at O(pointer) (before build sets) becomes the set C(legacy-TIME) first.
  - With O(kind=model) the same rules keep a model's revisions, one directory per commit in O(root)
    (C(llmops_model_revisions_dir)), O(pointer) being C(llmops_model_dir); a revision is complete once the model stage
    wrote its C(.llmops-snapshot.json). V(prepare) then adopts a complete model directory from before revisions (its
    marker names the commit it becomes; an unfinished one is refused) and removes the revisions beyond O(keep); the
    free disk is checked by the download itself (M(llmops.sglang.hf_snapshot)).
  - The naming, retention, disk and switch rules are in C(plugins/module_utils/build_sets.py).
options:
  kind:
    description: What the directories hold - V(build) sets (virtualenvs) or V(model) revisions.
    type: str
    choices: [build, model]
    default: build
  root:
    description: Directory holding one directory per build set (C(llmops_build_sets_dir)).
    type: path
    required: true
  pointer:
    description: The symlink the server runs from (C(llmops_venv)).
    type: path
    required: true
  action:
    description: What to do.
    type: str
    choices: [inspect, prepare, point, switch]
    default: inspect
  name:
    description:
      - The set or revision (a name, V(previous) or V(current) for V(switch) and V(inspect)); empty for V(inspect) reads
        the state.
    type: str
    default: ""
  keep:
    description: How many sets before the current one are kept for rollback (C(llmops_build_sets_keep)).
    type: int
    default: 2
  min_free_gib:
    description: Free disk a new set needs at least, also when no set exists yet to measure.
    type: float
    default: 10.0
  legacy_sglang_record:
    description:
      - For V(prepare) on a host whose O(pointer) is still an unkeyed virtualenv - the build stage's SGLang record
        describing it (C(sglang.json)), kept in the legacy set so that a rollback to it knows its release.
    type: path
extends_documentation_fragment:
  - llmops.sglang.attributes
attributes:
  check_mode:
    details: Reports the set it would create, point to or remove, and the disk check, and writes nothing.
author:
  - llmops.sglang developers (@llmops)
"""

EXAMPLES = r"""
- name: Point the server at the new build set
  llmops.sglang.build_set:
    root: /opt/sglang/venvs
    pointer: /opt/sglang/venv
    action: switch
    name: v0.5.9-3f2a9c0d4b1e7a55
"""

RETURN = r"""
current:
  description: The set the pointer names after the action (null when there is none).
  returned: always
  type: str
previous:
  description: The set a rollback would go to after the action.
  returned: always
  type: str
history:
  description: The sets the pointer named, newest first.
  returned: always
  type: list
complete:
  description: The complete sets on the host.
  returned: always
  type: list
pointer_kind:
  description: C(link), C(absent) or C(dir) (an unkeyed virtualenv) before the action.
  returned: always
  type: str
plan:
  description: For O(name) with V(inspect) and V(switch) - C(target), C(switch) (whether the pointer changes), C(error).
  returned: when O(name) is given
  type: dict
removed:
  description: The sets removed by retention (would be, in check mode).
  returned: always
  type: list
disk:
  description: For V(prepare) of a set not yet complete - C(ok), C(free_bytes), C(need_bytes).
  returned: when checked
  type: dict
"""

import json
import os
import shutil
import time

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils import build_sets as bs
from ansible_collections.llmops.sglang.plugins.module_utils.private_files import write_whole


def _size(path: str) -> int:
    total = 0
    for base, dirs, files in os.walk(path):
        for n in dirs + files:
            try:
                total += os.lstat(os.path.join(base, n)).st_blocks * 512
            except OSError:
                pass
    return total


def _free(path: str) -> int:
    while not os.path.isdir(path):
        path = os.path.dirname(path) or "/"
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def _write_atomic(path: str, text: str) -> None:
    write_whole(path, text, 0o644)


class State:
    def __init__(self, root: str, pointer: str, kind: str = "build"):
        self.root, self.pointer, self.kind_of = root.rstrip("/"), pointer.rstrip("/"), kind
        marker = bs.KINDS[kind]["marker"]
        if os.path.islink(self.pointer):
            self.kind = "link"
            self.current = bs.current_of(os.readlink(self.pointer), self.root)
        elif os.path.isdir(self.pointer):
            self.kind, self.current = "dir", None
        else:
            self.kind, self.current = "absent", None
        names = sorted(os.listdir(self.root)) if os.path.isdir(self.root) else []
        self.on_disk = [n for n in names if bs.NAME_RE.match(n) and os.path.isdir(os.path.join(self.root, n))]
        self.complete = [n for n in self.on_disk if os.path.isfile(os.path.join(self.root, n, marker))]
        # what retention may remove: the directories that show they are the collection's own (KINDS[kind]["owned"])
        self.owned = [
            n
            for n in self.on_disk
            if any(os.path.exists(os.path.join(self.root, n, f)) for f in bs.KINDS[kind]["owned"])
        ]
        self.history_file = bs.history_path(self.root, self.pointer, kind)
        # a model's history in ROOT, where earlier releases kept it, is read until the first write of its own
        legacy_history = os.path.join(self.root, bs.HISTORY)
        try:
            with open(
                self.history_file if os.path.exists(self.history_file) else legacy_history, encoding="utf-8"
            ) as fh:
                saved = json.load(fh).get("history", [])
        except (OSError, ValueError, AttributeError):
            saved = []
        self.saved = saved if isinstance(saved, list) else []
        self.history = bs.ordered_history(self.saved, self.current, self.on_disk)

    def report(self) -> dict:
        return {
            "current": self.current,
            "previous": bs.previous_of(self.history, self.current, self.complete),
            "history": self.history,
            "complete": self.complete,
            "pointer_kind": self.kind,
        }


def _legacy_name(module, st: State) -> str:
    """The name an unkeyed directory at the pointer gets in the root: legacy-TIME, or a model snapshot's commit."""
    if st.kind_of == "model":
        try:
            with open(os.path.join(st.pointer, bs.KINDS["model"]["marker"]), encoding="utf-8") as fh:
                commit = json.load(fh).get("commit")
        except (OSError, ValueError, AttributeError):
            commit = None
        if not isinstance(commit, str) or not bs.NAME_RE.match(commit):
            module.fail_json(
                msg=f"Expected {st.pointer} (llmops_model_dir) to be absent or a link into {st.root} "
                "(llmops_model_revisions_dir); found a directory without a complete snapshot (an interrupted download "
                "of an earlier release of the collection). Move it away or remove it, then run the model stage again. "
                "Nothing was changed."
            )
        return commit
    return bs.LEGACY_PREFIX + time.strftime("%Y%m%d%H%M%S", time.gmtime(os.stat(st.pointer).st_mtime))


def _adopt_legacy(module, st: State, record: str | None) -> str:
    """Move an unkeyed directory at the pointer into the root (a legacy set, a revision) and point the pointer at it."""
    legacy = _legacy_name(module, st)
    if st.kind_of == "model" and os.path.exists(os.path.join(st.root, legacy)):
        module.fail_json(
            msg=f"Expected {st.pointer} (llmops_model_dir) to be a link into {st.root}; found a directory holding the "
            f"commit {legacy}, which {st.root} holds too. Remove one of them, then run again. Nothing was changed."
        )
    if not module.check_mode:
        os.makedirs(st.root, mode=0o755, exist_ok=True)
        os.rename(st.pointer, os.path.join(st.root, legacy))
        os.symlink(os.path.join(st.root, legacy), st.pointer)  # the same files under the same path
        if record and os.path.isfile(record):
            shutil.copyfile(record, os.path.join(st.root, legacy, "llmops-sglang.json"))
        if st.kind_of == "build":
            marker = os.path.join(st.root, legacy, bs.MARKER)
            _write_atomic(marker, json.dumps({"name": legacy, "legacy": True}) + "\n")
    return legacy


def _remove(module, st: State, names) -> None:
    for n in names:
        if not module.check_mode:
            shutil.rmtree(os.path.join(st.root, bs.check_name(n, st.kind_of)))


def main():
    module = AnsibleModule(
        argument_spec=dict(
            root=dict(type="path", required=True),
            pointer=dict(type="path", required=True),
            kind=dict(type="str", choices=["build", "model"], default="build"),
            action=dict(type="str", choices=["inspect", "prepare", "point", "switch"], default="inspect"),
            name=dict(type="str", default=""),
            keep=dict(type="int", default=2),
            min_free_gib=dict(type="float", default=10.0),
            legacy_sglang_record=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    p = module.params
    kind = p["kind"]
    if os.path.realpath(p["pointer"]).rstrip("/") == os.path.realpath(p["root"]).rstrip("/"):
        module.fail_json(
            msg=f"Expected {'llmops_venv' if kind == 'build' else 'llmops_model_dir'} and "
            f"{'llmops_build_sets_dir' if kind == 'build' else 'llmops_model_revisions_dir'} to differ; found both "
            f"{p['root']}. "
            "Nothing was changed."
        )
    try:
        st = State(p["root"], p["pointer"], kind)
        result = {"changed": False, "removed": [], **st.report()}
        if p["action"] == "inspect":
            if p["name"]:
                result["plan"] = bs.switch_plan(p["name"], st.current, st.history, st.complete, st.kind, kind=kind)
            module.exit_json(**result)

        if p["action"] == "prepare":
            # a model revision's commit is known only once the download asked the hub: prepare may come without one
            name = bs.check_name(p["name"], kind) if p["name"] or kind == "build" else ""
            legacy = _adopt_legacy(module, st, p["legacy_sglang_record"]) if st.kind == "dir" else None
            if legacy:
                st.on_disk.append(legacy)
                st.complete.append(legacy)
                st.current, st.history = legacy, [legacy, *st.history]
                result.update(current=legacy, history=st.history, legacy=legacy)
                if not module.check_mode:
                    _write_atomic(st.history_file, json.dumps({"history": st.history}, indent=1) + "\n")
            keep = bs.retention(
                st.on_disk,
                st.complete,
                st.history,
                st.current,
                p["keep"],
                protect=[name] if name else [],
                unswitched=kind == "model",  # a download in progress or one not switched to yet
                kind=kind,
                owned=st.owned,
            )
            if kind == "build" and name not in st.complete:
                sizes = [_size(os.path.join(st.root, n)) for n in st.complete]
                freed = sum(_size(os.path.join(st.root, n)) for n in keep["remove"])
                need = max([int(p["min_free_gib"] * bs.GIB), *sizes])
                disk = bs.disk_check(_free(st.root), need, freed, where=st.root, name=name)
                result["disk"] = disk
                if not disk["ok"]:
                    module.fail_json(msg=disk["msg"], **result)
            _remove(module, st, keep["remove"])
            if not module.check_mode and not os.path.isdir(st.root):
                os.makedirs(st.root, mode=0o755)
            result.update(changed=bool(keep["remove"]) or bool(legacy), removed=keep["remove"])
            module.exit_json(**result)

        if p["action"] == "point":
            name = bs.check_name(p["name"], kind)
            # nothing runs from the pointer: there is none, or it names a set that was never completed (a first
            # install that stopped; the server role only ever switches to complete sets)
            unused = st.kind == "absent" or (st.kind == "link" and st.current not in st.complete)
            if unused and st.current != name:
                if not module.check_mode:
                    os.makedirs(os.path.join(st.root, name), mode=0o755, exist_ok=True)
                    os.makedirs(os.path.dirname(st.pointer) or "/", mode=0o755, exist_ok=True)
                    tmp = f"{st.pointer}.new-{os.getpid()}"
                    if os.path.lexists(tmp):
                        os.unlink(tmp)
                    os.symlink(os.path.join(st.root, name), tmp)
                    os.replace(tmp, st.pointer)
                    _write_atomic(st.history_file, json.dumps({"history": [name]}, indent=1) + "\n")
                result.update(changed=True, current=name, history=[name])
            module.exit_json(**result)

        # switch
        legacy = _legacy_name(module, st) if st.kind == "dir" else None
        complete = st.complete + ([legacy] if legacy else [])
        history = ([legacy] if legacy else []) + st.history
        current = legacy or st.current
        plan = bs.switch_plan(p["name"], current, history, complete, "link" if legacy else st.kind, kind=kind)
        result["plan"] = plan
        if plan["error"]:
            module.fail_json(msg=plan["error"], **result)
        target = plan["target"]
        if target is None:  # "current" with nothing to stay on: nothing to do
            module.exit_json(**result)
        history = bs.new_history(target, history)
        keep = bs.retention(
            st.on_disk + ([legacy] if legacy else []),
            complete,
            history[1:],
            target,
            p["keep"],
            unswitched=True,
            kind=kind,
            owned=st.owned + ([legacy] if legacy else []),
        )
        history = [n for n in history if n not in keep["remove"]]
        if not module.check_mode:
            if legacy:
                _adopt_legacy(module, st, None)
            if plan["switch"]:
                tmp = f"{st.pointer}.new-{os.getpid()}"
                if os.path.lexists(tmp):
                    os.unlink(tmp)
                os.symlink(os.path.join(st.root, target), tmp)
                os.replace(tmp, st.pointer)  # rename(2): the pointer names the old set or the new one, never nothing
            if history != st.saved or legacy:
                _write_atomic(st.history_file, json.dumps({"history": history}, indent=1) + "\n")
        _remove(module, st, keep["remove"])
        result.update(
            changed=plan["switch"] or bool(keep["remove"]),
            current=target,
            previous=bs.previous_of(history, target, complete),
            history=history,
            removed=keep["remove"],
        )
        module.exit_json(**result)
    except (ValueError, OSError) as e:
        module.fail_json(msg=f"{bs.KINDS[kind]['thing']}s in {p['root']}: {e}. Nothing more was changed.")


if __name__ == "__main__":
    main()
