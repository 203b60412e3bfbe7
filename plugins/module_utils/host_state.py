# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""What is on a host already, read in one pass: the one read of a stage's converged state.

A stage of a converged host finds everything in place; asking each question with its own module call (stat, slurp,
getent, the checksum a template or copy task computes, apt's package state, systemctl) costs one remote round trip
each. The roles ask them all at once through the module llmops.sglang.host_state and change only what differs,
so a changed input still triggers exactly the change it triggered before: the decision is made on the host's real
state, never on a record alone.

Every reader is a pure function of its inputs plus injectable system calls (tests pass fakes). Nothing here writes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import base64
import glob
import grp
import hashlib
import json
import os
import pwd
import stat
import subprocess

READ_LIMIT = 1 << 20  # a file read by glob_read is cut at 1 MiB
COMMAND_TIMEOUT = 120


def sha1_of(path):
    """The sha1 Ansible's copy and template modules compare, or None when there is no regular file."""
    try:
        if not os.path.isfile(path):
            return None
        h = hashlib.sha1()  # the checksum Ansible's own copy and template modules compare
        with open(path, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 16), b""):
                h.update(chunk)
        return h.hexdigest()
    except OSError:
        return None


def path_info(path):
    """{kind, link, uid, gid, owner, group, mode, executable} of what a path names (a symlink followed), or None."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    kind = "directory" if stat.S_ISDIR(st.st_mode) else "file" if stat.S_ISREG(st.st_mode) else "other"
    try:
        owner = pwd.getpwuid(st.st_uid).pw_name
    except KeyError:
        owner = None
    try:
        group = grp.getgrgid(st.st_gid).gr_name
    except KeyError:
        group = None
    return {
        "kind": kind,
        "link": os.path.islink(path),
        "uid": st.st_uid,
        "gid": st.st_gid,
        "owner": owner,
        "group": group,
        "mode": "%04o" % stat.S_IMODE(st.st_mode),
        "executable": kind == "file" and os.access(path, os.X_OK),
    }


def read_json(path):
    """A JSON file's content, or None when it is missing or not JSON."""
    try:
        with open(path, "rb") as fh:
            return json.loads(fh.read().decode("utf-8"))
    except (OSError, ValueError, UnicodeDecodeError):
        return None


def env_keys(path):
    """The variable names an EnvironmentFile sets (never their values), or None when it is missing."""
    try:
        with open(path, "rb") as fh:
            lines = fh.read().decode("utf-8", "replace").splitlines()
    except OSError:
        return None
    keys = []
    for raw in lines:
        line = raw.strip()
        if line and not line.startswith("#") and "=" in line:
            keys.append(line.split("=", 1)[0].strip())
    return keys


def glob_read(pattern, limit=READ_LIMIT):
    """{path: base64 of its first bytes} for every file the glob matches (sysfs attributes, efivars)."""
    out = {}
    for path in sorted(glob.glob(pattern)):
        try:
            with open(path, "rb") as fh:
                out[path] = base64.b64encode(fh.read(limit)).decode("ascii")
        except OSError:
            out[path] = None
    return out


def account(name, getpwnam=pwd.getpwnam, getgrgid=grp.getgrgid):
    """{uid, group, home, shell} of a user, or None."""
    try:
        entry = getpwnam(name)
    except KeyError:
        return None
    try:
        group = getgrgid(entry.pw_gid).gr_name
    except KeyError:
        group = None
    return {"uid": entry.pw_uid, "group": group, "home": entry.pw_dir, "shell": entry.pw_shell}


def group_exists(name, getgrnam=grp.getgrnam):
    try:
        getgrnam(name)
    except KeyError:
        return False
    return True


def run(argv, timeout=COMMAND_TIMEOUT, env=None):
    """{rc, stdout, stderr} of a command (LANG=C), rc None when it cannot start or times out."""
    environ = dict(os.environ, LANG="C", LC_ALL="C")
    environ.update(env or {})
    try:
        p = subprocess.run(argv, capture_output=True, timeout=timeout, env=environ, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        return {"rc": None, "stdout": "", "stderr": str(exc)}
    return {"rc": p.returncode, "stdout": p.stdout.decode("utf-8", "replace"),
            "stderr": p.stderr.decode("utf-8", "replace")}  # fmt: skip


def parse_dpkg(stdout):
    """dpkg-query -W -f='${binary:Package}\\t${Version}\\t${db:Status-Abbrev}\\n' -> {name: {version, installed,
    held}} (architecture qualifiers dropped)."""
    out = {}
    for line in stdout.splitlines():
        parts = line.split("\t")
        if len(parts) < 3:
            continue
        name, version, abbrev = parts[0].split(":")[0], parts[1], parts[2].strip()
        out[name] = {
            "version": version or None,
            "installed": abbrev[1:2] == "i",
            "held": abbrev[:1] == "h",
        }
    return out


def packages(names, runner=run):
    """{name: {version, installed, held}} for the names asked, a name dpkg does not know as not installed."""
    if not names:
        return {}
    fmt = "${binary:Package}\t${Version}\t${db:Status-Abbrev}\n"
    result = runner(["dpkg-query", "-W", "-f=" + fmt, *names])
    known = parse_dpkg(result["stdout"])
    return {n: known.get(n, {"version": None, "installed": False, "held": False}) for n in names}


def all_packages(runner=run):
    """Every package dpkg knows, with its source package: {name: {version, installed, held, source}}."""
    fmt = "${binary:Package}\t${Version}\t${db:Status-Abbrev}\t${source:Package}\n"
    result = runner(["dpkg-query", "-W", "-f=" + fmt])
    out = parse_dpkg(result["stdout"])
    for line in result["stdout"].splitlines():
        parts = line.split("\t")
        if len(parts) >= 4 and parts[0].split(":")[0] in out:
            out[parts[0].split(":")[0]]["source"] = parts[3].strip()
    return out


def units(names, runner=run):
    """{unit: {active, enabled}} from systemctl show (one call for all)."""
    if not names:
        return {}
    result = runner(["systemctl", "show", "--property=Id,ActiveState,UnitFileState", "--", *names])
    out, current = {}, {}
    for block in (result["stdout"] + "\n").split("\n\n"):
        current = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if current:
            out[current.get("Id", "")] = {
                "active": current.get("ActiveState") or "unknown",
                "enabled": current.get("UnitFileState") or "unknown",
            }
    # systemctl show answers in the order asked; an unknown unit has an empty UnitFileState
    return {n: out.get(n, {"active": "unknown", "enabled": "unknown"}) for n in names}


def gather(spec, runner=run):
    """Everything ``spec`` asks for: files (sha1), paths (info), json, env_keys, glob_read, users, groups,
    packages, all_packages (bool), units, commands ({name: argv}, each run once)."""
    out = {
        "sha1": {p: sha1_of(p) for p in spec.get("files") or []},
        "paths": {p: path_info(p) for p in spec.get("paths") or []},
        "json": {p: read_json(p) for p in spec.get("json") or []},
        "env_keys": {p: env_keys(p) for p in spec.get("env_keys") or []},
        "glob_read": {g: glob_read(g) for g in spec.get("glob_read") or []},
        "users": {u: account(u) for u in spec.get("users") or []},
        "groups": {g: group_exists(g) for g in spec.get("groups") or []},
        "packages": packages(spec.get("packages") or [], runner),
        "units": units(spec.get("units") or [], runner),
        "commands": {},
    }
    if spec.get("all_packages"):
        out["all_packages"] = all_packages(runner)
    for name, argv in (spec.get("commands") or {}).items():
        out["commands"][name] = runner([str(a) for a in argv])
    return out
