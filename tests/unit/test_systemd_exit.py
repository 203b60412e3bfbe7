"""A start that systemd itself could not perform is told apart from SGLang dying (plugins/module_utils/systemd_exit.py,
sglang_launch.start_unit): systemd's exit statuses come from the host's own systemd, a 219/CGROUP start (of SGLang or
of its ExecStartPre step) is tried again after reset-failed and a pause, a bounded number of times, and any other
spawn failure is reported with systemd's step name."""

import shutil
import subprocess

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_launch as mod
from ansible_collections.llmops.sglang.plugins.module_utils import systemd_exit


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


# systemctl show's ExecStartPre value on a simulated node (systemd 252), the step's status put in by the tests
PRE = (
    '{{ path=/bin/sh ; argv[]=/bin/sh -c exec "$$0" "$$@" >/dev/null /usr/sbin/nft list table inet llmops_sglang ; '
    "ignore_errors=no ; start_time=[Sat 2026-12-05 17:34:28 UTC] ; stop_time=[Sat 2026-12-05 17:34:28 UTC] ; "
    "pid=1589 ; code=exited ; status={0} }}"
)


class Systemctl:
    """run_command for systemctl: each start ends with the next scripted status, "0" = started, "219" the main
    process's ExecMainStatus, "pre:219" that of the unit's ExecStartPre step (the main process never ran)."""

    def __init__(self, *statuses):
        self.statuses = list(statuses)
        self.current = "0"
        self.calls = []
        self.pauses = []

    def sleep(self, seconds):
        self.pauses.append(seconds)

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
            pre, main = ("0/SUCCESS", "0") if not self.current.startswith("pre:") else (self.current[4:], "0")
            main = self.current if not self.current.startswith("pre:") else main
            return (
                0,
                (
                    f"ActiveState={state}\nSubState={state}\nExecMainStatus={main}\nInvocationID=x\n"
                    f"ExecStartPre={PRE.format(pre)}\n"
                ),
                "",
            )
        return 0, "", ""


def starts(sc):
    return [c for c in sc.calls if c.startswith(("start", "restart"))]


def test_a_cgroup_spawn_failure_is_started_again_after_reset_failed_and_a_pause():
    sc = Systemctl("219", "0")
    rc, note, status = mod.start_unit(sc, "systemctl", "restart", "sglang.service", sleep=sc.sleep)
    assert rc == 0 and status is None
    assert "219/CGROUP" in note and "tried again (2 start(s) in all)" in note
    assert sc.calls == [
        "restart sglang.service",
        "show sglang.service -p ActiveState,SubState,MainPID,ExecMainStatus,InvocationID,ExecStartPre",
        "reset-failed sglang.service",
        "start sglang.service",
    ]
    assert sc.pauses == [systemd_exit.RETRY_PAUSES[0]]


def test_cgroup_failures_end_after_the_bounded_starts_and_name_the_step():
    sc = Systemctl("219", "219", "219", "0")
    rc, text, status = mod.start_unit(sc, "systemctl", "start", "sglang.service", sleep=sc.sleep)
    assert rc == 1 and status["ExecMainStatus"] == "219"
    assert "main process exit status 219/CGROUP: systemd failed at its CGROUP step before SGLang ran" in text
    assert starts(sc) == ["start sglang.service"] * (len(systemd_exit.RETRY_PAUSES) + 1)
    assert sc.pauses == list(systemd_exit.RETRY_PAUSES) and sum(sc.pauses) <= 4
    assert sc.statuses == ["0"]  # no start after the bound


def test_a_cgroup_failure_of_the_execstartpre_step_is_started_again():
    # the firewall check runs first (ExecStartPre=+): systemd can fail to attach it as it can the main process
    sc = Systemctl("pre:219/CGROUP", "0")
    rc, note, _ = mod.start_unit(sc, "systemctl", "start", "sglang.service", sleep=sc.sleep)
    assert rc == 0 and "219/CGROUP" in note
    assert starts(sc) == ["start sglang.service"] * 2


def test_a_failed_execstartpre_step_is_named_and_not_retried():
    # nft found no table: its own exit status, not systemd's; the start is refused as the unit says
    sc = Systemctl("pre:1")
    rc, text, _ = mod.start_unit(sc, "systemctl", "start", "sglang.service", sleep=sc.sleep)
    assert rc == 1 and "ExecStartPre step exit status 1" in text and "before SGLang ran" not in text
    assert "reset-failed sglang.service" not in sc.calls and sc.pauses == []


def test_other_spawn_failures_are_reported_without_a_retry():
    sc = Systemctl("203")
    rc, text, _ = mod.start_unit(sc, "systemctl", "start", "sglang.service", sleep=sc.sleep)
    assert rc == 1 and "203/EXEC" in text and "reset-failed sglang.service" not in sc.calls


@pytest.mark.parametrize(
    ("value", "code"),
    [(PRE.format("0/SUCCESS"), None), (PRE.format("219/CGROUP"), 219), (PRE.format("1/FAILURE"), 1), ("", None),
     (PRE.format("0/SUCCESS") + " " + PRE.format("1"), 1)],
)  # fmt: skip
def test_the_execstartpre_status_is_read_from_systemctl_show(value, code):
    assert systemd_exit.start_pre_status(value) == code


def test_a_dead_unit_names_systemds_step():
    dead = mod.unit_dead({"ActiveState": "failed", "SubState": "failed", "ExecMainStatus": "219"}, None)
    assert "219/CGROUP: systemd failed at its CGROUP step before SGLang ran" in dead
    crashed = mod.unit_dead({"ActiveState": "failed", "SubState": "failed", "ExecMainStatus": "1"}, None)
    assert "exit status 1)" in crashed and "before SGLang ran" not in crashed
