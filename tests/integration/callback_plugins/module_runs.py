# Test helper, loaded only through ANSIBLE_CALLBACK_PLUGINS (molecule/default, the node tests, make bench).
#
# Counts, per host, how often each module of the collection actually ran (ok, changed or failed; a skipped task did not
# run) in one ansible-playbook run, and writes the counts to MODULE_RUNS_DIR/<time>-<pid>.json at the end. The
# molecule default scenario asserts from these files that llmops.sglang.gpu_facts runs once per host in a converged
# site.yml (and only again after the driver changed on a fresh host).
from __future__ import annotations

import json
import os
import time
from pathlib import Path

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: module_runs
type: aggregate
short_description: Count per host how often each llmops.sglang module ran (tests only)
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
        self._runs = {}
        self._started = time.time()

    def v2_playbook_on_start(self, playbook):
        self._playbook = os.path.abspath(playbook._file_name)

    def _count(self, result):
        action = result.task.action if hasattr(result, "task") else result._task.action
        if not action.startswith("llmops.sglang."):
            return
        host = result.host.get_name() if hasattr(result, "host") else result._host.get_name()
        per_host = self._runs.setdefault(host, {})
        per_host[action] = per_host.get(action, 0) + 1

    def v2_runner_on_ok(self, result):
        self._count(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._count(result)

    def v2_playbook_on_stats(self, stats):
        directory = os.environ.get("MODULE_RUNS_DIR")
        if not directory:
            return
        Path(directory).mkdir(parents=True, exist_ok=True)
        record = {"playbook": self._playbook, "started": self._started, "runs": self._runs}
        name = f"{time.strftime('%Y%m%dT%H%M%S', time.gmtime(self._started))}-{os.getpid()}.json"
        (Path(directory) / name).write_text(json.dumps(record, indent=1, sort_keys=True))
