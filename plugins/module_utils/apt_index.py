# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""A flat apt repository's package index (the ``Packages`` file NVIDIA's CUDA repository serves next to its
``Release``), read without apt, and the check that packages exist in it at the versions asked for.

The driver stage asks this before it writes the repository entry, the pin or the nouveau blacklist
(roles/nvidia_repo, tasks/check.yml; module ``repo_packages``): apt would only find out at the install step, after
the host has changed. The check follows the exact-version dependencies (``Depends: libnvidia-ml1 (= 580.95.05-1)``)
of each package it finds to the packages of the same index, because NVIDIA's driver packages require each other at
exactly one version; dependencies on packages the index does not have (libc6, dkms, ...) come from the
distribution's archive and are not checked.

The field syntax is Debian policy's (5.1 control files, 7.1 relationship fields); version order is dpkg's
(``compare_versions``).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from functools import cmp_to_key

_RELATION = re.compile(r"^\s*([a-z0-9][a-z0-9.+-]*)(?::[a-z0-9-]+)?\s*(?:\(\s*(<<|<=|=|>=|>>|<|>)\s*([^)\s]+)\s*\))?")


def parse(text):
    """{package name: [stanza, ...]} from a ``Packages`` file; a stanza is {field: value} (continuation lines
    joined with a newline)."""
    index = {}
    stanza = {}
    field = None

    def close():
        if stanza.get("Package"):
            index.setdefault(stanza["Package"], []).append(dict(stanza))
        stanza.clear()

    for line in text.splitlines():
        if not line.strip():
            close()
            field = None
        elif line[0] in " \t":
            if field is not None:
                stanza[field] += "\n" + line.strip()
        elif ":" in line:
            field, _, value = line.partition(":")
            field = field.strip()
            stanza[field] = value.strip()
    close()
    return index


def relations(value):
    """A relationship field as groups of alternatives: ``a (= 1) | b, c`` -> [[(a, '=', '1'), (b, '', '')],
    [(c, '', '')]]; architecture qualifiers and restriction lists are dropped."""
    groups = []
    for group in (value or "").split(","):
        alternatives = []
        for alt in group.split("|"):
            m = _RELATION.match(re.sub(r"\[[^]]*\]|<[^>]*>", "", alt))
            if m:
                alternatives.append((m.group(1), m.group(2) or "", m.group(3) or ""))
        if alternatives:
            groups.append(alternatives)
    return groups


def _order(c):
    if c == "~":
        return -1
    if c.isdigit():
        return 0
    if c.isalpha():
        return ord(c)
    return ord(c) + 256


def _compare_part(a, b):
    while a or b:
        na = re.match(r"^[^0-9]*", a).group(0)
        nb = re.match(r"^[^0-9]*", b).group(0)
        for i in range(max(len(na), len(nb))):
            ca = _order(na[i]) if i < len(na) else 0
            cb = _order(nb[i]) if i < len(nb) else 0
            if ca != cb:
                return -1 if ca < cb else 1
        a, b = a[len(na) :], b[len(nb) :]
        da = re.match(r"^[0-9]*", a).group(0)
        db = re.match(r"^[0-9]*", b).group(0)
        if int(da or 0) != int(db or 0):
            return -1 if int(da or 0) < int(db or 0) else 1
        a, b = a[len(da) :], b[len(db) :]
    return 0


def _split(version):
    epoch, _, rest = version.rpartition(":") if ":" in version else ("0", "", version)
    upstream, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "0")
    return int(epoch or 0), upstream, revision


def compare_versions(a, b):
    """-1, 0 or 1 as dpkg orders the two versions (epoch, upstream version, revision; '~' sorts first)."""
    ea, ua, ra = _split(str(a))
    eb, ub, rb = _split(str(b))
    if ea != eb:
        return -1 if ea < eb else 1
    return _compare_part(ua, ub) or _compare_part(ra, rb)


def _satisfies(version, op, wanted):
    c = compare_versions(version, wanted)
    return {"=": c == 0, ">=": c >= 0, "<=": c <= 0, ">>": c > 0, ">": c > 0, "<<": c < 0, "<": c < 0}[op]


def versions(index, name):
    """The versions of ``name`` in the index, oldest first, each once."""
    seen = {s["Version"] for s in index.get(name, []) if s.get("Version")}
    return sorted(seen, key=cmp_to_key(compare_versions))


def _missing_text(name, version, index):
    have = versions(index, name)
    if not have:
        return "%s (no such package)" % name
    shown = have[-6:]
    more = " and %d older" % (len(have) - len(shown)) if len(have) > len(shown) else ""
    return "%s %s (it has %s%s)" % (name, version, ", ".join(shown), more)


def check(index, wanted):
    """Check packages against the index.

    ``wanted``: ['name=version' or 'name' (any version will do), ...], as apt-get install takes them.
    Returns {missing: [one text per package not there, naming the versions there are], found: [name=version, ...]
    (the packages and their exact-version dependencies found)}."""
    missing = []
    found = []
    queue = []
    for w in wanted:
        name, _, version = str(w).strip().partition("=")
        queue.append((name, version, ""))
    done = set()
    while queue:
        name, version, needed_by = queue.pop(0)
        if (name, version) in done:
            continue
        done.add((name, version))
        stanzas = [s for s in index.get(name, []) if not version or s.get("Version") == version]
        if not stanzas:
            text = _missing_text(name, version, index)
            if needed_by:
                text = "%s, which %s depends on," % (text, needed_by)
            missing.append(text)
            continue
        newest = version or versions(index, name)[-1]
        stanza = next(s for s in stanzas if s.get("Version") == newest)
        found.append("%s=%s" % (name, stanza.get("Version", "")))
        for field in ("Pre-Depends", "Depends"):
            for group in relations(stanza.get(field, "")):
                # only a dependency the index alone can satisfy, at one exact version, is followed
                if len(group) != 1:
                    continue
                dep, op, dep_version = group[0]
                if op == "=" and dep in index:
                    queue.append((dep, dep_version, "%s %s" % (name, stanza.get("Version", ""))))
                elif op and dep in index and not any(_satisfies(v, op, dep_version) for v in versions(index, dep)):
                    missing.append(
                        "%s (%s %s), which %s %s depends on (it has %s)"
                        % (dep, op, dep_version, name, stanza.get("Version", ""), ", ".join(versions(index, dep)))
                    )
    return {"missing": missing, "found": found}


def apt_proxy(dump, url):
    """The proxy apt itself would use for ``url``, from ``apt-config dump`` output: '' for none configured, 'DIRECT'
    for a host apt reaches without one (``Acquire::http::Proxy::<host> "DIRECT";``), else the proxy's URL."""
    m = re.match(r"^([a-z]+)://([^/:]+)", str(url))
    if not m or m.group(1) not in ("http", "https"):
        return ""
    scheme, host = m.group(1), m.group(2)
    settings = {}
    for line in str(dump).splitlines():
        m2 = re.match(r'^\s*([A-Za-z0-9:._-]+)\s+"(.*)";\s*$', line)
        if m2:
            settings[m2.group(1).lower()] = m2.group(2)
    for key in ("acquire::%s::proxy::%s" % (scheme, host.lower()), "acquire::%s::proxy" % scheme):
        value = settings.get(key, "")
        if value:
            return "DIRECT" if value.upper() == "DIRECT" else value
    return ""
