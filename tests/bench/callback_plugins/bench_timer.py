# Benchmark helper, loaded only by tests/bench/bench_readiness.py through ANSIBLE_CALLBACK_PLUGINS.
from __future__ import annotations

import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = r"""
name: bench_timer
type: aggregate
short_description: Records when the benchmark's task result reaches the controller
description:
  - Appends "<event> <time.time()>" to the file named by BENCH_TIMER_FILE for every task result.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "bench_timer"
    CALLBACK_NEEDS_ENABLED = True

    def _mark(self, event, result):
        now = time.time()
        with open(os.environ["BENCH_TIMER_FILE"], "a") as fh:
            fh.write("{} {:.6f} {}\n".format(event, now, result.result.get("outcome", "")))

    def v2_runner_on_ok(self, result):
        self._mark("ok", result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        self._mark("failed", result)
