"""Small helpers for the bad-input matrix (tests/*/test_bad_input_<area>.py).

Every row of the matrix proves four things about one hostile or careless input:

- the answer is ONE line that says what was expected, what was found and what to do (``assert_one_line``);
- no Python traceback reaches the user (``assert_no_traceback``);
- nothing the command could touch changed (``fingerprint`` before and after, or ``REMOTE_FINGERPRINT`` on a node);
- it ends within a time bound: ``run_bounded`` kills the whole process group and fails the row on a hang, it never
  hangs the suite.

Import it from a test module as ``from bad_input_util import ...`` (tests/conftest.py puts tests/ on sys.path).
"""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from events import sleeping

# Default bound of one row. A row that needs longer says so; a hang is a failure, not a wait.
DEFAULT_SECONDS = 60.0


@dataclass
class Bounded:
    """What a bounded run returned."""

    args: Sequence[str]
    rc: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def output(self) -> str:
        return self.stdout + self.stderr


class Hang(AssertionError):
    """The command did not finish within its bound (it was killed)."""


def run_bounded(
    args: Sequence[str],
    *,
    seconds: float = DEFAULT_SECONDS,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike | None = None,
    input: str | None = None,
    send_signal: tuple[float, int] | None = None,
) -> Bounded:
    """Run ``args`` in its own process group; kill the group and raise ``Hang`` after ``seconds``.

    ``send_signal=(when, SIGNUM)`` delivers a signal to the process group (Ctrl-C is ``signal.SIGINT``) to test what a
    user sees when they interrupt: ``when`` is a predicate on the process id, polled until it holds (e.g.
    ``sleeping_in_wait_loop``: the program reached the point the row interrupts), never a number of seconds that
    would race the program's start-up on a loaded machine.
    """
    t0 = time.monotonic()
    proc = subprocess.Popen(
        list(args),
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=cwd,
        start_new_session=True,
        # A terminal delivers Ctrl-C to a program whose SIGINT is at its default. When the test suite itself was
        # started in the background (a non-interactive shell's '&'), SIGINT is inherited as ignored: restore it.
        preexec_fn=_default_sigint,  # noqa: PLW1509 (only resets one signal disposition; no locks taken)
    )
    try:
        if send_signal is not None:
            when, signum = send_signal
            while proc.poll() is None and not when(proc.pid):
                if time.monotonic() - t0 > seconds:
                    raise subprocess.TimeoutExpired(args, seconds)
                time.sleep(0.02)
            if proc.poll() is None:
                os.killpg(proc.pid, signum)
            out, err = proc.communicate(timeout=max(0.1, seconds - (time.monotonic() - t0)))
        else:
            out, err = proc.communicate(input, timeout=seconds)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        out, err = proc.communicate()
        raise Hang(
            f"{' '.join(map(str, args))} did not finish within {seconds:.0f} s (killed)\n"
            f"stdout: {out[-2000:]}\nstderr: {err[-2000:]}"
        ) from None
    return Bounded(args, proc.returncode, out, err, time.monotonic() - t0)


def sleeping_in_wait_loop(pid: int) -> bool:
    """True while process ``pid`` is blocked in a sleep: a Python CLI past its start-up, waiting in its own loop."""
    return sleeping(pid)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def assert_no_traceback(*texts: str) -> None:
    """No Python traceback in what the user sees."""
    for text in texts:
        assert "Traceback" not in text, f"a traceback reached the user:\n{text[-3000:]}"


def assert_one_line(message: str, expected: str) -> None:
    """``message`` (stripped) is exactly the one line ``expected``."""
    got = message.strip()
    assert "\n" not in got, f"expected one line, found {got.count(chr(10)) + 1}:\n{got}"
    assert got == expected, f"expected the line\n  {expected}\nfound\n  {got}"


def assert_has_line(text: str, expected: str) -> None:
    """``expected`` is one whole line of ``text`` (after stripping each line's surrounding spaces)."""
    lines = [line.strip() for line in text.splitlines()]
    assert expected in lines, f"expected the line\n  {expected}\nin\n{text[-3000:]}"


def fingerprint(paths: Iterable[str | os.PathLike], *, content: bool = True) -> str:
    """A hash of everything under ``paths``: each entry's relative path, type, mode, size, mtime and (for regular
    files, when ``content``) its bytes. Missing paths are part of the fingerprint as missing."""
    h = hashlib.sha256()
    for root in sorted(str(p) for p in paths):
        if not os.path.lexists(root):
            h.update(f"{root} missing\n".encode())
            continue
        entries = [root]
        if os.path.isdir(root) and not os.path.islink(root):
            for dirpath, dirnames, filenames in os.walk(root):
                dirnames.sort()
                entries += [os.path.join(dirpath, n) for n in sorted(dirnames + filenames)]
        for path in entries:
            st = os.lstat(path)
            h.update(f"{path} {st.st_mode:o} {st.st_size} {st.st_mtime_ns}\n".encode())
            if content and os.path.isfile(path) and not os.path.islink(path) and os.access(path, os.R_OK):
                with open(path, "rb") as fh:
                    for chunk in iter(lambda: fh.read(1 << 20), b""):
                        h.update(chunk)
    return h.hexdigest()


# What a refused role run must leave alone on a simulated node (run with bash over ssh; prints one hash).
# __pycache__ is left out: the node's python3 may compile stdlib modules Ansible imports, not a change of the play.
REMOTE_FINGERPRINT = r"""
set -e
{
  dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\n'
  find /etc /usr /opt /var/lib/apt /var/lib/dpkg /var/lib/llmops-sglang /var/log/sglang -xdev \
       -path '*/__pycache__' -prune -o -printf '%p %y %s %m %T@\n' 2>/dev/null | sort
  systemctl list-units --all --no-legend --plain 'sglang*' 2>/dev/null | awk '{print $1, $3, $4}'
} | sha256sum | cut -d' ' -f1
"""


def ansible_messages(output: str) -> list[str]:
    """The ``msg`` values of failed tasks in ansible-playbook's default output (``fatal: [h]: FAILED! => {...}``)."""
    import json

    found = []
    for line in output.splitlines():
        marker = "FAILED! => "
        if marker in line:
            try:
                found.append(json.loads(line.split(marker, 1)[1]).get("msg", ""))
            except ValueError:
                found.append(line.split(marker, 1)[1])
    return found


def failed_by_host(output: str) -> dict[str, list[tuple[str | None, str]]]:
    """host -> (task name, ``msg``) of each of its failed tasks, in order, from ansible-playbook's default output
    (``TASK [name]`` headers, ``fatal: [host]: FAILED! => {...}`` lines)."""
    task, found = None, {}
    for line in output.splitlines():
        if line.startswith("TASK ["):
            task = line[len("TASK [") :].rsplit("]", 1)[0]
        elif line.startswith("fatal: [") and "]: FAILED! => " in line:
            host = line[len("fatal: [") :].split("]", 1)[0]
            found.setdefault(host, []).extend((task, msg) for msg in ansible_messages(line))
    return found


# Many rows in one ansible-playbook run: each row is its own inventory host with its values in the host variable
# row_vars, which this first play sets as facts - they outrank inventory, play and role variables as -e does. The
# caller appends the play under test. no_log: some rows are API keys.
ROW_FACTS_PLAY = """---
- name: Give each row's host its values, as -e would
  hosts: all
  gather_facts: false
  tasks:
    - name: Set the row's values as facts
      ansible.builtin.set_fact:
        "{{ item.key }}": "{{ item.value }}"
      loop: "{{ row_vars | dict2items }}"
      loop_control:
        label: "{{ item.key }}"
      no_log: true
"""
