# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Waiting for SGLang: log sources, the wait loop and the health-only loop.

The one home of waiting, shared by the ``sglang_server`` module and ``bin/sglang-doctor --follow``. What a line
means is the engine's business (``sglang_log``: ``StartupLog``); this file only decides when to read, how long to
wait and why the wait ended. Nothing here knows a regex of SGLang's output.

Public API
----------
``LogFollower(path, offset, inode)``   follows a growing file from an offset; detects rotation and truncation.
``JournalSource(journalctl, id)``      the entries of one systemd unit invocation, as log bytes.
``NullSource()``                       reads nothing (a health-only wait).
``is_stalled(last, now, s)``           the stall rule of every waiter (``s`` seconds without a new line).
``check_finite(name, value, ...)``     the number checks every caller applies to its wait parameters.
``wait_for_startup(source, launch_time, ...)``  the wait loop; returns ``(log, status)``.
``wait_health_only(health, launch_time, ...)``  a running process whose log cannot be told apart: only /health.
``check_health(url, ...)``             one GET of the health URL: its HTTP status, or None.
``STATUSES``                           why a wait ends: ready, failed, died, stalled, timeout, budget.
"""

from __future__ import annotations

__metaclass__ = type

import json
import math
import os
import stat
import time

from ansible_collections.llmops.sglang.plugins.module_utils.sglang_log import StartupLog
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_phases import WAIT_MILESTONES

UNIT_CHECK_INTERVAL = 1.0
HEALTH_INTERVAL = 1.0
TAIL_LINES = 30
STATUSES = ("ready", "failed", "died", "stalled", "timeout", "budget")


# ---------------------------------------------------------------------------------------------------------------
# Numbers
# ---------------------------------------------------------------------------------------------------------------
def check_finite(name, value, *, low=None, high=None, low_open=False, unit="seconds"):
    """None when ``value`` is a finite number in the range, else the one-line reason (expected, found)."""
    lo = "" if low is None else ("> %s" % low if low_open else ">= %s" % low)
    hi = "" if high is None else "<= %s" % high
    want = " and ".join(x for x in (lo, hi) if x) or "a finite number"
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return "expected %s to be a finite number of %s (%s); found %r" % (name, unit, want, value)
    if low is not None and (value <= low if low_open else value < low):
        return "expected %s %s %s; found %s" % (name, want, unit, value)
    if high is not None and value > high:
        return "expected %s %s %s; found %s" % (name, want, unit, value)
    return None


def is_stalled(last_line_time, now, stall_timeout):
    """True when no new line arrived for ``stall_timeout`` seconds (both times on the caller's clock)."""
    return (
        bool(stall_timeout)
        and stall_timeout > 0
        and last_line_time is not None
        and now - last_line_time >= stall_timeout
    )


# ---------------------------------------------------------------------------------------------------------------
# Log sources: read() -> bytes (b'' when nothing new), close()
# ---------------------------------------------------------------------------------------------------------------
class LogFollower:
    """Follow a growing log file. Reads only new bytes; never re-reads old content.

    ``offset=None`` starts at the current end (the file's state *now*), an int starts there. ``inode`` pins the
    file the offset belongs to: if the path holds another inode when reading starts (rotation before we looked), the
    new file is read from 0. Rotation (inode change) drains the old file first, truncation (size < offset, or the
    bytes before the offset changed) restarts at 0. ``problem()`` tells a caller that the path has not held a
    regular file while it followed (missing, a directory).
    """

    FINGERPRINT = 64

    def __init__(self, path, offset=None, inode=None, max_read=4 << 20):
        if offset is not None and offset < 0:
            raise ValueError("expected a byte offset >= 0; found %d" % offset)
        self.path = path
        self.max_read = max_read
        self.rotations = 0
        self.truncations = 0
        self.seen_file = False
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
            self.offset = st.st_size if offset is None else offset if offset <= st.st_size else 0
            if offset is not None and offset > st.st_size:
                self.truncations += 1
        self._open()
        self._fp = self._pread_fp()

    def problem(self):
        """Why nothing can be read from the path, as words after its name (None once a regular file was read)."""
        if self.seen_file:
            return None
        st = self._stat()
        if st is None:
            return "does not exist"
        if stat.S_ISDIR(st.st_mode):
            return "is a directory"
        if not stat.S_ISREG(st.st_mode):
            return "is not a regular file"
        return None

    def _stat(self):
        try:
            return os.stat(self.path)
        except OSError:
            return None

    def _open(self):
        try:
            fd = os.open(self.path, os.O_RDONLY)
        except OSError:
            self._fd = None
            return
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # a directory or a device is not a log: never read it
            os.close(fd)
            self._fd = None
            return
        self._fd = fd
        self.inode = st.st_ino
        self.seen_file = True

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


class JournalSource:
    """Entries of one unit invocation, streamed by ``journalctl --follow -o json _SYSTEMD_INVOCATION_ID=<id>``."""

    def __init__(self, journalctl, invocation_id, popen=None):
        import subprocess

        self._popen = popen or subprocess.Popen
        cmd = [
            journalctl,
            "--no-pager",
            "--follow",
            "--lines=all",
            "--output=json",
            "_SYSTEMD_INVOCATION_ID=" + invocation_id,
        ]
        self._proc = self._popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=dict(os.environ, LANG="C", LC_ALL="C")
        )
        os.set_blocking(self._proc.stdout.fileno(), False)
        self._buf = b""
        self.cursor = None
        self.last_time = None  # __REALTIME_TIMESTAMP of the last entry read (epoch seconds)

    def problem(self):
        return None

    def read(self):
        chunks = []
        while True:
            try:
                b = os.read(self._proc.stdout.fileno(), 1 << 20)
            except BlockingIOError:
                break
            if not b:
                break
            chunks.append(b)
        if not chunks:
            return b""
        data = self._buf + b"".join(chunks)
        lines = data.split(b"\n")
        self._buf = lines.pop()
        out = []
        for raw in lines:
            try:
                entry = json.loads(raw)
            except ValueError:
                continue
            msg = entry.get("MESSAGE")
            if isinstance(msg, list):  # non-UTF-8 payloads come as byte arrays
                msg = bytes(x & 0xFF for x in msg).decode("utf-8", "replace")
            if msg is None:
                continue
            self.cursor = entry.get("__CURSOR", self.cursor)
            try:
                self.last_time = int(entry["__REALTIME_TIMESTAMP"]) / 1e6
            except (KeyError, TypeError, ValueError):
                pass
            out.append(msg.encode("utf-8") + b"\n")
        return b"".join(out)

    def close(self):
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=2)
            except Exception:
                self._proc.kill()


