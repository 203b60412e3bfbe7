"""Issue 25 item 8: rolling restarts. router_roll_batch_size is refused in one line unless it is 1 .. the number of
replicas (module_utils/sglang_topology.roll_batches, used by playbooks/fleet_roll_plan.yml before any replica is
touched); the drain wait ends at a deadline in seconds, not after a count of polls (roles/router/tasks/drain.yml);
rolling_restart.yml asks the router at the router host's own address (roles/router/tasks/probe.yml)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.llmops.sglang.plugins.module_utils.sglang_topology import TopologyError, roll_batches

ROOT = Path(__file__).resolve().parents[2]
REPLICAS = ["r1", "r2", "r3"]


@pytest.mark.parametrize(
    "size",
    [0, "0", "two", "", None, -1, "-2", 4, 1.5, True, [1], "1\n"],
    ids=[
        "zero_was_a_division_error",
        "zero_as_string",
        "word_was_a_division_error",
        "empty",
        "null",
        "negative_dropped_replicas",
        "negative_string",
        "above_the_fleet_was_silently_cut",
        "fraction",
        "boolean",
        "list",
        "trailing_newline",
    ],
)
def test_a_bad_batch_size_is_a_one_line_refusal(size):
    with pytest.raises(TopologyError) as exc:
        roll_batches(REPLICAS, size)
    text = str(exc.value)
    assert "\n" not in text and "router_roll_batch_size" in text and "Set it to" in text


@pytest.mark.parametrize("size, expected", [(1, [0, 1, 2]), ("2", [0, 0, 1]), (3, [0, 0, 0])])
def test_a_good_batch_size_cuts_the_replicas_in_order(size, expected):
    assert list(roll_batches(REPLICAS, size).values()) == expected


def test_the_roll_plan_refuses_before_the_server_play_and_uses_the_checked_batches():
    plan = yaml.safe_load((ROOT / "playbooks" / "fleet_roll_plan.yml").read_text())
    play = next(p for p in plan if p.get("hosts") == "localhost")
    # the plan's refusals (a router host not in the run, a bad batch size) come before any task that plans
    refusals = [t for t in play["tasks"] if "ansible.builtin.fail" in t]
    assert play["tasks"][: len(refusals)] == refusals and len(refusals) == 2
    assert any("sglang_roll_batches.error is defined" in t["when"] for t in refusals)
    assert "fleet_roll_batches" in play["vars"]["sglang_roll_batches"]
    assert "// " not in yaml.safe_dump(play)  # no division left for a bad size to break


def _drain_tasks():
    tasks = yaml.safe_load((ROOT / "roles" / "router" / "tasks" / "drain.yml").read_text())
    block = next(t for t in tasks if "block" in t)["block"]
    return {t["name"]: t for t in block}


def _until(task, deadline, busy):
    reg = task["register"]
    result = {"status": 200, "json": {"aggregate": {"total_reqs": 4 if busy else 0}}}
    variables = {reg: result, "router_drain_deadline": deadline}
    return Templar(loader=DataLoader(), variables=variables).evaluate_conditional(trust_as_template(task["until"]))


@pytest.mark.parametrize(
    "name",
    [
        "Wait until the replica has no request in flight",
        "Check that the replica stays empty (a request the router sent just before the removal may still arrive)",
    ],
    ids=["first_wait", "quiet_polls"],
)
def test_the_drain_wait_ends_at_its_deadline_in_seconds_however_many_polls(name):
    task = _drain_tasks()[name]
    # Busy replica: the wait goes on before the deadline and stops after it (deadlines far from now: no timing).
    assert _until(task, time.time() + 3600, busy=True) is False
    assert _until(task, time.time() - 1, busy=True) is True
    assert _until(task, time.time() + 3600, busy=False) is True


def test_the_drain_clock_is_started_from_router_drain_timeout_seconds():
    start = _drain_tasks()["Start the drain clock"]["ansible.builtin.set_fact"]["router_drain_deadline"]
    before = time.time()
    value = float(
        Templar(loader=DataLoader(), variables={"router_drain_timeout": 300}).template(trust_as_template(start))
    )
    assert before + 299 <= value <= time.time() + 301


def test_rolling_restart_asks_the_router_at_its_own_address_not_a_fixed_loopback():
    text = (ROOT / "playbooks" / "rolling_restart.yml").read_text()
    assert "127.0.0.1" not in text
    probe = yaml.safe_load((ROOT / "roles" / "router" / "tasks" / "probe.yml").read_text())
    assert probe[0]["ansible.builtin.uri"]["url"] == "{{ router_api_url }}/workers"


def test_the_router_api_url_follows_llmops_router_host():
    rvars = yaml.safe_load((ROOT / "roles" / "router" / "vars" / "main.yml").read_text())

    def url(host):
        variables = {
            "llmops_router_host": host,
            "llmops_router_port": 30080,
            **{k: rvars[k] for k in ("router_api_host", "router_api_port", "router_every_interface")},
        }
        variables = {k: trust_as_template(v) if isinstance(v, str) else v for k, v in variables.items()}
        return (
            Templar(loader=DataLoader(), variables=variables)
            .template(trust_as_template(rvars["router_api_url"]))
            .strip()
        )

    assert url("10.0.0.9") == "http://10.0.0.9:30080"
    assert url("0.0.0.0") == "http://127.0.0.1:30080"
    assert url("fd00::9") == "http://[fd00::9]:30080"


def _roll_plan(run, tmp_path, batch_size):
    hosts = {
        f"g{i}": {"ansible_connection": "local", "ansible_host": "127.0.0.1", "llmops_server_port": 30000 + i}
        for i in (1, 2)
    }
    inventory = {"all": {"children": {"gpu_servers": {"hosts": hosts}, "sglang_routers": {"hosts": {}}}}}
    plan = ROOT / "playbooks" / "fleet_roll_plan.yml"
    return run(tmp_path, inventory, plan, "-e", f"router_roll_batch_size={batch_size}")


@pytest.mark.parametrize(
    "size", ["0", "3"], ids=["zero_on_the_operators_path", "above_the_fleet_on_the_operators_path"]
)
def test_the_roll_plan_playbook_refuses_a_bad_batch_size_in_one_line(tmp_path, ansible_playbook, size):
    run = _roll_plan(ansible_playbook, tmp_path, size)
    assert run.returncode != 0 and "Traceback" not in run.stdout + run.stderr
    assert (
        f"Nothing was changed. Expected router_roll_batch_size from 1 to 2 (the replicas in gpu_servers); found {size}."
        in run.stdout
    )


def test_the_roll_plan_playbook_accepts_a_batch_of_the_whole_fleet(tmp_path, ansible_playbook):
    run = _roll_plan(ansible_playbook, tmp_path, "2")
    assert run.returncode == 0, run.stdout[-2000:]
