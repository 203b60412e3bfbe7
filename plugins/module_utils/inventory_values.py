# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Inventory values that reach a systemd unit, an environment file or a command line, checked before any change.

One home for the rules; the roles call them through the filter ``llmops.sglang.inventory_problems``
(roles/preflight/tasks/inventory.yml) and the topology (module_utils/sglang_topology.py):

* an address (``ansible_host``, ``llmops_server_host``, ``llmops_router_host``, ``llmops_router_prometheus_host``)
  parses as an IP address or as a DNS host name (labels of letters, digits, ``_`` and ``-``, at most 253
  characters): a value with a newline would add lines such as an ``ExecStartPre=`` (run as root) to a unit or an
  environment file;
* a name (``llmops_replica``, ...) is ``[A-Za-z0-9._-]``, starting with a letter or digit;
* an account name (``llmops_service_user``, ``python_env_build_user``, ``model_storage_account`` ...) is lower-case
  letters, digits, ``_`` and ``-``, not starting with a digit or ``-``, at most 32 characters, and not root where
  the role runs something as it (``account_problems``; the modules that act as an account read ``is_account_name``);
* a systemd unit's name (``server_unit_name``, ``router_unit_name``) ends in ``.service`` and holds no whitespace
  (``unit_problems``);
* any other text has no whitespace or control character (C0, DEL, C1, and the bidi/format controls).

* a path the collection writes, chowns to a service account or prunes (``path_problems``) is absolute and normal (no
  ``.``/``..`` component, no doubled or trailing ``/``, no whitespace or control character); a directory it owns
  is none of the system's own directories (``/etc``, ``/opt``, ``/var/log`` ...): chowned to a service account, or
  pruned by a retention that deletes what it did not keep, such a directory would break the host;

Every check returns one sentence (expected, found, what to do) or None; the value is shown with its control
characters escaped (``repr``), so a refusal cannot itself inject a line into a log.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import re

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
ACCOUNT = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
UNIT = re.compile(r"[A-Za-z0-9:_.@-]+\.service")
_LABEL = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?")
# C0 controls and DEL, C1 controls, and the invisible format characters that reorder or hide text (bidi embeddings
# and overrides U+202A..U+202E, isolates U+2066..U+2069, marks U+200E/U+200F/U+061C, zero-width U+200B..U+200D,
# U+2028/U+2029 line/paragraph separators, U+FEFF).
CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2066-\u2069\ufeff]")
WHITESPACE_OR_CONTROL = re.compile(r"\s|" + CONTROL.pattern)

# What each inventory variable is, for inventory_problems(): the variables that reach units, env files or argv.
ADDRESS_VARS = ("ansible_host", "llmops_server_host", "llmops_router_host", "llmops_router_prometheus_host")
NAME_VARS = ("llmops_replica",)


