# Test helper, loaded only through ANSIBLE_CALLBACK_PLUGINS (molecule/default, the node tests, make bench).
#
# Per playbook run: how often each module of the collection actually ran on each host (ok, changed or failed; a
# skipped task did not run), and the wall time of every task (from its start to the next task's start; the linear
# strategy runs a task on every host before the next one starts). Written to MODULE_RUNS_DIR/<time>-<pid>.json at the
# end. The molecule default scenario asserts from these files that llmops.sglang.gpu_facts runs once per host in a
# converged site.yml; tests/bench/bench_converged.py prints where the time of a converged run goes.
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: module_runs
type: aggregate
short_description: Count per host how often each llmops.sglang module ran, and time every task (tests only)
description:
  - Writes one JSON file per playbook run to the directory in the environment variable MODULE_RUNS_DIR.
requirements:
  - enabled in callbacks_enabled (ANSIBLE_CALLBACKS_ENABLED)
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "module_runs"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, display=None):
        super().__init__(display=display)
        self._playbook = None
        self._play = None
        self._runs = {}
        self._tasks = []
        self._open = None
        self._started = time.time()

    def v2_playbook_on_start(self, playbook):
        self._playbook = os.path.abspath(playbook._file_name)

    def _close(self):
        if self._open:
            row, started = self._open
            row["seconds"] = round(time.time() - started, 3)
            self._tasks.append(row)
            self._open = None

    def v2_playbook_on_play_start(self, play):
        self._close()
        self._play = play.get_name()

    def v2_playbook_on_task_start(self, task, is_conditional=False):  # a handler start passes the task alone
        self._close()
        role = task._role.get_name() if task._role else ""
        self._open = ({"play": self._play, "role": role, "task": task.get_name(), "action": task.action}, time.time())

    v2_playbook_on_handler_task_start = v2_playbook_on_task_start

    def _status(self, status):
        if self._open:
            seen = self._open[0].setdefault("status", {})
            seen[status] = seen.get(status, 0) + 1

    def v2_runner_on_skipped(self, result):
        self._status("skipped")

    def _count(self, result):
        self._status("ran")
        action = result.task.action
        if action.startswith("llmops.sglang."):
            per_host = self._runs.setdefault(result.host.get_name(), {})
            per_host[action] = per_host.get(action, 0) + 1

    def v2_runner_on_ok(self, result):
        self._count(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._count(result)

    def v2_playbook_on_stats(self, stats):
        self._close()
        directory = os.environ.get("MODULE_RUNS_DIR")
        if not directory:
            return
        Path(directory).mkdir(parents=True, exist_ok=True)
        record = {
            "playbook": self._playbook,
            "started": self._started,
            "total": round(time.time() - self._started, 3),
            "runs": self._runs,
            "tasks": self._tasks,
        }
        name = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(self._started))}-{os.getpid()}.json"
        (Path(directory) / name).write_text(json.dumps(record, indent=1, sort_keys=True))
