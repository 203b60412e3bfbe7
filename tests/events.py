"""Waiting on events in tests, never on guessed durations.

A test that needs the system under test to reach some state polls that state (``wait_until``) instead of sleeping
for as long as the state "usually" takes. The limit is a hang guard only: the wait returns the moment the state is
there, so the limit never decides a passing run, however loaded the machine, and it costs nothing to make it
generous. ``GUARD`` (300 s) is above a hundred times what any wait here takes on this 2-core machine with both
cores busy (the longest, the stand-in's 16 ranks of a two-node start, took about 10 s under that load).

Import as ``from events import wait_until, sleeping`` (pytest puts tests/ on sys.path for tests/conftest.py).
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

GUARD = 300.0
# The hang guard of one ansible-playbook run in a node test: far above any run's real duration (a cold three-node
# site.yml took 514 s alone and 1236 s beside make test on this 2-core machine, 2026-12-02), since a guard the load
# can reach is a timing failure; the playbooks bound their own waits (readiness, drains, downloads).
PLAYBOOK_GUARD = 3600

# x86-64 and arm64 numbers of the system calls time.sleep() blocks in (clock_nanosleep, nanosleep; select, pselect6
# on older Pythons): a Python program blocked in one of them sleeps in its own code.
_SLEEP_SYSCALLS = {"x86_64": {230, 35, 23, 270}, "aarch64": {115, 101, 72}}


def wait_until(predicate, what, limit: float = GUARD, interval: float = 0.02):
    """Poll ``predicate()`` until it returns something true and return that; AssertionError after ``limit`` s.
    ``what`` names the event (a string, or a callable giving it, evaluated only on failure)."""
    end = time.monotonic() + limit
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > end:
            raise AssertionError(f"waited {limit:.0f} s (a hang guard) for {what() if callable(what) else what}")
        time.sleep(interval)


def sleeping(pid: int) -> bool:
    """True while process ``pid`` is blocked in a sleep (``/proc/PID/syscall``; needs root or the same user)."""
    try:
        number = Path(f"/proc/{pid}/syscall").read_text().split()[0]
    except (OSError, IndexError):
        return False
    return number.isdigit() and int(number) in _SLEEP_SYSCALLS.get(os.uname().machine, set())


def stop_process(proc, grace: float = 10.0) -> None:
    """End a process this test started (by its Popen): SIGTERM, then SIGKILL if it is still there after ``grace``
    seconds (a hang guard, not a duration the test depends on)."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(grace)