def shown(value):
    """The value as a refusal may print it: control characters escaped, at most 80 characters."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def is_account_name(value):
    """A system account or group name the collection may create, chown to or run as (the whole string: no newline)."""
    return isinstance(value, str) and ACCOUNT.fullmatch(value) is not None


# What each account variable's refusal suggests.
ACCOUNT_EXAMPLES = {
    "llmops_service_user": "sglang",
    "llmops_service_group": "sglang",
    "python_env_build_user": "llmops-build",
    "router_user": "sglang-router",
    "model_storage_account": "llmops-model",
}


def account_problem(what, value, *, allow_root=False):
    if not is_account_name(value):
        expected = "a system account name" + ("" if allow_root else " other than root")
    elif value == "root" and not allow_root:
        expected = "a system account name other than root"
    else:
        return None
    return (
        "Expected %s to be %s (lower-case letters, digits, _ and -, not starting with a digit or -, at most 32 "
        "characters); found %s. Set it to %s." % (what, expected, shown(value), ACCOUNT_EXAMPLES.get(what, "a name"))
    )


def account_problems(accounts, allow_root=False):
    """One sentence per bad account name of ``accounts`` ({variable: value}); a null value is not checked."""
    out = []
    for what, value in accounts.items():
        problem = None if value is None else account_problem(what, value, allow_root=allow_root)
        if problem:
            out.append(problem)
    return out


# What each unit-name variable's refusal suggests (each role's own wording, as its refusals are tested).
UNIT_ADVICE = {"server_unit_name": "Use sglang.service.", "router_unit_name": "Set it to sglang-router.service."}


def unit_problems(units):
    """One sentence per value of ``units`` ({variable: value}) that is not a systemd service name (the whole string:
    no newline, no space, ending in ``.service``)."""
    return [
        "Expected %s to be a systemd service name ending in .service; found %s. %s"
        % (what, shown(value), UNIT_ADVICE.get(what, "Use NAME.service."))
        for what, value in units.items()
        if not (isinstance(value, str) and UNIT.fullmatch(value))
    ]


def is_host_name(value):
    """A host name: dot-separated labels of letters, digits, '_' and '-' (as /etc/hosts allows), at most 253
    characters, not all digits."""
    if not isinstance(value, str) or not value or len(value) > 253:
        return False
    name = value[:-1] if value.endswith(".") else value
    labels = name.split(".")
    if not all(_LABEL.fullmatch(label) for label in labels):
        return False
    return not re.fullmatch(r"[0-9.]+", name)  # 10.0.0 or 999.1.1.1 are mistyped addresses, not names


def is_ip(value):
    if not isinstance(value, str):
        return False
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def address_problem(what, value):
    """None when ``value`` is an IP address or a host name; else one sentence."""
    if is_ip(value) or is_host_name(value):
        return None
    return (
        "Expected {what} to be an IP address or a host name (letters, digits, '-', '_' and '.'); found {found}. "
        "Set {what} to the host's address, e.g. 10.0.0.5 or gpu1.example.internal.".format(
            what=what, found=shown(value)
        )
    )


def name_problem(what, value):
    """None when ``value`` is a name of [A-Za-z0-9._-] (at most 63, starting with a letter or digit)."""
    if isinstance(value, str) and NAME.fullmatch(value):
        return None
    return (
        "Expected {what} to be a name of letters, digits, '.', '_' or '-' (at most 63, starting with a letter or "
        "digit); found {found}. Rename it.".format(what=what, found=shown(value))
    )


def text_problem(what, value):
    """None when ``value`` (a string or number) has no whitespace or control character."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return "Expected {what} to be a single word or number; found a {kind}. Give one value.".format(
            what=what, kind=type(value).__name__
        )
    if WHITESPACE_OR_CONTROL.search(str(value)):
        return "Expected {what} without whitespace or control characters; found {found}. Remove them.".format(
            what=what, found=shown(value)
        )
    return None


def inventory_problems(hosts, hostvars):
    """One sentence per bad value among ADDRESS_VARS and NAME_VARS of ``hosts`` (undefined values are not checked)."""
    problems = []
    for host in hosts:
        got = hostvars[host] if host in hostvars else {}
        for var in ADDRESS_VARS + NAME_VARS:
            value = got.get(var) if hasattr(got, "get") else None
            if value is None:
                continue
            check = address_problem if var in ADDRESS_VARS else name_problem
            problem = check("%s of %s" % (var, host), value)
            if problem:
                problems.append(problem)
    return problems


KEY_CHARS = re.compile(r"[A-Za-z0-9_.~+/=:-]*")
KEY_MIN = 8


def key_problem(what, value):
    """None when ``value`` is an API key the collection can keep in a 0600 file and send as a Bearer token (or empty
    for none). The sentence never shows the value, only its length."""
    if not isinstance(value, str):
        return (
            "Expected {what} to be a string (or empty for none); found a {kind} (the value is not shown). Quote it in "
            "the vault file.".format(what=what, kind=type(value).__name__)
        )
    n = len(value)
    if "\n" in value or "\r" in value:
        return (
            "Expected {what} on one line; found a line break in it ({n} characters; the value is not shown). Remove "
            "the line break (a vault file written with echo often ends with one).".format(what=what, n=n)
        )
    if re.search(r"\s", value):
        return (
            "Expected {what} without spaces; found a space or tab in it ({n} characters; the value is not shown). "
            "Remove it.".format(what=what, n=n)
        )
    if re.search(r"[\"'\\$`]", value):
        return (
            "Expected {what} without quotes, backslashes, $ or `; found one of them in it ({n} characters; the value "
            "is not shown). Use letters, digits and _.~+/=:-.".format(what=what, n=n)
        )
    if 0 < n < KEY_MIN:
        return (
            "Expected {what} of at least {m} characters (or empty for none); found {n} (the value is not shown). Use "
            "a long random token, e.g. from openssl rand -hex 24.".format(what=what, m=KEY_MIN, n=n)
        )
    if not KEY_CHARS.fullmatch(value):
        return (
            "Expected {what} to use only letters, digits and _.~+/=:-; found another character in it ({n} "
            "characters; the value is not shown). Use a token of those characters.".format(what=what, n=n)
        )
    return None


