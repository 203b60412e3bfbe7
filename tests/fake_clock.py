"""A fake clock for tests: time moves only when the code under test sleeps, and scripted events happen at set times.

Code that takes ``clock=`` and ``sleep=`` (``sglang_wait.wait_for_startup``, ``wait_health_only``) runs against it
without waiting and without racing a thread: an event scheduled with ``at(t, action)`` runs inside the sleep that
crosses ``t``, so the code under test always sees the world exactly as it is at its own clock's time.

Import it as ``from fake_clock import FakeClock`` (pytest puts tests/ on sys.path for tests/conftest.py).
"""

from __future__ import annotations

import os
from types import SimpleNamespace


class FakeClock:
    """``clock()`` is the time; ``clock.sleep(s)`` advances it, running every event due on the way, in order."""

    def __init__(self, t: float = 1_000_000.0):
        self.t = float(t)
        self.start = self.t
        self.slept = 0.0
        self.events: list[tuple[float, int, object]] = []

    def __call__(self) -> float:
        return self.t

    def at(self, offset: float, action) -> FakeClock:
        """Run ``action()`` when the clock reaches start + ``offset`` seconds."""
        self.events.append((self.start + offset, len(self.events), action))
        self.events.sort(key=lambda e: (e[0], e[1]))
        return self

    def sleep(self, s: float) -> None:
        assert s >= 0, s
        end = self.t + s
        while self.events and self.events[0][0] <= end:
            when, _, action = self.events.pop(0)
            self.t = max(self.t, when)
            action()
        self.t = end
        self.slept += s

    def elapsed(self) -> float:
        return self.t - self.start

    def time_module(self):
        """A stand-in for the ``time`` module a module under test imported (``time.time``, ``time.sleep``)."""
        return SimpleNamespace(time=self, sleep=self.sleep, monotonic=self)

    def append(self, path, text: str):
        """An action: append ``text`` to ``path`` and stamp the file with the clock's time (its mtime is what a log
        follower reads as "when the newest line was written")."""

        def write():
            with open(path, "a") as fh:
                fh.write(text)
            os.utime(path, (self.t, self.t))

        return write
