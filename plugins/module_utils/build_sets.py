# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Build sets side by side: what a set is called, which sets are kept, whether a new one fits, where `current` points.

A build set is one virtualenv with torch, SGLang, sgl-kernel and flash-attn, installed from the wheelhouse under
``ROOT/NAME`` (``llmops_build_sets_dir``). ``NAME`` is a label (the SGLang ref) and the fingerprint of everything the
build stage was asked for. The server runs from a pointer (``llmops_venv``, a symlink to ``ROOT/NAME``) switched by one
rename(2). ``ROOT/history.json`` lists the sets the pointer has pointed at, newest first: ``history[0]`` is current,
``history[1]`` the previous one (the target of a rollback). A set is complete once the build stage wrote
``ROOT/NAME/MARKER``; an incomplete set (an interrupted build) is never switched to and never counted as kept.

The same rules keep a model's revisions side by side (``kind`` "model", KINDS): one directory per commit under
``llmops_model_revisions_dir``, the server serving ``llmops_model_dir``, a pointer to one of them. A revision is
complete once the model stage wrote its snapshot marker (every file verified against the hub's listing).

Pure functions, no Ansible imports (tests/unit/test_build_sets.py); plugins/modules/build_set.py applies them.
"""

from __future__ import annotations

import os
import re

from ansible_collections.llmops.sglang.plugins.module_utils.build_plan import fingerprint

MARKER = "llmops-set.json"
# What differs between build sets and model revisions: the file that says a directory is complete, and the words.
KINDS = {
    "build": {
        "marker": MARKER,
        "thing": "build set",
        "done": f"its {MARKER} written by the build stage",
        "make": "Run the build stage (--tags build), then switch.",
        "keep": "llmops_build_sets_keep",
        # What shows that a directory of the root is the collection's own, complete or not: a set is a virtualenv.
        "owned": (MARKER, "pyvenv.cfg"),
    },
    "model": {
        "marker": ".llmops-snapshot.json",  # module_utils/hf_hub.py MARKER, written once every file is verified
        "thing": "model revision",
        "done": "its .llmops-snapshot.json written by the model stage once every file was verified",
        "make": "Run the model stage (--tags model) with that model_revision, then switch.",
        "keep": "llmops_model_revisions_keep",
        # a complete revision, or a download in progress (its .llmops-partial directory, module_utils/hf_hub.py)
        "owned": (".llmops-snapshot.json", ".llmops-partial"),
    },
}
HISTORY = "history.json"
LEGACY_PREFIX = "legacy-"
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,99}$")
GIB = 1024**3


def history_path(root: str, pointer: str, kind: str) -> str:
    """Where the order of what the pointer named is kept: a build set's in ROOT; a model's beside its pointer
    (``.NAME.history.json`` in the pointer's directory), each host's own, also where ROOT is a share several hosts mount
    and only the account that owns it may write (the model role's model_storage_account)."""
    if kind == "model":
        head, tail = os.path.split(pointer.rstrip("/"))
        return os.path.join(head, ".%s.history.json" % tail)
    return os.path.join(root, HISTORY)


def set_name(request: dict, label: str = "") -> str:
    """The set's directory name: ``LABEL-FINGERPRINT`` (``v0.5.9-3f2a9c0d4b1e7a55``).

    ``request`` is everything the build stage was asked for (torch, CUDA, GPU archs, the SGLang and flash-attn refs and
    options); the fingerprint is build_plan.fingerprint of it, so the same request always names the same set and any
    change of one input names a new one. ``label`` (the SGLang ref) only makes the name readable: every character
    outside ``[A-Za-z0-9.]`` becomes ``_``, at most 40 characters; an empty label gives ``set``.
    """
    if not isinstance(request, dict) or not request:
        raise ValueError("expected the build request as a non-empty mapping (torch, cuda, archs, sglang, ...)")
    slug = re.sub(r"[^A-Za-z0-9.]", "_", str(label or ""))[:40].strip("._") or "set"
    return f"{slug}-{fingerprint(request)}"


def check_name(name: str, kind: str = "build") -> str:
    """A set's or revision's name as a path component: no separator, no dot-dot, no leading dash."""
    name = str(name or "")
    if not NAME_RE.match(name) or name in (".", ".."):
        example = "v0.5.9-3f2a9c0d4b1e7a55" if kind == "build" else "a 40-hex commit"
        raise ValueError(
            f"expected a {KINDS[kind]['thing']} name of letters, digits, '.', '_', '+', '-' (e.g. {example}); "
            f"found {name!r}"
        )
    return name


def current_of(pointer_target: str | None, root: str) -> str | None:
    """The set the pointer names: the last path component of its target when that is a directory directly in root."""
    if not pointer_target:
        return None
    target = pointer_target.rstrip("/")
    parent, _, name = target.rpartition("/")
    if parent and parent.rstrip("/") != root.rstrip("/"):
        return None
    return name or None


def ordered_history(history, current: str | None, on_disk) -> list:
    """The history as it stands on disk: current first, then the others newest first, each once, only existing sets."""
    seen, out = set(), []
    for name in ([current] if current else []) + list(history or []):
        if name and name not in seen and name in on_disk:
            seen.add(name)
            out.append(name)
    return out


def previous_of(history, current: str | None, complete) -> str | None:
    """The set a rollback goes to: the newest complete set in the history other than current."""
    for name in history or []:
        if name != current and name in complete:
            return name
    return None


def retention(
    on_disk,
    complete,
    history,
    current: str | None,
    keep: int,
    *,
    protect=(),
    unswitched=False,
    kind="build",
    owned=None,
) -> dict:
    """Which sets stay and which are removed.

    Kept: current, the sets in ``protect`` (the one being built, the one about to be switched to) and the ``keep``
    newest complete sets of the history after current (the rollback targets). Removed: every other set in the root,
    incomplete ones included (an interrupted build of a set no longer asked for) - except, with ``unswitched``, the
    sets the pointer never named (a switch keeps a set built for the next upgrade; the build stage's prepare removes
    it once another set is asked for). Only a directory in ``owned`` (those holding one of KINDS[kind]["owned"]: the
    collection's own, complete or not) is ever removed; any other directory in the root stays. ``keep`` below 0 is
    refused.
    """
    if not isinstance(keep, int) or isinstance(keep, bool) or keep < 0:
        raise ValueError(f"expected {KINDS[kind]['keep']} to be a whole number >= 0; found {keep!r}")
    kept = [n for n in [current, *protect] if n]
    previous = [n for n in (history or []) if n not in kept and n in complete and n in on_disk][:keep]
    kept = list(dict.fromkeys(kept + previous))
    if unswitched:
        kept += [n for n in on_disk if n not in kept and n not in (history or [])]
    removable = set(on_disk if owned is None else owned)
    return {
        "keep": kept,
        "previous": previous,
        "remove": sorted(n for n in on_disk if n not in kept and n in removable),
    }


def disk_check(free_bytes: int, need_bytes: int, freed_bytes: int = 0, *, where: str = "", name: str = "") -> dict:
    """Whether a new set fits: free space (after the removals retention makes) against what one set needs.

    ``need_bytes`` is the size of the largest complete set on the host, or the floor (llmops_build_set_min_free_gib)
    when larger or when no set exists yet. Returns ok, free, need and, when it does not fit, a one-line message.
    """
    free = int(free_bytes) + int(freed_bytes)
    need = int(need_bytes)
    out = {"ok": free >= need, "free_bytes": free, "need_bytes": need}
    if not out["ok"]:
        out["msg"] = (
            f"Expected at least {need / GIB:.1f} GiB free in {where or 'the build sets directory'} for the build set "
            f"{name or '(new)'} (the size of the largest set on this host, or llmops_build_set_min_free_gib); found "
            f"{free / GIB:.1f} GiB free after removing the sets beyond llmops_build_sets_keep. Free disk space, or "
            "lower llmops_build_sets_keep so that older sets are removed. Nothing was installed."
        )
    return out


def switch_plan(want: str, current: str | None, history, complete, pointer_kind: str, *, kind: str = "build") -> dict:
    """What switching the pointer to ``want`` does.

    ``want`` is a name, ``previous`` (the newest complete one before current) or ``current`` (stay where the pointer
    is: a roll that moves only the other kind). ``pointer_kind`` is ``link``, ``absent`` or ``dir`` (an unkeyed
    directory from before sets and revisions: it is adopted into the root and stays available as the previous one).
    Returns target, switch (the pointer changes), and error when the switch is refused (no previous one, an incomplete
    or missing one).
    """
    words = KINDS[kind]
    if want == "current":
        if pointer_kind == "link" and current in complete:
            return {"target": current, "switch": False, "error": None}
        return {"target": None, "switch": False, "error": None}
    if want == "previous":
        target = previous_of(history, current, complete)
        if target is None:
            return {
                "target": None,
                "switch": False,
                "error": (
                    f"Expected a previous {words['thing']} to roll back to; found none besides the current one "
                    f"({current or 'none'}). Nothing was changed."
                ),
            }
    else:
        target = check_name(want, kind)
        if target not in complete:
            return {
                "target": target,
                "switch": False,
                "error": (
                    f"Expected the {words['thing']} {target} to be complete ({words['done']}); "
                    f"found it missing or unfinished. {words['make']} Nothing was changed."
                ),
            }
    return {"target": target, "switch": pointer_kind != "link" or current != target, "error": None}


def new_history(target: str, history) -> list:
    """The history after the pointer moved to ``target``: target first, the rest in order."""
    return [target] + [n for n in (history or []) if n != target]
