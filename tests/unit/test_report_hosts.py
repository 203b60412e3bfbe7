"""Which hosts the fleet report shows: the inventory's GPU servers and router hosts, never the control node.

The callback sees every host a play ran on: the GPU servers, the router hosts, and localhost (the restart plan of
playbooks/fleet_roll_plan.yml runs there). The records fed to it are real ones: the demo's
(tests/fixtures/report/ready-deployment.json, `make demo`) and a two-replica fleet's behind a router
(tests/fixtures/roll/flag-change-roll/rr1.json, rr2.json); the hosts and groups are ansible-core's own inventory
objects, as a play hands them to a callback.
"""

from __future__ import annotations

import json
from pathlib import Path

from ansible.inventory.group import Group
from ansible.inventory.host import Host

from ansible_collections.llmops.sglang.plugins.callback.sglang_progress import CallbackModule
from ansible_collections.llmops.sglang.plugins.module_utils import sglang_report as R
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_report_html import render
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_report_text import render_text

ROOT = Path(__file__).resolve().parents[2]
DEMO_RECORD = ROOT / "tests" / "fixtures" / "report" / "ready-deployment.json"
ROLL = ROOT / "tests" / "fixtures" / "roll" / "flag-change-roll"


class _Task:
    def __init__(self, action, name="task"):
        self.action, self.name, self.args = action, name, {}

    def get_name(self):
        return self.name


class _Result:
    def __init__(self, host, action, result, name="task"):
        self.host, self.task, self.result = host, _Task(action, name), result


class _Display:
    verbosity = 0

    def __init__(self):
        self.lines = []

    def display(self, text, *args, **kwargs):
        self.lines.append(text)


class _Stats:
    def __init__(self, *hosts):
        self.processed = {h.get_name(): 1 for h in hosts}


def inventory(**groups):
    """{name: Host} with each host in its groups (an implicit localhost is in none, as ansible-core makes it)."""
    hosts = {}
    for group_name, names in groups.items():
        group = Group(group_name)
        for name in names:
            group.add_host(hosts.setdefault(name, Host(name)))
    hosts["localhost"] = Host("localhost")
    hosts["localhost"].implicit = True
    return hosts


def run_callback(tmp_path, events, stats):
    display = _Display()
    cb = CallbackModule(display=display)
    cb._plugin_options["report_dir"] = str(tmp_path / "reports")
    cb._to_stderr = False
    for kind, result in events:
        getattr(cb, kind)(result)
    cb.v2_playbook_on_stats(stats)
    line = display.lines[-1]
    assert line.startswith("[sglang] report: "), display.lines
    index = Path(line.split(": ", 1)[1])
    return json.loads((index.parent / "report.json").read_text()), index, display.lines


def roll_plan_on_localhost(host):
    """What playbooks/fleet_roll_plan.yml's localhost play leaves the callback: ok results of set_fact/add_host."""
    return [
        ("v2_runner_on_ok", _Result(host, "ansible.builtin.set_fact", {"ansible_facts": {"fleet_roll_id": "x"}})),
        ("v2_runner_on_skipped", _Result(host, "ansible.builtin.fail", {"skipped": True})),
        ("v2_runner_on_ok", _Result(host, "ansible.builtin.add_host", {"add_host": {"host_name": "demo1"}})),
    ]


def test_the_demo_report_lists_its_one_gpu_server_and_not_the_control_node(tmp_path):
    hosts = inventory(gpu_servers=["demo1"])
    record = json.loads(DEMO_RECORD.read_text())
    events = [
        *roll_plan_on_localhost(hosts["localhost"]),
        ("v2_runner_on_ok", _Result(hosts["demo1"], "ansible.builtin.set_fact", {"ansible_facts": {"a": 1}})),
        (
            "v2_runner_on_ok",
            _Result(hosts["demo1"], "ansible.builtin.set_fact", {"ansible_facts": {"server_deployment": record}}),
        ),
    ]
    data, index, _ = run_callback(tmp_path, events, _Stats(hosts["demo1"], hosts["localhost"]))
    assert [(h["host"], h["outcome"], h["role"]) for h in data["hosts"]] == [("demo1", "ready", "server")]
    assert data["summary"] == {"hosts": 1, "ready": 1, "failed": 0, "routers": 0}
    assert [r["name"] for r in data["replicas"]] == ["demo1"]
    page = index.read_text()
    assert "1 GPU server(s): 1 ready, 0 not ready." in page and "localhost" not in page
    text = (index.parent / "report.txt").read_text()
    assert "1 GPU server(s), 1 ready, 0 not ready\n" in text and "localhost" not in text