class NullSource:
    """Reads nothing: the process's log cannot be told apart from an older run's."""

    def problem(self):
        return None

    def read(self):
        return b""

    def close(self):
        pass


# ---------------------------------------------------------------------------------------------------------------
# The wait
# ---------------------------------------------------------------------------------------------------------------
def milestones_met(log, wait_for, expected_ranks):
    n = expected_ranks or log.expected_ranks() or 1
    order = WAIT_MILESTONES[: WAIT_MILESTONES.index(wait_for) + 1]
    return all(log.milestone_met(m, n) for m in order)


def check_health(url, api_key=None, validate_certs=True, timeout=3.0, opener=None):
    headers = {"Authorization": "Bearer " + api_key} if api_key else {}
    if opener is None:
        from ansible.module_utils.urls import open_url as opener  # heavy import (ssl, http): only when needed
    try:
        resp = opener(url, headers=headers, method="GET", timeout=timeout, validate_certs=validate_certs)
        return resp.getcode() if hasattr(resp, "getcode") else resp.status
    except Exception as exc:  # any failure means "not healthy yet"
        code = getattr(exc, "code", None)
        return code if isinstance(code, int) else None


def wait_for_startup(
    source,
    launch_time,
    *,
    wait_for="ready",
    expected_ranks=None,
    timeout=1800.0,
    stall_timeout=600.0,
    wait_budget=0.0,
    poll_interval=0.2,
    health=None,
    unit_check=None,
    catch_up=False,
    last_line_time=None,
    missing_grace=None,
    log=None,
    clock=time.time,
    sleep=time.sleep,
):
    """Follow ``source`` (``read() -> bytes``) until the required milestones, a failure, a stall, the timeout or the
    call's wait budget. ``health()`` returns an HTTP status (or None); ``unit_check()`` returns a reason string when
    the process died. ``timeout`` counts from ``launch_time``, ``wait_budget`` from this call. Pass ``log`` (a
    ``StartupLog``) to keep what was read when the caller is interrupted. With ``missing_grace`` the wait ends as
    stalled once the source's ``problem()`` (no log file) persists that many seconds after the launch. Returns
    ``(log, status)``, status one of ``STATUSES``; ``log.health`` is the last HTTP status and ``log.death`` why the
    unit stopped.
    """
    for name, value, low in (("timeout", timeout, 0), ("poll_interval", poll_interval, 0)):
        reason = check_finite(name, value, low=low, low_open=True)
        if reason:
            raise ValueError(reason)
    for name, value in (("stall_timeout", stall_timeout), ("wait_budget", wait_budget)):
        reason = check_finite(name, value or 0, low=0)
        if reason:
            raise ValueError(reason)
    if log is None:
        log = StartupLog(tail_lines=TAIL_LINES, clock=clock)
    start = clock()
    last = last_line_time if last_line_time is not None else start
    budget_end = start + wait_budget if wait_budget and wait_budget > 0 else None
    next_unit = start
    next_health = start
    log.health = None
    log.death = None
    catching_up = catch_up
    while True:
        data = source.read()
        now = clock()
        written = None
        if data:
            log.feed(data, now=None if catching_up else now)
            # the stall clock runs from when the newest line was written, not from when this call read it: a
            # resumed call re-reads the launch's earlier lines, which must not restart it on every retry
            written = _last_write_time(source)
            last = now if written is None else min(now, written)
        # a resumed call re-reads this launch's earlier lines: their times come from the log's timestamps. That
        # backlog may arrive in several reads (a full buffer) and, from journalctl, only after a first empty read.
        catching_up = catching_up and (
            (not data and not log.lines)
            or len(data) >= getattr(source, "max_read", 1 << 62)
            or (written is not None and written < start)
        )
        if log.failure and log.is_terminal(now):
            return log, "failed"
        if milestones_met(log, wait_for, expected_ranks):
            if health is None:
                return log, "ready"
            if now >= next_health:
                log.health = health()
                next_health = now + HEALTH_INTERVAL
                if log.health == 200:
                    return log, "ready"
        if unit_check is not None and now >= next_unit:
            next_unit = now + UNIT_CHECK_INTERVAL
            reason = unit_check()
            if reason:
                sleep(min(0.3, poll_interval))  # let the last lines reach the file or the journal
                log.feed(source.read(), now=clock())
                log.finish(now=clock())
                log.death = reason
                return log, "failed" if log.failure else "died"
        if missing_grace is not None and now - launch_time >= missing_grace and source.problem():
            # a unit creates its log file when it starts: still none after the grace means it writes elsewhere
            log.mark_stalled(now - last)
            return log, "stalled"
        if is_stalled(last, now, stall_timeout):
            log.mark_stalled(now - last)
            return log, "stalled"
        if now - launch_time >= timeout:
            return log, "timeout"
        if budget_end is not None and now >= budget_end:
            return log, "budget"
        sleep(max(0.0, min(poll_interval, _next_deadline(now, launch_time + timeout, budget_end))))


