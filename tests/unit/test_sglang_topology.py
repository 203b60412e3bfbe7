"""The fleet's shape (plugins/module_utils/sglang_topology.py and the filter llmops.sglang.fleet_topology): replicas
from llmops_replica, node ranks from inventory order, the head's rendezvous address and URL, one-line refusals of
inconsistent input - and the same answers through a real ansible-playbook run of the filter."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_topology
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_topology import TopologyError

ROOT = Path(__file__).resolve().parents[2]
SHARED = yaml.safe_load((ROOT / "roles/llmops_defaults/defaults/main.yml").read_text())
PORTS = {name: SHARED[name] for name in sglang_topology.DEFAULTED}


def fleet_topology(hosts, hostvars):
    """The module's function with the shared defaults and each host's "server_tp" as its GPUs, as the server role
    calls it."""
    hostvars = {h: dict(v) for h, v in hostvars.items()}
    gpus = {h: v.pop("server_tp") for h, v in hostvars.items() if "server_tp" in v}
    return sglang_topology.fleet_topology(hosts, hostvars, PORTS, gpus)


def fleet(**hosts):
    return list(hosts), {name: dict(v or {}) for name, v in hosts.items()}


def test_a_host_without_server_replica_is_its_own_single_node_replica():
    hosts, hv = fleet(a={"ansible_host": "10.0.0.1", "server_tp": 8}, b={"ansible_host": "10.0.0.2"})
    topo = fleet_topology(hosts, hv)
    assert [r["name"] for r in topo["replicas"]] == ["a", "b"]
    assert topo["hosts"]["a"] == {
        "replica": "a",
        "node_rank": 0,
        "nnodes": 1,
        "head": "a",
        "dist_init_addr": "10.0.0.1:20000",
        "url": "http://10.0.0.1:30000",
        "tp_size": 8,
        "gpus_per_node": 8,
        "first_rank": 0,
        "hosts": ["a"],
    }
    # b's GPUs are not known (the router's and the restart plan's view): no tensor-parallel figures for it
    assert topo["hosts"]["b"]["tp_size"] is None and topo["hosts"]["b"]["url"] == "http://10.0.0.2:30000"


def test_hosts_sharing_server_replica_form_one_tensor_parallel_server_ranked_in_inventory_order():
    common = {"llmops_replica": "big", "server_tp": "8", "llmops_dist_init_port": 5000}
    hosts, hv = fleet(
        n1={**common, "ansible_host": "10.0.0.11"},
        solo={"ansible_host": "10.0.0.20", "server_tp": 8},
        n0={**common, "ansible_host": "10.0.0.10"},
    )
    topo = fleet_topology(hosts, hv)
    big = topo["replicas"][0]
    assert big == {
        "name": "big",
        "hosts": ["n1", "n0"],
        "head": "n1",
        "nnodes": 2,
        "url": "http://10.0.0.11:30000",
        "dist_init_addr": "10.0.0.11:5000",
        "tp_size": 16,
    }
    assert [(topo["hosts"][h]["node_rank"], topo["hosts"][h]["first_rank"]) for h in ("n1", "n0")] == [(0, 0), (1, 8)]
    assert topo["hosts"]["n0"]["head"] == "n1"
    assert [r["name"] for r in topo["replicas"]] == ["big", "solo"]


def test_the_head_without_ansible_host_is_reached_by_its_inventory_name_and_ipv6_is_bracketed():
    hosts, hv = fleet(h0={"llmops_replica": "r"}, h1={"llmops_replica": "r", "ansible_host": "fd00::2"})
    topo = fleet_topology(hosts, hv)
    assert topo["replicas"][0]["url"] == "http://h0:30000"
    hosts, hv = fleet(h1={"ansible_host": "fd00::2", "llmops_server_port": 8000})
    assert fleet_topology(hosts, hv)["replicas"][0]["url"] == "http://[fd00::2]:8000"


def test_the_port_defaults_come_from_the_caller_and_only_from_llmops_defaults():
    assert PORTS == {"llmops_server_port": 30000, "llmops_dist_init_port": 20000}
    with pytest.raises(TopologyError, match="expected the defaults of llmops_server_port, llmops_dist_init_port"):
        sglang_topology.fleet_topology(["a"], {"a": {}})
    # llmops_fleet, the fleet every role and playbook reads, passes exactly these
    assert "{'llmops_server_port': llmops_server_port, 'llmops_dist_init_port': llmops_dist_init_port}" in (
        " ".join(SHARED["llmops_fleet"].split())
    )


@pytest.mark.parametrize(
    ("hosts", "expected"),
    [
        (
            {"a": {"llmops_replica": "r", "server_tp": 8}, "b": {"llmops_replica": "r", "server_tp": 4}},
            "same server_tp",
        ),
        (
            {
                "a": {"llmops_replica": "r", "ansible_host": "x"},
                "b": {"llmops_replica": "r", "llmops_server_port": 8000},
            },
            "same llmops_server_port",
        ),
        (
            {"a": {"llmops_replica": "r", "llmops_dist_init_port": 1}, "b": {"llmops_replica": "r"}},
            "same llmops_dist_init_port",
        ),
        (
            {"a": {"llmops_replica": "r", "ansible_host": "x"}, "b": {"llmops_replica": "r", "ansible_host": "x"}},
            "different machines",
        ),
        (
            {
                "a": {"llmops_replica": "r", "llmops_dist_init_port": 30000},
                "b": {"llmops_replica": "r", "llmops_dist_init_port": 30000},
            },
            "differ from llmops_server_port",
        ),
        ({"a": {"ansible_host": "x"}, "b": {"ansible_host": "x"}}, "own address and port"),
        ({"a": {"llmops_replica": "no spaces"}}, "llmops_replica of a"),
        ({"a": {"llmops_replica": 7}}, "llmops_replica of a"),
        ({"a": {"server_tp": 0}}, "server_tp of a"),
        ({"a": {"server_tp": True}}, "server_tp of a"),
        ({"a": {"llmops_server_port": "http"}}, "llmops_server_port of a"),
        ({"a": {"llmops_dist_init_port": 70000}}, "llmops_dist_init_port of a"),
    ],
)
def test_inconsistent_input_is_refused_in_one_line_saying_expected_found_and_what_to_do(hosts, expected):
    with pytest.raises(TopologyError) as err:
        fleet_topology(list(hosts), hosts)
    text = str(err.value)
    assert expected in text
    assert "\n" not in text
    assert "expected" in text and "found" in text and ("Set" in text or "Give" in text or "Pass" in text)


def test_a_host_missing_from_hostvars_or_listed_twice_is_refused():
    with pytest.raises(TopologyError, match="no variables for ghost"):
        fleet_topology(["ghost"], {})
    with pytest.raises(TopologyError, match="twice"):
        fleet_topology(["a", "a"], {"a": {}})
    with pytest.raises(TopologyError, match="list of host names"):
        sglang_topology.fleet_topology("a", {"a": {}}, PORTS)


INVENTORY = """
gpu_servers:
  vars:
    ansible_connection: local
    ansible_python_interpreter: "{python}"
  hosts:
    node0: {{ansible_host: 10.1.0.10, llmops_replica: tp16, server_tp: 8}}
    node1: {{ansible_host: 10.1.0.11, llmops_replica: tp16, server_tp: "{{{{ 4 * 2 }}}}"}}
    solo: {{ansible_host: 10.1.0.12, server_tp: 8, llmops_server_port: 8000}}