def key_problems(keys, required=()):
    """One sentence per bad key of ``keys`` ({variable: value}); a name in ``required`` must not be empty, and no two
    non-empty keys may be equal (a client key that is also the admin key makes the admin key pointless)."""
    problems = []
    for name in sorted(keys):
        problem = key_problem(name, keys[name])
        if problem is None and name in required and not keys[name]:
            problem = (
                "Expected {what} to be set; found it empty. Leave it unset to have the collection generate it once "
                "per fleet (llmops_credentials_dir), or set it from ansible-vault.".format(what=name)
            )
        if problem:
            problems.append(problem)
    seen = {}
    for name in sorted(keys):
        value = keys[name]
        if isinstance(value, str) and value:
            if value in seen:
                problems.append(
                    "Expected {a} and {b} to differ; found the same key in both (the value is not shown). Give each "
                    "its own key.".format(a=seen[value], b=name)
                )
            else:
                seen[value] = name
    return problems


# Directories of the system itself: never a directory the collection chowns to a service account or prunes. Their
# children (/opt/sglang, /var/log/sglang) are what such a variable names.
SYSTEM_DIRS = frozenset(
    "/ /bin /boot /dev /etc /home /lib /lib32 /lib64 /libx32 /media /mnt /opt /proc /root /run /sbin /srv /sys /tmp "
    "/usr /usr/bin /usr/lib /usr/lib64 /usr/local /usr/local/bin /usr/local/lib /usr/sbin /usr/share /var /var/cache "
    "/var/lib /var/local /var/log /var/opt /var/spool /var/tmp /etc/systemd /etc/systemd/system".split()
)


def path_problem(what, value, *, owned=False, example="/opt/sglang"):
    """None when ``value`` is an absolute, normal path without whitespace or control characters (with ``owned``: a
    directory the collection owns, so not one of SYSTEM_DIRS); else one sentence."""
    if not isinstance(value, str) or not value.startswith("/") or value == "/" or WHITESPACE_OR_CONTROL.search(value):
        return "Expected %s to be an absolute path other than / with no spaces; found %s. Set it to the full " \
            "path, e.g. %s." % (what, shown(value), example)  # fmt: skip
    if any(part in ("", ".", "..") for part in value.split("/")[1:]):
        return "Expected %s to be a normal path (no '.', '..', doubled or trailing '/'); found %s. Set it to the " \
            "path it means, e.g. %s." % (what, shown(value), example)  # fmt: skip
    if owned and value in SYSTEM_DIRS:
        return "Expected %s to be a directory of its own (the collection creates it, gives it to its account and " \
            "removes what it did not put there); found the system directory %s. Set it to a directory below " \
            "it, e.g. %s." % (what, value, example)  # fmt: skip
    return None


def path_problems(paths, owned=(), follows=None):
    """One sentence per bad path of ``paths`` ({variable: value}); the variables in ``owned`` are directories the
    collection owns. ``follows`` ({variable: variable}) names paths derived from another (a directory from its file):
    checked only when that one is good, so one mistake is one sentence. Undefined (None) values are not checked."""
    problems = []
    bad = set()
    for name, value in paths.items():
        if value is None or (follows or {}).get(name) in bad:
            continue
        problem = path_problem(name, value, owned=name in owned, example=PATH_EXAMPLES.get(name, "/opt/sglang"))
        if problem:
            problems.append(problem)
            bad.add(name)
    return problems


PATH_EXAMPLES = {
    "llmops_venv": "/opt/sglang/venv",
    "llmops_build_sets_dir": "/opt/sglang/sets",
    "llmops_model_dir": "/opt/models/model",
    "llmops_model_revisions_dir": "/opt/models/model.revisions",
    "llmops_env_file": "/etc/sglang/sglang.env",
    "llmops_env_file's directory": "/etc/sglang",
    "llmops_state_dir": "/var/lib/llmops-sglang",
    "server_log_dir": "/var/log/sglang",
    "router_venv": "/opt/sglang-router/venv",
    "router_log_dir": "/var/log/sglang-router",
    "router_keys_file": "/etc/sglang-router/keys.env",
    "router_launcher": "/usr/local/lib/sglang-router/launch",
}