def _next_deadline(now, *deadlines):
    """Seconds to the nearest deadline, so that a long poll interval never oversleeps the timeout or the budget."""
    return min(d - now for d in deadlines if d is not None)


def _last_write_time(source):
    """When the source's newest returned line was written (epoch seconds), or None when it cannot tell."""
    getter = getattr(source, "last_write_time", None)
    if callable(getter):
        return getter()
    value = getattr(source, "last_time", None)
    return value if isinstance(value, (int, float)) else None


def wait_health_only(
    health, launch_time, *, timeout, wait_budget=0.0, unit_check=None, clock=time.time, sleep=time.sleep
):
    """An already-running unit with a file log: only the health URL can prove readiness.

    ``timeout`` counts from ``launch_time`` (recorded in the resume token), so retries never extend it;
    ``wait_budget`` counts from this call. Returns ``(log, status)`` like ``wait_for_startup``; the log is empty
    (nothing of it was read) and ``log.health`` holds the last HTTP status.
    """
    if not callable(health):
        raise ValueError("a health-only wait needs a health URL to ask")
    log = StartupLog(tail_lines=TAIL_LINES, clock=clock)
    log.health = None
    log.death = None
    start = clock()
    while True:
        log.health = health()
        if log.health == 200:
            return log, "ready"
        reason = unit_check() if unit_check else None
        if reason:
            log.death = reason
            return log, "died"
        now = clock()
        if now - launch_time >= timeout:
            return log, "timeout"
        if wait_budget and now - start >= wait_budget:
            return log, "budget"
        sleep(max(0.0, min(HEALTH_INTERVAL, launch_time + timeout - now)))
