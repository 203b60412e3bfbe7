# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Parallel, segmented, resumable file transfers with in-order verification (used by the ``hf_snapshot`` module).

One job per file. A file larger than ``segment_bytes`` is split into byte ranges (segments); ``connections`` worker
threads take segments in file order, each over its own keep-alive HTTP connection, and write with ``os.pwrite`` into
``PARTIAL/PATH.incomplete``. Memory is bounded: one ``CHUNK`` buffer per worker, nothing else is held.

Resume: ``PARTIAL/PATH.incomplete.json`` records, per segment, the bytes written and (once finished) the sha256 of the
segment's bytes. It is saved at most every ``SAVE_EVERY`` seconds and always when the transfer stops, and only after
the data it describes has been written (``fdatasync``), so it never claims more than is on disk. A later run continues
each segment where it stopped and never fetches a finished segment again.

Verification: one hash thread follows each file's contiguous finished prefix in file order, reading back what the
workers wrote (page cache) into the file's hasher (sha256 of the LFS oid, or the git blob sha1). When the whole file
is hashed it must equal the listing's digest, else the segments are checked against their own recorded sha256: a
segment whose bytes changed on disk is fetched again; if none changed, the server sent wrong bytes and the partial
file is removed. Only a file whose digest matched is moved into place.
"""

from __future__ import absolute_import, annotations, division, print_function

__metaclass__ = type

import errno
import hashlib
import http.client
import json
import os
import threading
import time

from ansible_collections.llmops.sglang.plugins.module_utils.hf_hub import (
    CHUNK,
    HubError,
    new_hasher,
    retry_delay,
)

SAVE_EVERY = 5.0
MIN_SPLIT = 4 << 20  # a segment is split only when both halves keep at least this many bytes
ALIGN = 1 << 20
MIN_REQUEST = 256 << 10  # smallest range asked for when sizing requests to a deadline


def plan_segments(size, segment_bytes):
    """[[start, end, done, sha256-or-None], ...] covering [0, size); one segment when segment_bytes <= 0."""
    if size <= 0:
        return [[0, 0, 0, None]]
    step = size if segment_bytes <= 0 else segment_bytes
    return [[s, min(s + step, size), 0, None] for s in range(0, size, step)]


def load_state(path, want, segment_bytes):
    """The saved segments of a partial file when they belong to ``want`` (digest, size) and are sane, else None."""
    try:
        with open(path, encoding="utf-8") as f:
            st = json.load(f)
        segs = st["segments"]
        if st.get("want") != want:
            return None
        pos = 0
        for s in segs:
            start, end, done = int(s[0]), int(s[1]), int(s[2])
            if start != pos or end < start or not 0 <= done <= end - start:
                return None
            pos = end
        if pos != want["size"]:
            return None
        return [[int(s[0]), int(s[1]), int(s[2]), s[3] if int(s[2]) == int(s[1]) - int(s[0]) else None] for s in segs]
    except (OSError, ValueError, KeyError, TypeError, IndexError):
        return None


def save_json(path, data):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(data, f)
    os.replace(tmp, path)


class FileJob:
    def __init__(self, rel, url, want, part, segment_bytes):
        self.rel, self.url, self.want, self.part = rel, url, want, part
        self.state_path = part + ".json"
        saved = load_state(self.state_path, want, segment_bytes) if os.path.exists(part) else None
        self.segments = saved or plan_segments(want["size"], segment_bytes)
        self.resumed_from = sum(s[2] for s in self.segments) if saved else 0
        self.location = None  # final URL after redirects (shared by this file's segments)
        self.fd = None
        self.dirty = False
        self.verified = False
        self.failed = None

    def done_bytes(self):
        return sum(s[2] for s in self.segments)

    def prefix(self):
        """Bytes from 0 that are written without a gap."""
        n = 0
        for s in self.segments:
            n += s[2]
            if s[2] < s[1] - s[0]:
                break
        return n

    def open(self):
        if self.fd is None:
            d = os.path.dirname(self.part)
            if not os.path.isdir(d):
                os.makedirs(d, mode=0o755, exist_ok=True)
            if not os.path.exists(self.part):
                for s in self.segments:
                    s[2], s[3] = 0, None
            self.fd = os.open(self.part, os.O_RDWR | os.O_CREAT, 0o644)
        return self.fd

    def save(self):
        if self.fd is not None and self.dirty:
            os.fdatasync(self.fd)
        save_json(self.state_path, {"want": self.want, "segments": self.segments})
        self.dirty = False

    def close(self):
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


class Transfer:
    """Run ``jobs`` with ``connections`` workers until all are verified, ``stop_at`` passes or an error stops them."""

    def __init__(
        self,
        jobs,
        *,
        connections,
        retries,
        fetcher_factory,
        stop_at=None,
        on_tick=None,
        split=True,
        wait_missing=None,
        last_progress=None,
        peer_down=None,
        peer_failing_since=None,
        errors=0,
    ):
        self.jobs = jobs
        self.connections = max(1, connections)
        self.retries = retries
        self.fetcher_factory = fetcher_factory
        self.stop_at = stop_at
        self.on_tick = on_tick
        self.split = split  # work stealing needs a source with Range support
        self.wait_missing = wait_missing  # a peer still downloading: 404 means "not yet", for this many seconds
        self.last_progress = last_progress or time.time()
        # A peer (the fleet's seed share) that fails to answer: give up after this many seconds of errors in a row,
        # whatever the retry count, so a receiver whose seed died fails within peer_down + one request's timeout.
        self.peer_down = peer_down
        self.peer_failing_since = peer_failing_since
        # Failed requests in a row with no byte in between, on any connection. Carried from the previous call of a
        # wait_budget loop (errors=): a call is shorter than the retries' delays and timeouts, so a per-call count
        # alone would let a source that fails for good be retried until the loop's end (hf_local.load_streak).
        self.errors = errors
        self.lock = threading.Lock()
        self.cond = threading.Condition(self.lock)
        self.stop = threading.Event()
        self.error = None
        self.queue = [(j, s) for j in jobs for s in j.segments if s[2] < s[1] - s[0]]
        self.inflight = []  # (job, segment) being fetched: an idle worker may split the largest one
        self.active = 0
        self.bytes_fetched = 0
        self.hash_seconds = 0.0
        self.refetched = []
        self.requests = 0
        self.save_soon = False
        self.splits = 0

    # ---------------------------------------------------------------------------------------------- workers
    def _fail(self, exc):
        with self.cond:
            if self.error is None:
                self.error = exc
            self.stop.set()
            self.cond.notify_all()

    def _next(self):
        with self.cond:
            while not self.stop.is_set():
                if self.queue:
                    item = self.queue.pop(0)
                    self.inflight.append(item)
                    self.active += 1
                    return item
                item = self._split() if self.split else None
                if item is not None:
                    self.inflight.append(item)
                    self.active += 1
                    return item
                if not self.active and all(j.verified or j.failed for j in self.jobs):
                    return None
                self.cond.wait(0.2)  # segments may come back after a failed verification
        return None

    def _split(self):
        """Work stealing (under the lock): halve the in-flight segment with the most bytes left, so no connection
        idles while a large file's tail is fetched over one. The halves stay a contiguous partition of the file."""
        best, left = None, 2 * MIN_SPLIT
        for job, seg in self.inflight:
            rest = seg[1] - seg[0] - seg[2]
            if rest > left:
                best, left = (job, seg), rest
        if best is None:
            return None
        job, seg = best
        mid = seg[0] + seg[2] + left // 2
        mid -= mid % ALIGN if mid % ALIGN < mid - (seg[0] + seg[2]) else 0
        new = [mid, seg[1], 0, None]
        seg[1] = mid
        job.segments.insert(job.segments.index(seg) + 1, new)
        job.dirty = True
        self.splits += 1
        return job, new

    def _worker(self):
        fetcher = self.fetcher_factory()
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        try:
            while True:
                item = self._next()
                if item is None:
                    return
                try:
                    self._segment(fetcher, item[0], item[1], view)
                except HubError as exc:
                    self._fail(exc)
                except OSError as exc:
                    self._fail(_disk_error(exc, item[0]))
                except Exception as exc:  # never leave a segment behind silently (the run would wait)
                    self._fail(HubError("unexpected error while fetching %s: %r" % (item[0].rel, exc)))
                finally:
                    with self.cond:
                        self.active -= 1
                        self.inflight = [x for x in self.inflight if x[1] is not item[1]]
                        self.cond.notify_all()
        finally:
            with self.lock:
                self.requests += fetcher.requests
            fetcher.close()

    def _segment(self, fetcher, job, seg, view):
        start = seg[0]
        with self.lock:
            fd = job.open()
        hasher = hashlib.sha256()
        if seg[2]:
            _hash_range(fd, start, start + seg[2], hasher, view)
        attempt = 0
        relocated = False
        rate = None  # this connection's bytes/s, measured on its previous answer
        while not self.stop.is_set():
            pos = start + seg[2]
            if pos >= seg[1]:
                break
            before = seg[2]
            url = job.location or job.url
            try:
                stop_by = self._request_end(pos, seg[1], rate)
                whole = start == 0 and stop_by == job.want["size"] and pos == 0
                headers = {} if whole else {"Range": "bytes=%d-%d" % (pos, stop_by - 1)}
                t_req = time.time()
                resp, final = fetcher.get(url, headers)
                self.peer_failing_since = None
                with resp:
                    if resp.status == 206:
                        cr = resp.getheader("Content-Range") or ""
                        if not cr.startswith("bytes %d-" % pos):
                            raise HubError("%s answered Content-Range %r to Range bytes=%d-" % (url, cr, pos))
                    elif resp.status != 200 or not whole:
                        raise HubError(
                            "%s answered HTTP %d to a byte-range request; set connections: 1 and segment_mib: 0 for "
                            "a server without Range support" % (url, resp.status)
                        )
                    job.location = final
                    # A deadline (wait_budget) lets the current answer finish - it was sized to end about then - so
                    # the source never sends bytes that are thrown away; an error stops at once.
                    while pos < min(stop_by, seg[1]) and not (self.stop.is_set() and self.error is not None):
                        n = resp.readinto(view[: min(CHUNK, stop_by - pos, seg[1] - pos)])
                        if not n:
                            break
                        with self.cond:
                            n = min(n, seg[1] - pos)  # the segment may have been split meanwhile
                        if n <= 0:
                            break
                        # A split leaves >= MIN_SPLIT (> CHUNK) bytes before the cut, so these bytes stay ours.
                        os.pwrite(fd, view[:n], pos)
                        hasher.update(view[:n])
                        pos += n
                        with self.cond:
                            seg[2] = pos - start
                            self.last_progress = time.time()
                            self.errors = 0
                            job.dirty = True
                            self.bytes_fetched += n
                            self.cond.notify_all()
                    if pos - (start + before) > 0:
                        rate = (pos - (start + before)) / max(time.time() - t_req, 1e-3)
                    if pos < min(stop_by, seg[1]):
                        fetcher.close()  # never reuse a connection in the middle of a body
                        if not self.stop.is_set():
                            raise http.client.IncompleteRead(b"", seg[1] - pos)
                    elif pos < seg[1]:
                        resp.read()  # a range sized to the time left: the segment goes on in the next request
                        continue
                    else:
                        if resp.length:
                            fetcher.close()  # split while in flight: the rest of this body belongs to the other half
                        else:
                            resp.read()  # at the end of the body: the connection can serve the next range
                        seg[3] = hasher.hexdigest()
                        self.save_soon = True  # a finished segment is recorded within one tick
            except HubError as exc:
                if exc.status == 404 and self.wait_missing is not None:
                    self.peer_failing_since = None  # the peer answers: it is alive, just not there yet
                    waited = time.time() - self.last_progress
                    if waited > self.wait_missing:
                        raise HubError(
                            "%s: the peer has not had %s for %d s (peer_wait); is the seed host still downloading?"
                            % (url, job.rel, waited)
                        ) from None
                    self._pause(1.0)  # the peer has not verified this file yet
                    continue
                if job.location and exc.status in (401, 403, 404, 410) and not relocated:
                    job.location = None  # an expired redirect: ask the hub for a new one, once
                    relocated = True
                    continue
                if not exc.retryable():
                    raise
                if self.peer_down is not None:
                    self._peer_failed(url, str(exc))
                    continue
                attempt = 1 if seg[2] > before else attempt + 1
                if self._gave_up(attempt, seg[2] > before):
                    raise HubError(
                        "%s; %d bytes of %s are kept and the next run resumes from there"
                        % (exc, job.done_bytes(), job.rel),
                        status=exc.status,
                        code=exc.code,
                    ) from None
                self._pause(retry_delay(exc, attempt))
            except (http.client.HTTPException, ConnectionError, TimeoutError) as exc:
                fetcher.close()
                if self.peer_down is not None:
                    self._peer_failed(url, type(exc).__name__)
                    continue
                attempt = 1 if seg[2] > before else attempt + 1
                if self._gave_up(attempt, seg[2] > before):
                    raise HubError(
                        "the transfer of %s stopped at byte %d of %d (%s); the finished bytes are kept and the next "
                        "run resumes from there" % (job.rel, start + seg[2], job.want["size"], type(exc).__name__)
                    ) from None
                self._pause(retry_delay(None, attempt))

    def _gave_up(self, attempt, progressed):
        """After a failed request: True once this segment failed more than ``retries`` times in a row, or the
        source failed more than ``retries`` times per connection in a row, counted across calls (``errors``)."""
        with self.lock:
            self.errors = 1 if progressed else self.errors + 1
            return attempt > self.retries or self.errors > self.retries * self.connections

    def _peer_failed(self, url, why):
        """A network error or 5xx from the peer: wait briefly and try again, or fail once the peer has failed for
        peer_down seconds in a row (one line naming the peer)."""
        now = time.time()
        with self.lock:
            if self.peer_failing_since is None:
                self.peer_failing_since = now
            since = self.peer_failing_since
        if now - since >= self.peer_down:
            netloc = url.split("://", 1)[-1].split("/", 1)[0]
            raise HubError(
                "the seed host's share %s has not answered for %d s (%s); the seed host failed or stopped sharing: "
                "see its output, fix it and run again" % (netloc, now - since, why)
            )
        self._pause(min(1.0, since + self.peer_down - now))

    def _request_end(self, pos, end, rate):
        """End of the next range: the whole segment, or with a deadline about what this connection can fetch in the
        time left (at least MIN_REQUEST), so that a slice ends between answers instead of in the middle of one."""
        if self.stop_at is None or not self.split:
            return end
        left = self.stop_at - time.time()
        want = MIN_REQUEST if rate is None else max(MIN_REQUEST, int(rate * left))
        return min(end, pos + want)

    def _pause(self, delay):
        """Wait ``delay`` seconds before asking again, at most until the call's deadline; past it, stop the call
        (as the main loop would within a quarter second) instead of asking the failing source again at once."""
        if self.stop_at is not None:
            left = self.stop_at - time.time()
            if left <= 0:
                self.stop.set()
                return
            delay = min(delay, left)
        self.stop.wait(delay)

    # ---------------------------------------------------------------------------------------------- hashing
    def _hasher_thread(self, finish):
        buf = bytearray(CHUNK)
        view = memoryview(buf)
        try:
            for job in self.jobs:
                self._verify(job, view)
                if self.stop.is_set():
                    return
                finish(job)
        except OSError as exc:
            self._fail(_disk_error(exc, job))
        except HubError as exc:
            self._fail(exc)
        except Exception as exc:  # a dead hash thread must stop the workers, not leave them waiting
            self._fail(HubError("unexpected error while verifying %s: %r" % (job.rel, exc)))

    def _verify(self, job, view):
        want = job.want
        hasher = new_hasher(want["kind"], want["size"])
        hashed = 0
        while not self.stop.is_set():
            with self.cond:
                ready = job.prefix()
                if ready == hashed and hashed < want["size"]:
                    self.cond.wait(0.5)
                    continue
                fd = job.open()
            t0 = time.time()
            _hash_range(fd, hashed, ready, hasher, view)
            self.hash_seconds += time.time() - t0
            hashed = ready
            if hashed < want["size"]:
                continue
            if hasher.hexdigest() == want["digest"]:
                job.verified = True
                return
            # Which segments changed on disk since they were written? Fetch those again; else the source is wrong.
            bad = []
            for i, seg in enumerate(job.segments):
                h = hashlib.sha256()
                _hash_range(fd, seg[0], seg[1], h, view)
                if seg[3] is None or h.hexdigest() != seg[3]:
                    bad.append(i)
            if not bad:
                with self.cond:
                    job.close()
                    for p in (job.part, job.state_path):
                        if os.path.exists(p):
                            os.unlink(p)
                raise HubError(
                    "%s: %s is %s, the listing says %s; the partial file was removed, the next run downloads it again"
                    % (job.url, want["kind"], hasher.hexdigest(), want["digest"])
                )
            with self.cond:
                for i in bad:
                    job.segments[i][2], job.segments[i][3] = 0, None
                    self.queue.insert(0, (job, job.segments[i]))
                self.refetched.append({"path": job.rel, "segments": bad})
                job.dirty = True
                self.cond.notify_all()
            hasher = new_hasher(want["kind"], want["size"])
            hashed = 0
        return

    # ---------------------------------------------------------------------------------------------- run
    def run(self, finish):
        """Download and verify; ``finish(job)`` is called (from the hash thread) for each verified file in order.
        Returns True when every job is verified, False when stopped by ``stop_at``; raises HubError on failure."""
        threads = [threading.Thread(target=self._worker, daemon=True) for _ in range(self.connections)]
        threads.append(threading.Thread(target=self._hasher_thread, args=(finish,), daemon=True))
        for t in threads:
            t.start()
        last_save = time.time()
        try:
            while any(t.is_alive() for t in threads):
                threads[-1].join(0.25)
                now = time.time()
                if self.stop_at is not None and now >= self.stop_at:
                    self.stop.set()
                    with self.cond:
                        self.cond.notify_all()
                if self.on_tick:
                    self.on_tick(self)
                if now - last_save >= SAVE_EVERY or self.save_soon:
                    self.save_soon = False
                    self._save_all()
                    last_save = now
                if not threads[-1].is_alive():
                    self.stop.set()  # every file verified (or a failure): release the workers
                    with self.cond:
                        self.cond.notify_all()
        finally:
            self.stop.set()
            for t in threads:
                t.join()
            self._save_all()
        if self.error is not None:
            raise self.error
        return all(j.verified for j in self.jobs)

    def _save_all(self):
        with self.lock:
            for j in self.jobs:
                if j.verified or j.fd is None or not os.path.exists(j.part):
                    continue
                try:
                    j.save()
                except OSError as exc:
                    if self.error is None:
                        self.error = _disk_error(exc, j)

    def done_bytes(self):
        with self.lock:
            return sum(j.done_bytes() for j in self.jobs)


def _hash_range(fd, start, end, hasher, view):
    pos = start
    while pos < end:
        n = os.preadv(fd, [view[: min(len(view), end - pos)]], pos)
        if n <= 0:
            raise OSError(errno.EIO, "short read at byte %d" % pos)
        hasher.update(view[:n])
        pos += n


def _disk_error(exc, job):
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        return HubError(
            "the disk is full while writing %s (%s); free space on that file system and run again: the finished "
            "segments are kept" % (job.part, os.strerror(exc.errno)),
            code="DiskFull",
        )
    return HubError("cannot write %s: %s" % (job.part, exc.strerror or exc))
