"""Issue 25 item 6: inventory values that reach a systemd unit, an environment file or argv are refused before any
change when they could inject (a newline adds lines such as ``ExecStartPre=`` to a unit), through the one home
plugins/module_utils/inventory_values.py and its callers (fleet_topology, the server and router input checks).

Each case is an attack or a bad value; the test name says what it proves."""

from __future__ import annotations

from pathlib import Path

import pytest
from yaml import safe_dump as yaml_dump

from ansible_collections.llmops.sglang.plugins.module_utils import inventory_values as IV
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_topology import TopologyError, fleet_topology

ROOT = Path(__file__).resolve().parents[2]
# The ports' defaults the callers pass (roles/llmops_defaults owns them; role defaults are not host variables).
DEFAULTS = {"llmops_server_port": 30000, "llmops_dist_init_port": 20000}

INJECTED_ADDRESSES = {
    "newline_execstartpre": "10.0.0.5\nExecStartPre=/bin/sh -c 'id > /root/pwned'",
    "trailing_newline": "10.0.0.5\n",
    "carriage_return": "10.0.0.5\rExecStartPre=/bin/true",
    "space_then_flag": "10.0.0.5 --api-key stolen",
    "shell_metachar": "10.0.0.5;reboot",
    "quote_breaks_unit_quoting": 'gpu1"evil',
    "nul_byte": "gpu1\x00evil",
    "bidi_override": "gpu1\u202eevil",
    "zero_width_space": "gpu\u200b1",
    "url_not_address": "http://10.0.0.5:30000",
    "address_with_port": "10.0.0.5:30000",
    "empty_label": "gpu1..example",
    "label_starts_with_dash": "-gpu1",
    "mistyped_ipv4": "10.0.0.256",
    "too_long_name": "a" * 254,
}


@pytest.mark.parametrize("value", INJECTED_ADDRESSES.values(), ids=INJECTED_ADDRESSES.keys())
def test_an_unsafe_address_is_refused_in_one_line_without_echoing_control_characters(value):
    problem = IV.address_problem("ansible_host of gpu1", value)
    assert problem is not None
    assert "\n" not in problem and "\r" not in problem and "\x00" not in problem and "\u202e" not in problem
    assert problem.startswith("Expected ansible_host of gpu1") and "Set ansible_host" in problem


@pytest.mark.parametrize(
    "value", ["10.0.0.5", "::1", "fe80::1", "gpu1", "gpu-1.example.internal", "node_1", "localhost"]
)
def test_real_addresses_and_host_names_pass(value):
    assert IV.address_problem("ansible_host", value) is None


INJECTED_NAMES = {
    "replica_trailing_newline": "r1\n",
    "replica_newline_unit_line": "r1\nExecStartPre=/bin/sh",
    "replica_with_space": "r 1",
    "replica_with_slash": "../r1",
    "replica_bidi_isolate": "r1\u2066",
    "replica_starts_with_dot": ".r1",
    "replica_number_not_string": 7,
}


@pytest.mark.parametrize("value", INJECTED_NAMES.values(), ids=INJECTED_NAMES.keys())
def test_an_unsafe_replica_name_is_refused(value):
    assert IV.name_problem("llmops_replica of gpu1", value) is not None


@pytest.mark.parametrize("value", ["a b", "a\tb", "a\nb", "a\u202db", "a\x7fb", ["a"], True])
def test_text_with_whitespace_control_or_no_scalar_is_refused(value):
    problem = IV.text_problem("x", value)
    assert problem is not None and "\n" not in problem


def test_inventory_problems_names_every_bad_host_and_skips_undefined_values():
    hostvars = {
        "gpu1": {"ansible_host": "10.0.0.1\nExecStartPre=/bin/sh"},
        "gpu2": {"llmops_replica": "r2\n"},
        "gpu3": {"llmops_server_host": "0.0.0.0"},
        "router": {"llmops_router_host": "127.0.0.1 --x"},
        "clean": {},
    }
    problems = IV.inventory_problems(list(hostvars), hostvars)
    assert len(problems) == 3
    assert [p.split(" of ")[1].split(" ")[0] for p in problems] == ["gpu1", "gpu2", "router"]


