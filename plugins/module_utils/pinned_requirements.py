# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Hash-pinned pip requirements (the router's lock, roles/router/files/*.txt): what a file pins, whether every pin
carries a sha256, and which pins a virtualenv does not yet meet.

pip's own ``--require-hashes`` mode checks every file it installs against the hashes; this module only reads the file
so that the role can refuse a lock that is not one before any change, and install only when something differs (pip's
check mode cannot tell that for a requirements file).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)")
_HASH = re.compile(r"--hash=sha256:[0-9a-f]{64}\b")


def normalize(name):
    """A distribution name as PEP 503 compares it."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirements(text):
    """Each requirement of ``text`` as one logical line (backslash continuations joined, comments dropped)."""
    out, current = [], ""
    for raw in (text or "").splitlines():
        line = raw.split(" #", 1)[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        if current.strip():
            out.append(current.strip())
        current = ""
    if current.strip():
        out.append(current.strip())
    return out


def pins(text):
    """{normal name: version} of every ``name==version`` requirement of ``text``."""
    out = {}
    for req in _requirements(text):
        m = _PIN.match(req)
        if m:
            out[normalize(m.group(1))] = m.group(2)
    return out


def problem(text, package, version):
    """Why ``text`` is not a hash-pinned lock of ``package``==``version``, or None: every requirement pinned with
    ``==`` and carrying at least one sha256, the package among them at that version."""
    reqs = _requirements(text)
    if not reqs:
        return "an empty file"
    loose = [r.split()[0] for r in reqs if not _PIN.match(r)]
    if loose:
        return "requirements not pinned with == (%s)" % ", ".join(loose[:3])
    bare = [_PIN.match(r).group(1) for r in reqs if not _HASH.search(r)]
    if bare:
        return "requirements without a --hash=sha256: (%s)" % ", ".join(bare[:3])
    pinned = pins(text)
    if pinned.get(normalize(package)) != version:
        found = pinned.get(normalize(package))
        return "%s pinned at %s" % (package, found) if found else "no pin of %s" % package
    return None


def unmet(text, installed):
    """The pins of ``text`` that ``installed`` ({name: version}, any spelling) does not meet, as name==version."""
    have = dict((normalize(k), v) for k, v in (installed or {}).items())
    return ["%s==%s" % (n, v) for n, v in sorted(pins(text).items()) if have.get(n) != v]
