"""A start that systemd itself could not perform is told apart from SGLang dying (plugins/module_utils/systemd_exit.py,
sglang_server.start_unit): systemd's exit statuses come from the host's own systemd, a 219/CGROUP start is tried once
more after reset-failed and never twice, and any other spawn failure is reported with systemd's step name."""

import shutil
import subprocess

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import systemd_exit
from ansible_collections.llmops.sglang.plugins.modules import sglang_server as mod


def test_the_table_agrees_with_the_hosts_systemd_analyze():
    exe = shutil.which("systemd-analyze")
    if exe is None:
        pytest.skip("systemd-analyze is not installed on this machine")
    out = subprocess.run([exe, "exit-status"], capture_output=True, text=True, check=True).stdout
    real = {}
    for line in out.splitlines()[1:]:
        name, code, klass = line.split()
        if klass == "systemd":
            real[int(code)] = name
    assert len(real) >= 40, out  # systemd 252 knows 45: a parse that found few read something else
    both = set(real) & set(systemd_exit.NAMES)
    assert {c: real[c] for c in both} == {c: systemd_exit.NAMES[c] for c in both}
    assert 219 in both and 203 in both


class Systemctl:
    """run_command for systemctl: each start ends with the next scripted ExecMainStatus (0 = started)."""

    def __init__(self, *statuses):
        self.statuses = list(statuses)
        self.current = "0"
        self.calls = []

    def __call__(self, argv, environ_update=None):
        verb = argv[1]
        self.calls.append(" ".join(argv[1:]))
        if verb in ("start", "restart"):
            self.current = self.statuses.pop(0)
            if self.current == "0":
                return 0, "", ""
            return 1, "", "Job for sglang.service failed because the control process exited with error code.\n"
        if verb == "show":
            state = "active" if self.current == "0" else "failed"
            return 0, f"ActiveState={state}\nSubState={state}\nExecMainStatus={self.current}\nInvocationID=x\n", ""
        return 0, "", ""


def test_a_cgroup_spawn_failure_is_started_once_more_after_reset_failed():
    sc = Systemctl("219", "0")
    rc, note, status = mod.start_unit(sc, "systemctl", "restart", "sglang.service")
    assert rc == 0 and status is None
    assert "219/CGROUP" in note and "once more" in note
    assert sc.calls == [
        "restart sglang.service",
        "show sglang.service -p ActiveState,SubState,MainPID,ExecMainStatus,InvocationID",
        "reset-failed sglang.service",
        "start sglang.service",
    ]


def test_a_second_cgroup_failure_is_not_retried_again_and_names_the_step():
    sc = Systemctl("219", "219", "0")
    rc, text, status = mod.start_unit(sc, "systemctl", "start", "sglang.service")
    assert rc == 1 and status["ExecMainStatus"] == "219"
    assert "219/CGROUP: systemd failed at its CGROUP step before SGLang ran" in text
    assert [c for c in sc.calls if c.startswith(("start", "restart"))] == ["start sglang.service"] * 2
    assert sc.statuses == ["0"]  # the third start was never made


def test_other_spawn_failures_are_reported_without_a_retry():
    sc = Systemctl("203")
    rc, text, _ = mod.start_unit(sc, "systemctl", "start", "sglang.service")
    assert rc == 1 and "203/EXEC" in text and "reset-failed sglang.service" not in sc.calls


def test_a_dead_unit_names_systemds_step():
    dead = mod.unit_dead({"ActiveState": "failed", "SubState": "failed", "ExecMainStatus": "219"}, None)
    assert "219/CGROUP: systemd failed at its CGROUP step before SGLang ran" in dead
    crashed = mod.unit_dead({"ActiveState": "failed", "SubState": "failed", "ExecMainStatus": "1"}, None)
    assert "exit status 1)" in crashed and "before SGLang ran" not in crashed