def test_fleet_topology_refuses_an_ansible_host_with_a_newline_before_it_reaches_dist_init_addr():
    hostvars = {
        "a": {"ansible_host": "10.0.0.1\nExecStartPre=/bin/sh", "llmops_replica": "r"},
        "b": {"ansible_host": "10.0.0.2", "llmops_replica": "r"},
    }
    with pytest.raises(TopologyError) as exc:
        fleet_topology(["a", "b"], hostvars, DEFAULTS)
    assert "\n" not in str(exc.value) and "ansible_host of a" in str(exc.value)


def test_fleet_topology_refuses_a_replica_name_with_a_trailing_newline():
    # re.match with "$" accepted "r1\n" before: "$" also matches before a final newline.
    with pytest.raises(TopologyError):
        fleet_topology(["a"], {"a": {"llmops_replica": "r1\n"}}, DEFAULTS)


def test_fleet_topology_still_builds_a_clean_two_node_replica():
    hostvars = {h: {"ansible_host": ip, "llmops_replica": "r"} for h, ip in (("a", "10.0.0.1"), ("b", "10.0.0.2"))}
    topo = fleet_topology(["a", "b"], hostvars, DEFAULTS, {"a": 8, "b": 8})
    assert topo["hosts"]["b"]["node_rank"] == 1


# -- the server role's input checks (roles/server/templates/checks.json.j2; fixture server_problems in conftest.py)
TRAILING_NEWLINE = {
    "llmops_server_host": "127.0.0.1\n",
    "llmops_service_user": "sglang\n",
    "llmops_service_group": "sglang\n",
    "llmops_venv": "/opt/sglang/venv\n",
    "llmops_model_dir": "/opt/models/m\n",
    "llmops_env_file": "/etc/sglang/sglang.env\n",
    "server_log_dir": "/var/log/sglang\n",
    "llmops_state_dir": "/var/lib/llmops-sglang\n",
    "server_unit_name": "sglang.service\n",
    "server_kv_cache_dtype": "fp8_e4m3\n",
    "server_attention_backend": "flashinfer\n",
    "server_logrotate_maxsize": "200M\n",
    "llmops_server_port": "30000\n",
}


@pytest.mark.parametrize("name", TRAILING_NEWLINE, ids=[f"{n}_with_trailing_newline" for n in TRAILING_NEWLINE])
def test_a_server_setting_with_a_trailing_newline_is_refused(server_problems, name):
    # Every one of these reaches the unit file or argv; a regex anchored with "$" used to let the newline through.
    problems = server_problems(**{name: TRAILING_NEWLINE[name]})
    assert len(problems) == 1 and name in problems[0]


def test_a_newline_in_an_extra_argument_is_refused_without_showing_it(server_problems):
    problems = server_problems(server_extra_args=["--context-length", "65536\nExecStartPre=/bin/sh S3CR3T-TOKEN"])
    assert len(problems) == 1 and "S3CR3T-TOKEN" not in problems[0]


def test_an_escape_character_in_an_extra_argument_is_refused(server_problems):
    assert len(server_problems(server_extra_args=["--log-level", "info\x1b[2J"])) == 1


def test_preflight_stops_the_play_in_one_line_when_an_inventory_address_carries_a_unit_line(tmp_path, ansible_playbook):
    # The operator's path: ansible-playbook with an inventory whose ansible_host injects a line; nothing after the
    # check runs (the marker file is never written).
    marker = tmp_path / "changed"
    bad = {"ansible_connection": "local", "ansible_host": "10.0.0.5\nExecStartPre=/bin/sh -c id"}
    tasks = [
        {"ansible.builtin.include_role": {"name": "llmops.sglang.preflight", "tasks_from": "inventory"}},
        {"ansible.builtin.file": {"path": str(marker), "state": "touch"}},
    ]
    (tmp_path / "pb.yml").write_text(yaml_dump([{"hosts": "all", "gather_facts": False, "tasks": tasks}]))
    run = ansible_playbook(tmp_path, {"all": {"hosts": {"gpu1": bad}}}, tmp_path / "pb.yml")
    assert run.returncode != 0
    assert not marker.exists()
    assert "gpu1: nothing was changed. Expected ansible_host of gpu1 to be an IP address" in run.stdout + run.stderr
    assert "Traceback" not in run.stdout + run.stderr


