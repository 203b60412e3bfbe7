#!/usr/bin/env python3
"""A network share's root_squash, on one machine: a FUSE pass-through that serves BACKING at MOUNTPOINT and performs
every request as its caller, except that requests from root are performed as the anonymous account (65534:65534),
as an NFS server exporting with ``root_squash`` (exports(5)) performs them.

The kernel checks nothing here (no ``default_permissions``): each request runs on BACKING with the file-system
identity of its caller (setfsuid/setfsgid and the caller's groups), so the backing file system's own permission checks
decide, and a squashed root has no override. Simulated nodes see it through ``sim/node up --bind MOUNTPOINT:DIR``.

Not simulated: the NFS client's attribute cache and close-to-open consistency (every node reaches one kernel's mount
here), ``all_squash``, ``anonuid``, ACLs, extended attributes, locks (fcntl/flock; the collection uses none on a share).

    root_squash.py BACKING MOUNTPOINT     # runs until unmounted (umount MOUNTPOINT) or SIGTERM
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import errno
import os
import stat
import sys

from fuse import FUSE, FuseOSError, Operations, fuse_get_context

ANON = (65534, 65534)  # nobody:nogroup, the default anonuid/anongid of exports(5)

_libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)


def caller_groups(pid: int) -> list[int]:
    """The supplementary groups of the process that made the request (empty when it is gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("Groups:"):
                    return [int(g) for g in line.split()[1:]]
    except OSError:
        pass
    return []


class RootSquash(Operations):
    def __init__(self, backing: str):
        self.backing = os.path.realpath(backing)

    # ---- identity --------------------------------------------------------------------------------------------
    def __call__(self, op, path, *args):
        if not hasattr(self, op):
            raise FuseOSError(errno.ENOSYS)
        uid, gid, pid = fuse_get_context()
        groups = [] if uid == 0 else caller_groups(pid)
        if uid == 0:
            uid, gid = ANON
        self.ids = (uid, gid, groups)
        if op in ("init", "destroy"):
            return getattr(self, op)(path, *args)
        os.setgroups(groups)  # single-threaded (nothreads): the whole daemon is the caller for this request
        _libc.setfsgid(gid)
        _libc.setfsuid(uid)  # leaving fsuid 0 drops the file-system capabilities (capabilities(7))
        try:
            return getattr(self, op)(path, *args)
        except OSError as exc:
            raise FuseOSError(exc.errno) from None
        finally:
            _libc.setfsuid(0)
            _libc.setfsgid(0)
            os.setgroups([])

    def _p(self, path: str) -> str:
        return os.path.join(self.backing, path.lstrip("/"))

    # ---- metadata --------------------------------------------------------------------------------------------
    def getattr(self, path, fh=None):
        st = os.lstat(self._p(path))
        keys = ("st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size", "st_atime", "st_mtime", "st_ctime")
        return {k: getattr(st, k) for k in keys}

    def access(self, path, amode):
        st = os.lstat(self._p(path))
        uid, gid, groups = self.ids
        if uid == st.st_uid:
            bits = (st.st_mode >> 6) & 7
        elif st.st_gid == gid or st.st_gid in groups:
            bits = (st.st_mode >> 3) & 7
        else:
            bits = st.st_mode & 7
        if amode & ~bits & 7:
            raise FuseOSError(errno.EACCES)
        return 0

    def statfs(self, path):
        sv = os.statvfs(self._p(path))
        keys = ("f_bavail", "f_bfree", "f_blocks", "f_bsize", "f_favail", "f_ffree", "f_files", "f_flag", "f_frsize")
        return {k: getattr(sv, k) for k in keys} | {"f_namemax": sv.f_namemax}

    def chmod(self, path, mode):
        os.chmod(self._p(path), mode)

    def chown(self, path, uid, gid):
        os.lchown(self._p(path), uid, gid)

    def utimens(self, path, times=None):
        os.utime(self._p(path), times, follow_symlinks=False)

    def truncate(self, path, length, fh=None):
        if fh is not None and fh.fh:
            os.ftruncate(fh.fh, length)
        else:
            os.truncate(self._p(path), length)

    # ---- names -----------------------------------------------------------------------------------------------
    def readdir(self, path, fh):
        return [".", "..", *os.listdir(self._p(path))]

    def readlink(self, path):
        return os.readlink(self._p(path))

    def mkdir(self, path, mode):
        os.mkdir(self._p(path), mode)

    def rmdir(self, path):
        os.rmdir(self._p(path))

    def unlink(self, path):
        os.unlink(self._p(path))

    def symlink(self, target, source):  # fusepy's order: the new name, then what it points at
        os.symlink(source, self._p(target))

    def link(self, target, source):
        os.link(self._p(source), self._p(target))

    def rename(self, old, new):
        os.rename(self._p(old), self._p(new))

    # ---- contents (raw_fi: the open flags reach create, O_EXCL included) ---------------------------------------
    def create(self, path, mode, fi):
        fi.fh = os.open(self._p(path), fi.flags | os.O_CREAT, mode)
        return 0

    def open(self, path, fi):
        fi.fh = os.open(self._p(path), fi.flags & ~(os.O_CREAT | os.O_EXCL))
        return 0

    def read(self, path, size, offset, fh):
        return os.pread(fh.fh, size, offset)

    def write(self, path, data, offset, fh):
        return os.pwrite(fh.fh, data, offset)

    def flush(self, path, fh):
        return 0

    def fsync(self, path, datasync, fh):
        (os.fdatasync if datasync else os.fsync)(fh.fh)
        return 0

    def release(self, path, fh):
        os.close(fh.fh)
        return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("backing")
    ap.add_argument("mountpoint")
    a = ap.parse_args(argv)
    if os.geteuid() != 0:
        print(f"root_squash.py: expected root (it acts as each caller); found uid {os.geteuid()}", file=sys.stderr)
        return 2
    for what in (a.backing, a.mountpoint):
        if not os.path.isdir(what) or stat.S_ISLNK(os.lstat(what).st_mode):
            print(f"root_squash.py: expected a directory; found {what!r}", file=sys.stderr)
            return 2
    FUSE(RootSquash(a.backing), a.mountpoint, foreground=True, nothreads=True, allow_other=True, raw_fi=True,
         fsname="root-squash")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
