# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Which of the packages a task wants are already installed, from one ``dpkg-query`` read per host and run.

The roles install operating-system packages in about ten apt tasks; on a converged host each of them loads apt's
cache to find nothing to do (1-3 s each, the largest share of a converged re-run). The shared role llmops_defaults
reads dpkg's database once per run (``dpkg-query -W -f='${binary:Package} ${Version} ${db:Status-Abbrev}\\n'``,
``QUERY_FORMAT``) and each install task runs only when ``missing()`` names something. The rule is conservative: an
entry this file cannot decide (a version pattern, a relation, an unknown input) counts as missing, so apt decides.

dpkg-query(1): ``db:Status-Abbrev`` is three characters, the desired action, the package status and the error flag;
a package is installed when its status is ``i`` (installed) and its error flag is blank (``ii``, ``hi`` once held).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

QUERY_FORMAT = "${binary:Package} ${Version} ${db:Status-Abbrev}\\n"
# apt's name=version form takes a literal version; these characters make it something else (a pattern, a relation,
# a release): apt decides those.
_UNDECIDABLE = set("*?[]<>/~^")


def parse(text):
    """{package: version} of every installed package in ``dpkg-query`` output (QUERY_FORMAT), each under its bare
    name and, for a multi-arch one, also under ``name:arch``."""
    installed = {}
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        name, version, abbrev = fields[0], fields[1], fields[2]
        if len(abbrev) < 2 or abbrev[1] != "i" or (len(abbrev) > 2 and abbrev[2] != " "):
            continue
        installed[name] = version
        installed.setdefault(name.split(":", 1)[0], version)
    return installed


def deb_entry(path):
    """``name=version`` of a package file named the Debian way (``NAME_VERSION_ARCH.deb``, the epoch left out or
    written ``%3a``), from a path or URL; the path itself (so: missing) when it is not named that way."""
    text = str(path or "")
    base = text.rstrip("/").rsplit("/", 1)[-1].split("?", 1)[0]
    parts = base[: -len(".deb")].split("_") if base.endswith(".deb") else []
    if len(parts) != 3 or not parts[0] or not parts[1]:
        return text
    return "{0}={1}".format(parts[0], parts[1].replace("%3a", ":").replace("%3A", ":"))


def missing(wanted, installed):
    """The entries of ``wanted`` (a name, ``name=version``, or a list of them) not installed as asked; all of them
    when ``installed`` is not a dict (not read in this run)."""
    entries = [wanted] if isinstance(wanted, str) else list(wanted or [])
    if not isinstance(installed, dict):
        return entries
    out = []
    for entry in entries:
        text = str(entry).strip()
        name, sep, version = text.partition("=")
        if not name or set(text) & _UNDECIDABLE:
            out.append(entry)
        elif name not in installed or (sep and installed[name] != version):
            out.append(entry)
    return out
