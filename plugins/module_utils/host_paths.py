# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Directories root keeps private on a host: the build tree (root runs the scripts and installs the wheels it finds
there) and the directories of secret files. Such a directory is safe only if no other account can put something in
its place: every directory above it must be root's and writable by root alone (a sticky, world-writable directory
such as /var/tmp lets any account create the name first), and the directory itself, when it exists, must be a real
directory of root's. Stdlib only; runs on the host inside path_probe."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import stat


def private_dir_problem(path, lstat=os.lstat, realpath=os.path.realpath):
    """Why ``path`` cannot be a root-private directory (words after the path), or None when it can."""
    if not path.startswith("/"):
        return "is not an absolute path"
    try:
        st = lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        return "cannot be read (%s)" % exc.strerror
    if st is not None:
        if stat.S_ISLNK(st.st_mode):
            return "is a symlink (the directory it points to is not checked; name the directory itself)"
        if not stat.S_ISDIR(st.st_mode):
            return "exists and is not a directory"
        if st.st_uid != 0:
            return "is owned by uid %d, not root (that account could change what root reads or runs there)" % (
                st.st_uid
            )
    parent = realpath(os.path.dirname(path.rstrip("/")) or "/")
    chain = []
    while True:
        chain.append(parent)
        if parent == "/":
            break
        parent = os.path.dirname(parent)
    for ancestor in reversed(chain):
        try:
            ast = lstat(ancestor)
        except FileNotFoundError:
            break  # the rest is created by root
        except OSError as exc:
            return "has a directory above it that cannot be read: %s (%s)" % (ancestor, exc.strerror)
        mode = stat.S_IMODE(ast.st_mode)
        if ast.st_uid != 0:
            return "is inside %s, owned by uid %d, not root (that account could replace it)" % (ancestor, ast.st_uid)
        if mode & 0o022:
            return (
                "is inside %s, which accounts other than root can write to (mode %04o): any of them could create "
                "it first or put another directory in its place" % (ancestor, mode)
            )
    return None
