# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Write files as an account while running as root: what a share exported with ``root_squash`` needs.

An NFS server that exports with ``root_squash`` (exports(5), the default) performs every request of a client's root
as its anonymous account, which owns nothing on the share: root can neither create a directory there nor take the
download's lock. The files must be written by an account that owns the directory on the server (the same uid on
every host that mounts it).

``acting_as`` makes the account's uid, gid and groups the process's effective identity (the kernel checks file access
against them; a non-zero effective uid has no capabilities) and keeps root as the saved identity, so that ``as_root``
can read a root-only secret file in between and the process is root again when the block ends. The set-id calls apply
to every thread of the process (glibc), threads started inside the block included.
"""

from __future__ import absolute_import, annotations, division, print_function

__metaclass__ = type

import contextlib
import errno
import os
import pwd

from ansible_collections.llmops.sglang.plugins.module_utils.inventory_values import is_account_name

# What to do when root may not write on the model's directory (said by the input check and by a refused write).
ROOT_SQUASH_HINT = (
    "on a share exported with root_squash, root writes as the anonymous account: set run_as, the model role's "
    "model_storage_account, to the account that owns it"
)


def account_ids(name):
    """(uid, gid, groups) of the account, or a one-line reason why it cannot be used."""
    if not is_account_name(name):
        return "expected an account name (lower-case letters, digits, _ and -, at most 32); found %r" % (name,)
    try:
        pw = pwd.getpwnam(name)
    except KeyError:
        return "no account %s on this host" % name
    if pw.pw_uid == 0:
        return "the account %s is root: name an account that owns the directory instead" % name
    return pw.pw_uid, pw.pw_gid, sorted(set(os.getgrouplist(name, pw.pw_gid)))


@contextlib.contextmanager
def acting_as(ids):
    """The block runs with the account's ids as the effective ones (from root; root again afterwards)."""
    uid, gid, groups = ids
    saved = os.getgroups()
    os.setgroups(groups)
    os.setegid(gid)
    os.seteuid(uid)
    try:
        yield
    finally:
        os.seteuid(0)
        os.setegid(0)
        os.setgroups(saved)


@contextlib.contextmanager
def as_root():
    """Inside ``acting_as``: root for the block (to read a root-only file); elsewhere nothing changes."""
    euid, egid = os.geteuid(), os.getegid()
    if euid == 0 or os.getresuid()[2] != 0:
        yield
        return
    os.seteuid(0)
    os.setegid(0)
    try:
        yield
    finally:
        os.setegid(egid)
        os.seteuid(euid)


def regain_root():
    """Root again for good (before a module prints its result: Ansible may load code from a root-only directory)."""
    if os.geteuid() != 0 and os.getresuid()[2] == 0:
        os.seteuid(0)
        os.setegid(0)


def denied(exc):
    """True when an OSError is a permission refusal (what root meets on a root_squash export)."""
    return isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM)
