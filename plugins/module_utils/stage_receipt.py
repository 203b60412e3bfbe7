# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Stage receipts: when a stage may skip its tasks on a converged host, and why it may not.

A stage (the driver and CUDA toolkits; the builds) that finished on a host leaves a receipt there: a digest of every
input it was run with (each setting the stage's roles declare in ``meta/argument_specs.yml``, the run-time facts it
read, the collection's own code) and a digest of each piece of host state it left behind (files, directories'
entries, packages, services, users and groups). On the next run the stage first compares both, item by item; when
every item matches on every host of the play, the stage has nothing to do and its tasks are skipped. Anything that
differs - a setting, a fact, one file's content or mode, a package's version or hold, a stopped service - runs the
whole stage, which repairs the drift and writes a new receipt.

The controller computes the input digests (``input_digests``: values never leave it, a secret among them is
reduced to a digest); the host computes the state digests (``host_state``). Read by plugins/modules/stage_receipt.py
and plugins/filter/stage_receipt.py.
"""

from __future__ import annotations

import fnmatch
import grp
import hashlib
import json
import os
import pwd
import stat
import subprocess

RECEIPT_VERSION = 1
# Fields of the GPU facts that change while nothing about the host does (a running SGLang holds GPU memory): they
# are left out of an input's digest, wherever they occur.
VOLATILE_KEYS = frozenset({"memory_free_mib", "memory_used_mib", "utilization", "temperature"})
# A file larger than this is described by its size and modification time instead of its content.
HASH_LIMIT = 64 * 1024 * 1024
DPKG_FORMAT = "${binary:Package} ${Version} ${db:Status-Abbrev} ${source:Package}\n"


def _strip(value):
    if isinstance(value, dict):
        return {str(k): _strip(v) for k, v in value.items() if k not in VOLATILE_KEYS}
    if isinstance(value, (list, tuple)):
        return [_strip(v) for v in value]
    return value


def digest(value) -> str:
    """A short, stable digest of a JSON-able value (keys sorted; volatile GPU fields left out)."""
    text = json.dumps(_strip(value), sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def input_digests(values: dict) -> dict:
    """{name: digest} of the stage's inputs; an undefined input is None and digests as such."""
    return {str(name): digest(value) for name, value in sorted(values.items())}


def _file_state(path: str) -> str:
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return "absent"
    except OSError as e:
        return f"unreadable: {e.strerror}"
    head = f"{stat.filemode(st.st_mode)} {st.st_uid}:{st.st_gid}"
    if stat.S_ISLNK(st.st_mode):
        return f"{head} -> {os.readlink(path)}"
    if stat.S_ISDIR(st.st_mode):
        return f"{head} dir"
    if not stat.S_ISREG(st.st_mode):
        return f"{head} special"
    if st.st_size > HASH_LIMIT:
        return f"{head} size {st.st_size} mtime {st.st_mtime_ns}"
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError as e:
        return f"{head} unreadable: {e.strerror}"
    return f"{head} sha256 {h.hexdigest()}"


def _tree_state(path: str) -> str:
    try:
        names = sorted(os.listdir(path))
    except FileNotFoundError:
        return "absent"
    except OSError as e:
        return f"unreadable: {e.strerror}"
    return hashlib.sha256("\n".join(names).encode("utf-8")).hexdigest()


def _dpkg_lines(run=subprocess.run) -> list[str]:
    try:
        p = run(["dpkg-query", "-W", "-f=" + DPKG_FORMAT], capture_output=True, text=True,
                check=False, timeout=60)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    return p.stdout.splitlines() if p.returncode == 0 else []


def packages_state(patterns, lines) -> str:
    """Digest of the dpkg lines (package, version, status, source) whose package or source matches a pattern."""
    kept = []
    for line in lines:
        parts = line.split(" ")
        if len(parts) < 3:
            continue
        names = (parts[0].split(":")[0], parts[-1] if len(parts) >= 5 else "")
        if any(fnmatch.fnmatchcase(n, p) for p in patterns for n in names if n):
            kept.append(line.strip())
    return hashlib.sha256("\n".join(sorted(kept)).encode("utf-8")).hexdigest() + f" ({len(kept)} packages)"


