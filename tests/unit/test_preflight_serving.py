"""Preflight's refusal of a driver change on a serving host (roles/preflight/tasks/serving.yml), run by Ansible on
localhost: a socket on loopback stands for SGLang answering. A plain site.yml whose driver pin differs from the loaded
driver is refused there, naming playbooks/driver_upgrade.yml; it passes when nothing answers, when the loaded driver
is the pinned one, when the operator accepts the outage, when the driver is not in the run's tags, and in
driver_upgrade.yml (preflight_refuse_serving_reboot: false)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from _localhost_play import PASSED, run_tasks_from

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def listener():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    yield s.getsockname()[1]
    s.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(tmp_path, port, *, loaded="580.95.05", pinned="580.105.08-1", extra=None, tags=None):
    variables = {
        "preflight_gpu": {"driver_version": loaded},
        "llmops_driver_version": pinned,
        "llmops_server_host": "0.0.0.0",
        "llmops_server_port": port,
        **(extra or {}),
    }
    args = ["--tags", tags] if tags else []
    return run_tasks_from(tmp_path, "llmops.sglang.preflight", "serving.yml", variables, args=args)


def test_a_serving_host_with_another_driver_pinned_is_refused(tmp_path, listener):
    rc, out = run(tmp_path, listener)
    assert rc != 0, out
    assert PASSED not in out
    one_line = " ".join(out.split())
    assert "nothing was changed" in one_line
    assert (
        f"SGLang answering on port {listener} with driver 580.95.05 loaded while the inventory pins 580.105.08-1"
        in (one_line)
    )
    assert "Run playbooks/driver_upgrade.yml" in one_line
    assert "llmops_allow_downtime: true" in one_line


@pytest.mark.parametrize(
    ("why", "kwargs"),
    [
        ("nothing answers on the port", {"port": "free"}),
        ("the loaded driver is the pinned one", {"loaded": "580.105.08"}),
        ("no driver is loaded yet (a bare host)", {"loaded": ""}),
        ("the operator accepts the outage", {"extra": {"llmops_allow_downtime": True}}),
        ("driver_upgrade.yml drains first", {"extra": {"preflight_refuse_serving_reboot": False}}),
        ("the driver is not in this run's tags", {"tags": "cuda"}),
    ],
)
def test_the_check_lets_the_run_through(tmp_path, listener, why, kwargs):
    port = free_port() if kwargs.pop("port", None) == "free" else listener
    rc, out = run(tmp_path, port, **kwargs)
    if kwargs.get("tags") == "cuda":
        # preflight is tagged always in site.yml, as here: the check runs, and the refusal is skipped
        assert rc == 0, out
        assert "Find whether SGLang answers on this host" in out
        return
    assert rc == 0, f"{why}:\n{out}"
    assert PASSED in out, why