"""

PLAY = """
- hosts: gpu_servers
  gather_facts: false
  tasks:
    - ansible.builtin.copy:
        content: >-
          {{ groups['gpu_servers'] | llmops.sglang.fleet_topology(hostvars,
             {'llmops_server_port': 30000, 'llmops_dist_init_port': 20000}, 'raise',
             dict(groups['gpu_servers'] | zip(groups['gpu_servers'] | map('extract', hostvars, 'server_tp'))))
             | to_json }}
        dest: "{{ out }}"
      delegate_to: localhost
      run_once: true
"""


def _playbook(tmp_path, inventory):
    (tmp_path / "inv.yml").write_text(inventory.format(python=sys.executable))
    (tmp_path / "play.yml").write_text(PLAY)
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            str(tmp_path / "inv.yml"),
            str(tmp_path / "play.yml"),
            "-e",
            "out=" + str(tmp_path / "topo.json"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )


def test_the_filter_reads_templated_hostvars_in_a_real_play(tmp_path):
    run = _playbook(tmp_path, INVENTORY)
    assert run.returncode == 0, run.stdout + run.stderr
    topo = json.loads((tmp_path / "topo.json").read_text())
    assert [(r["name"], r["nnodes"], r["tp_size"], r["url"]) for r in topo["replicas"]] == [
        ("tp16", 2, 16, "http://10.1.0.10:30000"),
        ("solo", 1, 8, "http://10.1.0.12:8000"),
    ]
    assert topo["hosts"]["node1"]["node_rank"] == 1
    assert topo["hosts"]["node1"]["dist_init_addr"] == "10.1.0.10:20000"


def test_the_filter_fails_the_play_with_the_one_line_reason(tmp_path):
    run = _playbook(tmp_path, INVENTORY.replace('server_tp: "{{{{ 4 * 2 }}}}"', "server_tp: 4"))
    assert run.returncode != 0
    assert "expected every host of replica tp16 to have the same server_tp" in run.stdout + run.stderr
    assert "Traceback" not in run.stdout + run.stderr


def test_the_filter_can_return_the_reason_for_a_role_to_report_itself():
    from ansible_collections.llmops.sglang.plugins.filter.sglang_topology import fleet_topology as topology_filter

    out = topology_filter(["a"], {"a": {}}, PORTS, "return", {"a": 0})
    assert out["hosts"] == {} and out["error"].startswith("fleet topology: expected server_tp of a")
