# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""One download per commit on shared storage: a lock that holds across hosts on a network file system.

Several hosts whose model root is one shared directory (NFS, CephFS, a bind mount) would otherwise all download the same
commit at once into the same ``.llmops-partial`` files. The lock is a directory, ``ROOT/.llmops-lock-COMMIT``, holding
``owner.json`` ({owner, host, pid, since}): a host makes a directory of its own with that file in it and renames it to
the lock's name - ``rename`` of a directory onto a non-empty one fails, atomically on a network file system as on a
local one, so exactly one host makes the lock, and no host sees a lock without its holder's name. Its holder refreshes
the file's modification time (the heartbeat) at every call and while it downloads. Every other host waits, writes
nothing, and verifies the snapshot read-only once the holder wrote its marker. A lock whose heartbeat is older than
``stale_after`` seconds (its holder's run was killed, its host went down) is taken over: renamed away (atomic; of
several hosts that saw it stale only one rename succeeds), checked to be the stale lock it was and not a fresh one, then
made again; the new holder resumes from the partial files the old one left. Staleness compares the heartbeat with this
host's clock: the hosts' clocks must agree within a small part of ``stale_after`` (NTP).

``owner`` is the name the operator knows the host by (the model role passes inventory_hostname); a call whose owner
holds the lock goes on downloading, so one host's calls of a wait_budget loop keep it.
"""

from __future__ import absolute_import, annotations, division, print_function

__metaclass__ = type

import errno
import json
import os
import shutil
import socket
import time

PREFIX = ".llmops-lock-"
OWNER = "owner.json"


def lock_path(root, commit):
    return os.path.join(root, PREFIX + commit)


def read_owner(path):
    """(owner record, heartbeat) of the lock directory ``path``, or (None, None) when there is none. A lock being made
    (no owner.json yet) reads as owned by nobody, with the directory's own time as its heartbeat."""
    try:
        st = os.stat(os.path.join(path, OWNER))
        with open(os.path.join(path, OWNER), encoding="utf-8") as f:
            data = json.load(f)
        return (data if isinstance(data, dict) else {}), st.st_mtime
    except (OSError, ValueError):
        try:
            return {}, os.stat(path).st_mtime
        except OSError:
            return None, None


class SharedLock:
    """``acquire()``: None when this owner holds the lock (now or already), else the holder's record with ``age``
    (seconds since its heartbeat). ``beat(every)`` refreshes the heartbeat; ``release()`` removes the lock."""

    def __init__(self, root, commit, owner, *, stale_after=300.0, clock=time.time):
        self.path = lock_path(root, commit)
        self.owner = str(owner)
        self.stale_after = float(stale_after)
        self.clock = clock
        self.record = {"owner": self.owner, "host": socket.gethostname(), "pid": os.getpid()}
        self.last_beat = 0.0

    def _make(self):
        """Make the lock with its record already inside: a directory of our own, renamed to the lock's name (atomic;
        fails when another host's lock is there), so no host ever sees the lock without its holder's name."""
        if os.path.lexists(self.path):
            return False
        self.record["since"] = self.clock()
        mine = "%s.new-%s-%d-%d" % (self.path, self.owner, os.getpid(), int(self.clock() * 1000))
        os.mkdir(mine, 0o755)
        try:
            with open(os.path.join(mine, OWNER), "w", encoding="utf-8") as f:
                json.dump(self.record, f)
            os.rename(mine, self.path)
        except OSError as exc:
            shutil.rmtree(mine, ignore_errors=True)
            if exc.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR):
                return False
            raise
        return True

    def _take_over(self, seen):
        """Move a stale lock out of the way and make ours; False when another host was faster."""
        aside = "%s.stale-%s-%d-%d" % (self.path, self.owner, os.getpid(), int(self.clock() * 1000))
        try:
            os.rename(self.path, aside)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ENOTEMPTY, errno.EEXIST):
                return False
            raise
        moved, beat = read_owner(aside)
        if moved != seen or (beat is not None and self.clock() - beat < self.stale_after):
            # Between our read and our rename another host took the stale lock over and made a fresh one: that
            # is the one we moved. Put it back and wait like everyone else (should a third host have made a lock
            # in the moment between, the rename fails and two hosts download: the window is one rename wide).
            try:
                os.rename(aside, self.path)
            except OSError:
                pass
            return False
        shutil.rmtree(aside, ignore_errors=True)
        return self._make()

    def acquire(self):
        for _ in range(3):  # a lock removed or taken over between two looks: look again
            if self._make():
                return None
            seen, beat = read_owner(self.path)
            if seen is None:
                continue
            if seen.get("owner") == self.owner:
                self.beat()
                return None
            age = self.clock() - beat
            if age >= self.stale_after:
                if self._take_over(seen):
                    return None
                continue
            return dict(seen, age=max(0.0, age))
        seen, beat = read_owner(self.path)
        return dict(seen or {}, age=0.0 if beat is None else max(0.0, self.clock() - beat))

    def beat(self, every=0.0):
        """Refresh the heartbeat, at most every ``every`` seconds (the transfer calls this on each of its ticks)."""
        now = self.clock()
        if now - self.last_beat < every:
            return
        self.last_beat = now
        try:
            os.utime(os.path.join(self.path, OWNER))
        except OSError:
            pass

    def release(self):
        seen, _ = read_owner(self.path)
        if seen is not None and seen.get("owner") == self.owner:
            shutil.rmtree(self.path, ignore_errors=True)
