"""Run one task file of a role on localhost as ansible-playbook runs it (a local connection, this checkout's
ansible.cfg and collection), followed by a debug task that prints a marker once the task file let the run through.
Shared by the tests of task files that only need a listener on loopback or fake binaries on PATH."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PASSED = "PASSED-THE-TASKS"

PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Run the task file alone
      ansible.builtin.include_role:
        name: {role}
        tasks_from: {tasks_from}
        apply:
          tags: [always]
      tags: [always]
    - name: Say that the task file let the run through
      ansible.builtin.debug:
        msg: "{passed} {message}"
      tags: [always]
"""


def run_tasks_from(tmp_path: Path, role: str, tasks_from: str, variables: dict, *, message: str = "", env=None,
                   args=()) -> tuple[int, str]:  # fmt: skip
    """(exit status, the run's output on one line) of ``role``'s ``tasks_from`` with ``variables`` as extra vars;
    the marker PASSED (then ``message``, templated) is printed only when the task file let the run through."""
    play = tmp_path / "play.yml"
    play.write_text(PLAY.format(role=role, tasks_from=tasks_from, passed=PASSED, message=message))
    variables = {"ansible_python_interpreter": sys.executable, **variables}
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(play)]
    cmd += ["-e", json.dumps(variables), *args]
    full_env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(ROOT))
    full_env.update(env or {})
    p = subprocess.run(cmd, capture_output=True, text=True, env=full_env, cwd=tmp_path, check=False, timeout=300)
    return p.returncode, " ".join((p.stdout + p.stderr).split())
