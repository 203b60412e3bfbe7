# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Following a growing SGLang log file (rotation, truncation) and the stall rule every waiter uses.
Kept importable on its own for the wait machinery (``sglang_wait``) and ``bin/sglang-doctor --follow``."""

from __future__ import annotations

__metaclass__ = type

import os


def is_stalled(last_line_time, now, stall_timeout):
    """True when no new line arrived for ``stall_timeout`` seconds (both times on the caller's clock)."""
    return (
        bool(stall_timeout)
        and stall_timeout > 0
        and last_line_time is not None
        and now - last_line_time >= stall_timeout
    )


class LogFollower:
    """Follow a growing log file. Reads only new bytes; never re-reads old content.

    ``offset=None`` starts at the current end (the file's state *now*), an int starts there. ``inode`` pins the
    file the offset belongs to: if the path holds another inode when reading starts (rotation before we looked), the
    new file is read from 0. Rotation (inode change) drains the old file first, truncation (size < offset, or the
    bytes before the offset changed) restarts at 0.
    """

    FINGERPRINT = 64

    def __init__(self, path, offset=None, inode=None, max_read=4 << 20):
        self.path = path
        self.max_read = max_read
        self.rotations = 0
        self.truncations = 0
        self._fd = None
        self.inode = None
        self.offset = 0
        self._fp = b""
        st = self._stat()
        if st is None:
            self.inode, self.offset = inode, 0 if inode is None else (offset or 0)
            return
        if inode is not None and st.st_ino != inode:
            self.inode, self.offset = st.st_ino, 0
            self.rotations += 1
        else:
            self.inode = st.st_ino
            self.offset = st.st_size if offset is None else min(offset, st.st_size) if offset <= st.st_size else 0
            if offset is not None and offset > st.st_size:
                self.truncations += 1
        self._open()
        self._fp = self._pread_fp()

    def _stat(self):
        try:
            return os.stat(self.path)
        except OSError:
            return None

    def _open(self):
        try:
            self._fd = os.open(self.path, os.O_RDONLY)
            self.inode = os.fstat(self._fd).st_ino
        except OSError:
            self._fd = None

    def _pread_fp(self):
        if self._fd is None or self.offset == 0:
            return b""
        n = min(self.FINGERPRINT, self.offset)
        try:
            return os.pread(self._fd, n, self.offset - n)
        except OSError:
            return b""

    def position(self):
        """(inode, offset) to resume from."""
        return self.inode, self.offset

    def last_write_time(self):
        """mtime of the file being read (when its last byte was written), None when it is not open."""
        try:
            return os.fstat(self._fd).st_mtime if self._fd is not None else None
        except OSError:
            return None

    def close(self):
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def _read_fd(self, limit):
        out = []
        while limit > 0:
            b = os.pread(self._fd, min(limit, 1 << 20), self.offset)
            if not b:
                break
            out.append(b)
            self.offset += len(b)
            limit -= len(b)
        return b"".join(out)

    def read(self):
        """New bytes since the last call (b'' when nothing new)."""
        st = self._stat()
        if self._fd is None:
            if st is None:
                return b""
            if self.inode is not None and st.st_ino != self.inode:
                self.rotations += 1
                self.offset = 0
            self._open()
            if self._fd is None:
                return b""
        data = b""
        if st is not None and st.st_ino != self.inode:  # rotated: finish the old file, then switch
            data = self._read_fd(self.max_read)
            os.close(self._fd)
            self._fd = None
            self.rotations += 1
            self.offset = 0
            self._fp = b""
            self._open()
            if self._fd is None:
                return data
        size = os.fstat(self._fd).st_size
        if size < self.offset or (self._fp and self._pread_fp() != self._fp):
            self.truncations += 1
            self.offset = 0
        if size > self.offset:
            data += self._read_fd(self.max_read)
            self._fp = self._pread_fp()
        return data