def test_a_fleet_report_lists_its_gpu_servers_and_router_and_nothing_else(tmp_path):
    hosts = inventory(gpu_servers=["rr1", "rr2", "gpu9"], sglang_routers=["rr3"], ungrouped=["bastion"])
    events = roll_plan_on_localhost(hosts["localhost"])
    for name in ("rr1", "rr2"):
        record = json.loads((ROLL / f"{name}.json").read_text())
        events.append(("v2_runner_on_ok", _Result(hosts[name], "llmops.sglang.deployment_record", {"record": record})))
    events += [
        ("v2_runner_on_ok", _Result(hosts["rr3"], "ansible.builtin.command", {"rc": 0, "stdout": "active"})),
        ("v2_runner_on_ok", _Result(hosts["bastion"], "ansible.builtin.ping", {"ping": "pong"})),
        # the control node failing a task is still no server
        ("v2_runner_on_failed", _Result(hosts["localhost"], "ansible.builtin.fail", {"msg": "no"}, "Stop")),
    ]
    # gpu9 is in the inventory but out of the run (--limit): the report shows only what the run touched
    stats = _Stats(*(hosts[n] for n in ("rr1", "rr2", "rr3", "bastion", "localhost")))
    data, index, _ = run_callback(tmp_path, events, stats)
    assert [(h["host"], h["role"]) for h in data["hosts"]] == [("rr1", "server"), ("rr2", "server"), ("rr3", "router")]
    assert [r["name"] for r in data["replicas"]] == ["rr1", "rr2"]  # the router host is no replica
    assert data["summary"] == {"hosts": 2, "ready": 2, "failed": 0, "routers": 1}
    assert {r["name"] for r in data["roll"]["replicas"]} == {"rr1", "rr2"}
    page = index.read_text()
    assert "2 GPU server(s): 2 ready, 0 not ready; 1 router host(s)." in page
    assert "localhost" not in page and "bastion" not in page


def test_a_gpu_server_that_failed_before_the_server_stage_is_still_shown(tmp_path):
    hosts = inventory(gpu_servers=["gpu1", "gpu2"])
    record = json.loads(DEMO_RECORD.read_text())
    events = [
        *roll_plan_on_localhost(hosts["localhost"]),
        ("v2_runner_on_ok", _Result(hosts["gpu1"], "x", {"ansible_facts": {"server_deployment": record}})),
        ("v2_runner_on_failed", _Result(hosts["gpu2"], "llmops.sglang.gpu_facts", {"msg": "no GPU"}, "Find GPUs")),
    ]
    data, _, _ = run_callback(tmp_path, events, _Stats(hosts["gpu1"], hosts["gpu2"], hosts["localhost"]))
    assert [(h["host"], h["outcome"]) for h in data["hosts"]] == [("gpu1", "ready"), ("gpu2", "failed")]
    assert data["summary"] == {"hosts": 2, "ready": 1, "failed": 1, "routers": 0}


def test_report_hosts_keeps_servers_and_routers_and_drops_hosts_outside_both_groups():
    groups = {"g1": {"gpu_servers"}, "r1": {"sglang_routers"}, "both": {"gpu_servers", "sglang_routers"}}
    groups.update({"localhost": set(), "bastion": {"ungrouped"}})
    hosts, routers = R.report_hosts({"g1"}, {"r1", "both", "localhost", "bastion", "unknown"}, groups)
    assert hosts == ["both", "g1", "r1", "unknown"]  # a host whose groups nothing told is kept
    assert routers == {"r1"}  # a host in both groups is a GPU server


def test_saved_reports_from_before_the_role_field_still_count_their_hosts():
    old = json.loads((ROOT / "tests" / "fixtures" / "report" / "failed.json").read_text())
    data = R.build_report(old["hosts"])
    assert data["summary"] == {"hosts": 1, "ready": 0, "failed": 1, "routers": 0}
    assert "1 GPU server(s): 0 ready, 1 not ready." in render(data) and "router" not in render_text(data).split("\n")[0]


def test_the_benchmark_through_the_router_is_shown_on_the_router_host(tmp_path):
    """roles/router/tasks/bench.yml runs the client from a replica's head (delegate_to): the result arrives as the
    router host's; the report shows its figures there, and a replica's own record keeps its own."""
    hosts = inventory(gpu_servers=["rr1", "rr2"], sglang_routers=["rr3"])
    events = []
    for name in ("rr1", "rr2"):
        record = json.loads((ROLL / f"{name}.json").read_text())
        events.append(("v2_runner_on_ok", _Result(hosts[name], "llmops.sglang.deployment_record", {"record": record})))
    fleet = {
        "changed": True,
        "verdict": "slower",
        "slowdown_pct": 22.5,
        "max_slowdown_pct": 15.0,
        "figures": {"completed": 64, "output_throughput": 1044.2, "median_ttft_ms": 41.0, "median_itl_ms": 13.1},
    }
    events += [
        ("v2_runner_on_ok", _Result(hosts["rr3"], "llmops.sglang.sglang_bench", fleet)),
        ("v2_runner_on_ok", _Result(hosts["rr3"], "llmops.sglang.sglang_bench", {"verdict": "not due"})),  # ignored
    ]
    data, index, _ = run_callback(tmp_path, events, _Stats(hosts["rr1"], hosts["rr2"], hosts["rr3"]))
    bench = {h["host"]: h["benchmark"] for h in data["hosts"]}
    assert bench["rr3"] == {"verdict": "slower", "output_throughput": 1044.2, "median_ttft_ms": 41.0,
                            "median_itl_ms": 13.1, "slowdown_pct": 22.5, "max_slowdown_pct": 15.0}  # fmt: skip
    assert bench["rr1"] is None or bench["rr1"]["output_throughput"] != 1044.2
    text = (index.parent / "report.txt").read_text()
    assert (
        "rr3 (the fleet through this router)  slower: 1044.2 tok/s, median TTFT 41.0 ms, ITL 13.10 ms, 22.5 % below "
        "the baseline (allowed 15.0 %)" in text
    ), text
    assert "1044.2 tok/s" in index.read_text()
