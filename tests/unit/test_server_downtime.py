"""The server role's refusal of an outage (roles/server/tasks/downtime.yml), run by Ansible on localhost with a socket
on loopback standing for SGLang answering: a change that would restart a serving SGLang that no router drains is
refused, the restart kept pending in llmops_state_dir; with nothing answering the run goes on. attempt.yml includes it
only where it applies (first attempt, no drain, not asked for, not allowed, something that restarts)."""

from __future__ import annotations

import socket
from pathlib import Path

import yaml
from _localhost_play import PASSED, run_tasks_from

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(tmp_path, port):
    state = tmp_path / "state"
    state.mkdir(exist_ok=True)
    variables = {"llmops_server_host": "127.0.0.1", "llmops_server_port": port, "llmops_state_dir": str(state)}
    rc, out = run_tasks_from(tmp_path, "llmops.sglang.server", "downtime.yml", variables)
    return rc, out, state / "server-restart-pending"


def test_a_serving_sglang_without_a_router_is_not_restarted_and_the_restart_stays_pending(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        port = s.getsockname()[1]
        rc, out, marker = run(tmp_path, port)
    assert rc != 0 and PASSED not in out, out[-3000:]
    assert "localhost: SGLang was not restarted." in out, out[-3000:]
    assert f"found SGLang answering on 127.0.0.1:{port}" in out and "-e llmops_allow_downtime=true" in out
    assert marker.is_file()


def test_nothing_answering_lets_the_run_through_with_nothing_pending(tmp_path):
    rc, out, marker = run(tmp_path, free_port())
    assert rc == 0 and PASSED in out, out[-3000:]
    assert not marker.exists()


def _include():
    tasks = yaml.safe_load((ROOT / "roles" / "server" / "tasks" / "attempt.yml").read_text())[0]["block"]
    [inc] = [t for t in tasks if t.get("ansible.builtin.include_tasks") == "downtime.yml"]
    start = next(i for i, t in enumerate(tasks) if "llmops.sglang.sglang_server" in t)
    return inc, tasks.index(inc) < start


def test_attempt_checks_for_an_outage_only_where_the_restart_plan_says():
    # which attempts, causes and settings reach the guard: server_policy.restart_plan's table (test_server_policy.py)
    inc, before_the_start = _include()
    assert before_the_start and inc["when"] == "server_restart_decision.guard | bool", inc["when"]
    tasks = yaml.safe_load((ROOT / "roles" / "server" / "tasks" / "attempt.yml").read_text())[0]["block"]
    [plan] = [t for t in tasks if "server_restart_decision" in (t.get("ansible.builtin.set_fact") or {})]
    assert tasks.index(plan) < tasks.index(inc)
    text = plan["ansible.builtin.set_fact"]["server_restart_decision"]
    for term in ("llmops.sglang.server_restart_plan(server_attempt", "llmops_allow_downtime | bool",
                 "ansible_check_mode", "server_before_restart.role", "'force': server_force_restart | bool",
                 "'pending': server_restart_pending | bool"):  # fmt: skip
        assert term in text, (term, text)


def test_the_lab_accepts_the_outage_and_a_real_inventory_does_not():
    defaults = yaml.safe_load((ROOT / "roles" / "llmops_defaults" / "defaults" / "main.yml").read_text())
    lab = yaml.safe_load((ROOT / "inventories" / "sim" / "group_vars" / "gpu_servers" / "server.yml").read_text())
    assert defaults["llmops_allow_downtime"] is False and lab["llmops_allow_downtime"] is True
    example = ROOT / "inventories" / "example"
    assert "llmops_allow_downtime: true" not in "".join(p.read_text() for p in example.rglob("*.yml"))
