"""The server role's last word after the attempts (roles/server/tasks/main.yml), evaluated with Ansible's own
templating on the results sglang_server really returns: a failure before the wait (no outcome, only the module's
message), a diagnosed failure, and readiness. Before the fix, the first case died in the conditional itself
("'dict' object has no attribute 'outcome'") and the module's message was lost."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

MAIN = Path(__file__).resolve().parents[2] / "roles" / "server" / "tasks" / "main.yml"
TASKS = {t["name"]: t for t in yaml.safe_load(MAIN.read_text())}
STOP_UNIT = "Leave SGLang stopped when it did not become ready (no restart loop)"
OWN_MESSAGE = "Stop with sglang_server's own message when it failed before waiting"
DIAGNOSIS = "Stop with SGLang's diagnosis when it did not become ready"

# What sglang_server returns when systemctl refuses the start (module code path: fail_json before any wait).
BEFORE_WAIT = {
    "failed": True,
    "changed": False,
    "rc": 1,
    "msg": "expected `systemctl restart sglang.service` to succeed; it returned 1: Job for sglang.service failed. "
    "Check `systemctl status sglang.service` and `journalctl -u sglang.service`.",
}
CAPTURE_OOM = {
    "failed": True,
    "done": True,
    "outcome": "oom_cuda_graph",
    "phase": "cuda_graph_capturing",
    "diagnosis": "CUDA-graph capture ran out of memory.",
    "suggestion": {"action": "lower_mem_fraction_static", "value": 0.85},
}
READY = {"done": True, "outcome": "ready", "phase": "ready"}


def templar(result):
    variables = {
        "server_result": result,
        "ansible_check_mode": False,
        "server_attempts": [{"mem_fraction_static": 0.88}],
        "server_log_dir": "/var/log/sglang",
    }
    return Templar(loader=DataLoader(), variables=variables)


def fires(task_name, result):
    t = templar(result)
    return all(t.template(trust_as_template("{{ " + cond + " }}")) for cond in TASKS[task_name]["when"])


def message(task_name, result):
    return templar(result).template(trust_as_template(TASKS[task_name]["ansible.builtin.fail"]["msg"]))


@pytest.mark.parametrize(
    ("result", "stop", "own", "diagnosis"),
    [(BEFORE_WAIT, True, True, False), (CAPTURE_OOM, True, False, True), (READY, False, False, False)],
    ids=["failed before the wait", "capture OOM", "ready"],
)
def test_the_role_ends_with_the_right_message_for_each_kind_of_result(result, stop, own, diagnosis):
    assert fires(STOP_UNIT, result) is stop
    assert fires(OWN_MESSAGE, result) is own
    assert fires(DIAGNOSIS, result) is diagnosis


def test_a_failure_before_the_wait_shows_the_modules_own_message():
    assert message(OWN_MESSAGE, BEFORE_WAIT).strip() == (
        "SGLang was not started: " + BEFORE_WAIT["msg"] + " The unit is left stopped; its log is "
        "/var/log/sglang/server.log."
    )