def _systemctl(verb: str, unit: str, run=subprocess.run) -> str:
    try:
        p = run(["systemctl", verb, unit], capture_output=True, text=True, check=False, timeout=30)
    except (OSError, subprocess.SubprocessError) as e:
        return f"unknown ({e.__class__.__name__})"
    return (p.stdout.strip().splitlines() or ["unknown"])[0]


def _user_state(name: str) -> str:
    try:
        u = pwd.getpwnam(name)
    except KeyError:
        return "absent"
    return f"{u.pw_uid}:{u.pw_gid} {u.pw_dir} {u.pw_shell}"


def _group_state(name: str) -> str:
    try:
        return str(grp.getgrnam(name).gr_gid)
    except KeyError:
        return "absent"


def host_state(watch: dict, run=subprocess.run) -> dict:
    """{item: state} of everything in ``watch`` (keys files, trees, packages, services, users, groups)."""
    state = {}
    for path in watch.get("files") or []:
        state[f"file {path}"] = _file_state(path)
    for path in watch.get("trees") or []:
        state[f"entries of {path}"] = _tree_state(path)
    if watch.get("packages"):
        patterns = sorted(set(watch["packages"]))
        state[f"packages {' '.join(patterns)}"] = packages_state(patterns, _dpkg_lines(run))
    for unit in watch.get("services") or []:
        state[f"service {unit}"] = f"{_systemctl('is-enabled', unit, run)}, {_systemctl('is-active', unit, run)}"
    for name in watch.get("users") or []:
        state[f"user {name}"] = _user_state(name)
    for name in watch.get("groups") or []:
        state[f"group {name}"] = _group_state(name)
    return state


def differences(receipt: dict | None, inputs: dict, stage: str) -> list[str]:
    """What keeps the stage from skipping, one short sentence each (empty: the receipt matches)."""
    if not receipt:
        return [f"no receipt of the {stage} stage on this host yet"]
    if receipt.get("version") != RECEIPT_VERSION or receipt.get("stage") != stage:
        return ["the receipt was written by another version of the collection"]
    found = []
    old_inputs = receipt.get("inputs") or {}
    for name in sorted(set(old_inputs) | set(inputs)):
        if old_inputs.get(name) != inputs.get(name):
            found.append(f"input {name} changed")
    current = host_state(receipt.get("watch") or {})
    for item, was in sorted((receipt.get("state") or {}).items()):
        now = current.get(item, "not watched")
        if now != was:
            found.append(f"{item}: was {was}, now {now}")
    return found


WATCH_KEYS = ("files", "trees", "packages", "services", "users", "groups")


def merge_watch(watch) -> dict:
    """One watch dict from a dict or a list of them (one per role); unknown keys are refused."""
    parts = watch if isinstance(watch, list) else [watch]
    merged = {k: set() for k in WATCH_KEYS}
    for part in parts:
        if not isinstance(part, dict):
            raise ValueError(f"expected a dict with keys {', '.join(WATCH_KEYS)}; found {type(part).__name__}")
        for key, items in part.items():
            if key not in merged:
                raise ValueError(f"expected the keys {', '.join(WATCH_KEYS)}; found {key!r}")
            if isinstance(items, str) or not isinstance(items, (list, tuple)):
                raise ValueError(f"expected a list under {key!r}; found {items!r}")
            merged[key].update(str(x) for x in items if x not in (None, ""))
    return {k: sorted(v) for k, v in merged.items()}


def new_receipt(stage: str, inputs: dict, watch, run=subprocess.run) -> dict:
    clean = merge_watch(watch)
    return {"version": RECEIPT_VERSION, "stage": stage, "inputs": dict(inputs), "watch": clean,
            "state": host_state(clean, run)}  # fmt: skip