# Account names: the account each role creates, gives files to or runs a process as (the service account and group,
# the build account, the router's account, the account that writes a shared model directory). One rule
# (inventory_values.account_problems), read by the roles through the filter llmops.sglang.account_problems; the server
# and router checks' renderings are in tests/unit (test_server_role_checks, test_router_role_checks), the model role's
# in tests/unit/test_bad_input_downloads.py, the build account's in tests/unit/test_build_dir_private.py.
BAD_ACCOUNTS = {
    "trailing_newline": "llmops-build\n",
    "newline_then_unit_line": "sglang\nExecStartPre=+/bin/sh",
    "space": "llm ops",
    "upper_case": "Builder",
    "leading_digit": "1build",
    "leading_dash": "-build",
    "too_long": "a" * 33,
    "empty": "",
    "not_a_string": 1000,
}


@pytest.mark.parametrize("value", BAD_ACCOUNTS.values(), ids=BAD_ACCOUNTS.keys())
def test_an_unsafe_account_name_is_refused_in_one_line_without_echoing_control_characters(value):
    assert IV.is_account_name(value) is False
    (problem,) = IV.account_problems({"router_user": value})
    assert problem.startswith("Expected router_user to be a system account name other than root (")
    assert problem.endswith(". Set it to sglang-router.")
    assert "\n" not in problem and "\x00" not in problem


@pytest.mark.parametrize("value", ["sglang", "llmops-build", "sglang-router", "_svc", "a" * 32, "llmops_model-2"])
def test_real_account_names_pass(value):
    assert IV.is_account_name(value) is True
    assert IV.account_problems({"router_user": value}) == []


def test_root_is_refused_unless_the_caller_accepts_it():
    assert IV.account_problems({"python_env_build_user": "root"}) == [
        "Expected python_env_build_user to be a system account name other than root (lower-case letters, digits, _ "
        "and -, not starting with a digit or -, at most 32 characters); found 'root'. Set it to llmops-build."
    ]
    assert IV.account_problems({"llmops_service_user": "root"}, allow_root=True) == []
    assert IV.account_problems({"llmops_service_user": None}) == []


def spelling(pattern: str) -> list[str]:
    """The role and plugin files that spell ``pattern``."""
    return [
        str(p.relative_to(ROOT))
        for p in [*(ROOT / "roles").rglob("*"), *(ROOT / "plugins").rglob("*.py")]
        if p.is_file() and p.suffix in {".yml", ".j2", ".py"} and pattern in p.read_text()
    ]


def test_no_role_or_plugin_spells_the_account_rule_itself():
    # the rule's one home is inventory_values.ACCOUNT; the roles call llmops.sglang.account_problems
    assert spelling("[a-z_][a-z0-9_-]") == ["plugins/module_utils/inventory_values.py"]


def test_no_role_or_plugin_spells_the_unit_name_rule_itself():
    # the rule's one home is inventory_values.UNIT; the roles call llmops.sglang.unit_problems
    assert spelling("[A-Za-z0-9:_.@-]+") == ["plugins/module_utils/inventory_values.py"]
    assert IV.unit_problems({"router_unit_name": "sglang-router.service"}) == []
    (problem,) = IV.unit_problems({"router_unit_name": "a.service\nExecStartPre=+/bin/sh"})
    assert "\n" not in problem and problem.endswith("Set it to sglang-router.service.")
