"""ansible-playbook's default output, read the way the tests read it: the PLAY RECAP per host, the tasks that changed
something, the tasks that failed. Shared by the node tests and the molecule verifiers."""

from __future__ import annotations

import os
import re


def play_recap(stdout: str) -> dict[str, dict[str, int]]:
    """PLAY RECAP of ansible-playbook's default output: {host: {"ok": n, "changed": n, "unreachable": n, ...}}."""
    rows = re.findall(r"^(\S+)\s+:\s+(ok=\d+.*)$", stdout, re.M)
    return {host: {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", counts)} for host, counts in rows}


def changed_tasks(stdout: str) -> list[str]:
    """The tasks that reported a change in ansible-playbook's default output, as "TASK [name]: host" lines: what a test
    of a run that must change nothing prints when it did."""
    out, task = [], ""
    for line in stdout.splitlines():
        if line.startswith("TASK ["):
            task = line.rstrip(" *")
        else:
            m = re.match(r"changed: \[([^\]]+)\]", line)
            if m:
                out.append(f"{task}: {m.group(1)}")
    return out


def failed_tasks(stdout: str, width: int = 1500) -> str:
    """Every failed task in ansible-playbook's default output (not the ignored ones), with its TASK line: what a test
    prints when a run failed, so that a failure early in a long run is not lost behind the output's tail."""
    out, task = [], ""
    lines = stdout.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("TASK ["):
            task = line.rstrip(" *")
        elif re.match(r"(fatal|failed): \[", line) and not lines[i + 1 : i + 2] == ["...ignoring"]:
            out.append(f"{task}\n  {line[:width]}")
    return "\n".join(out) or "(no failed task in the output)"


def default_output_env(**extra: str) -> dict[str, str]:
    """This process's environment for an ansible-playbook run whose output the functions above read: the default
    callback, no colour (``extra`` added)."""
    env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="default", ANSIBLE_NOCOLOR="1", **extra)
    env.pop("ANSIBLE_FORCE_COLOR", None)
    return env
