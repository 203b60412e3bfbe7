# Test helper, loaded only by tests/integration through ANSIBLE_CALLBACK_PLUGINS.
#
# ansible-core 2.19 ships no ``json`` stdout callback (``json`` is routed to ansible.posix.json, which the venv does
# not install), so the integration tests use this minimal one. Its name contains "json", which is how the
# collection's sglang_progress callback decides to write its lines to stderr and keep stdout valid JSON.
from __future__ import annotations

import json
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: it_json
type: stdout
short_description: One JSON document on stdout with every task result (integration tests only)
description:
  - Prints one JSON document at the end of the run - plays, their tasks, each task's result per host, and the
    per-host stats.
  - Every result carries C(_it_started) and C(_it_received), the controller's time.time() when the task started and
    when its result arrived.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "it_json"

    def __init__(self, display=None):
        super().__init__(display=display)
        self._plays = []
        self._task_started = None

    def v2_playbook_on_play_start(self, play):
        self._plays.append({"play": play.get_name(), "tasks": []})

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._task_started = time.time()
        self._plays[-1]["tasks"].append({"task": task.get_name(), "hosts": {}})

    def _record(self, result, status):
        res = dict(self._dump_results_obj(result))
        res.update(_it_status=status, _it_started=self._task_started, _it_received=time.time())
        self._plays[-1]["tasks"][-1]["hosts"][result._host.get_name()] = res

    def _dump_results_obj(self, result):
        return json.loads(json.dumps(result._result, default=str))

    def v2_runner_on_ok(self, result):
        self._record(result, "ok")

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._record(result, "failed")

    def v2_runner_on_unreachable(self, result):
        self._record(result, "unreachable")

    def v2_runner_on_skipped(self, result):
        self._record(result, "skipped")

    def v2_playbook_on_stats(self, stats):
        summary = {h: stats.summarize(h) for h in sorted(stats.processed)}
        self._display.display(json.dumps({"plays": self._plays, "stats": summary}, sort_keys=True))
