"""The router role's input checks (roles/router/templates/checks.json.j2), rendered with Ansible's own templating
without a host. tests/integration/test_router_rolling_on_nodes.py runs some of the same rows in the role on a node and
proves that a refusal changes nothing; here: the defaults pass and each bad value gives exactly one one-line problem
that says what was expected, what was found and what to do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.llmops.sglang.plugins.module_utils import inventory_values, sglang_bench, sglang_flags

ROLE = Path(__file__).resolve().parents[2] / "roles" / "router"
CHECKS = (ROLE / "templates" / "checks.json.j2").read_text()
# The role's defaults over the shared ones (roles/llmops_defaults, a dependency of every role), as Ansible merges them.
SHARED = yaml.safe_load((ROLE.parent / "llmops_defaults" / "defaults" / "main.yml").read_text())
DEFAULTS = {**SHARED, **yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())}
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
# Keys as the controller generates them (40 letters and digits), one replica
KEYS = {"llmops_router_api_key": "c" * 40, "llmops_router_admin_key": "a" * 40}
REPLICA_KEYS = {"g1": {"api_key": "r" * 40, "admin_api_key": "s" * 40}}


def problems(**overrides):
    """The problem sentences for the defaults with ``overrides``; router_extra_args_guarded and router_key_problems
    as roles/router/vars/main.yml sets them (the same functions of plugins/module_utils)."""
    variables = {**DEFAULTS, **KEYS, "llmops_replica_keys": REPLICA_KEYS, **overrides}
    variables["router_secret_flags"] = [
        "--api-key", "--control-plane-api-keys", "--jwt-issuer", "--jwt-audience", "--jwt-jwks-uri",
        "--jwt-role-mapping", "--worker-urls", "--service-discovery",
    ]  # fmt: skip
    assert variables["router_secret_flags"] == Templar(loader=DataLoader()).template(
        trust_as_template(VARS["router_secret_flags"])
    )
    variables["router_own_flags"] = VARS["router_own_flags"]
    guarded = {**VARS["router_own_flags"], **{f: f for f in variables["router_secret_flags"]}}
    args = variables["router_extra_args"]
    variables["router_extra_args_guarded"] = sglang_flags.guarded_args(args if isinstance(args, list) else [], guarded)
    out = inventory_values.key_problems(
        {k: variables[k] for k in KEYS}, ("llmops_router_api_key", "llmops_router_admin_key")
    )
    for name, keys in variables["llmops_replica_keys"].items():
        out += inventory_values.key_problems(
            {f"llmops_server_api_key of replica {name}": keys["api_key"],
             f"llmops_server_admin_api_key of replica {name}": keys["admin_api_key"]}
        )  # fmt: skip
    variables["router_key_problems"] = out
    paths = {k: variables[k] for k in VARS["router_paths"]}
    assert set(VARS["router_paths"]) == {"router_venv", "router_python", "router_log_dir"}
    variables["router_path_problems"] = inventory_values.path_problems(paths, ("router_venv", "router_log_dir"))
    assert VARS["router_account_problems"] == "{{ {'router_user': router_user} | llmops.sglang.account_problems }}"
    variables["router_account_problems"] = inventory_values.account_problems({"router_user": variables["router_user"]})
    assert VARS["router_unit_problems"] == "{{ {'router_unit_name': router_unit_name} | llmops.sglang.unit_problems }}"
    variables["router_unit_problems"] = inventory_values.unit_problems(
        {"router_unit_name": variables["router_unit_name"]}
    )
    variables["router_bench_problems"] = sglang_bench.problems(
        {s: variables["router_bench_" + s] for s in ("prompts", "input_len", "output_len", "concurrency", "seed",
                                                      "timeout", "max_slowdown_pct")}, "router_bench")  # fmt: skip
    return json.loads(Templar(loader=DataLoader(), variables=variables).template(trust_as_template(CHECKS)))["problems"]


def test_the_defaults_pass():
    assert problems() == []


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"llmops_router_port": 70000}, "Expected llmops_router_port to be a TCP port (1-65535); found 70000."),
        ({"llmops_router_port": "http"}, "Expected llmops_router_port to be a whole number >= 1; found 'http'."),
        ({"llmops_router_prometheus_port": 0}, "Expected llmops_router_prometheus_port >= 1; found 0."),
        (
            {"llmops_router_prometheus_port": 30080},
            "Expected llmops_router_prometheus_port to differ from llmops_router_port",
        ),
        ({"router_policy": "fastest"}, "Expected router_policy to be one of cache_aware, round_robin, random,"),
        ({"router_version": "latest"}, "Expected router_version to be a release of sglang-router such as 0.3.2"),
        ({"router_health_check_endpoint": "health"}, "Expected router_health_check_endpoint to be a path"),
        ({"router_health_check_interval_secs": 0}, "Expected router_health_check_interval_secs >= 1; found 0."),
        ({"router_ready_timeout": -1}, "Expected router_ready_timeout >= 1; found -1."),
        ({"router_log_dir": "/var/log"}, "Expected router_log_dir to be a directory of its own"),
        ({"router_log_dir": "/etc"}, "Expected router_log_dir to be a directory of its own"),
        ({"router_venv": "/opt/r\nExecStartPre=+/bin/sh"}, "Expected router_venv to be an absolute path other than /"),
        ({"router_venv": "/opt/sglang-router/../../usr"}, "Expected router_venv to be a normal path"),
        ({"router_python": "python3"}, "Expected router_python to be an absolute path other than / with no spaces"),
        # the account, the package and the unit's name reach the unit file (User=, Description=) and pip's argv
        ({"router_user": "sglang-router\nExecStartPre=+/bin/sh"}, "Expected router_user to be a system account name"),
        ({"router_user": "root"}, "Expected router_user to be a system account name other than root"),
        ({"router_user": "Router"}, "Expected router_user to be a system account name"),
        ({"router_package": "sglang-router\n[Service]"}, "Expected router_package to be a package name on the index"),
        ({"router_package": "sglang-router --index-url=x"}, "Expected router_package to be a package name on the"),
        ({"router_unit_name": "sglang-router"}, "Expected router_unit_name to be a systemd service name ending in"),
        ({"router_unit_name": "a.service\nx.service"}, "Expected router_unit_name to be a systemd service name"),
        ({"router_roll_batch_size": "all"}, "Expected router_roll_batch_size to be a whole number >= 1"),
        ({"router_drain_timeout": 0}, "Expected router_drain_timeout >= 1; found 0."),
        ({"router_drain_quiet_polls": 0}, "Expected router_drain_quiet_polls >= 1; found 0."),
        ({"router_extra_args": "--retry-max-retries 3"}, "Expected router_extra_args to be a list of arguments"),
        ({"router_extra_args": ["--api-key", "sk-1"]}, "Expected no --api-key in router_extra_args"),
        ({"router_bench_prompts": 5000}, "Expected router_bench_prompts to be a whole number from 1 to 1000; found"),
        ({"router_bench_concurrency": "many"}, "Expected router_bench_concurrency to be a whole number from 1"),
        ({"router_bench_timeout": 0}, "Expected router_bench_timeout to be a whole number from 1 to 86400; found '0'"),
        ({"router_bench_max_slowdown_pct": 100}, "Expected router_bench_max_slowdown_pct to be a percentage above 0"),
    ],
)
def test_each_bad_value_is_one_problem(overrides, expected):
    found = problems(**overrides)
    assert len(found) == 1, found
    assert found[0].startswith(expected), found[0]
    assert ("; found " in found[0] and ". Set " in found[0]) or ". Remove it." in found[0] or ". Write it" in found[0]
    assert "\n" not in found[0]


def test_a_secret_in_the_extra_args_is_not_repeated():
    assert "sk-1" not in json.dumps(problems(router_extra_args=["--api-key", "sk-1"]))


def bench_vars(replicas, hostvars, **overrides):
    """roles/router/vars/main.yml's benchmark values rendered with Ansible's templating for a fleet."""
    names = ("router_bench_benched", "router_bench_build_set", "router_bench_model_commit", "router_bench_url")
    variables = {**DEFAULTS, "router_replicas": replicas, "hostvars": hostvars, "inventory_hostname": "rt1",
                 "ansible_host": "10.0.0.9", **overrides}  # fmt: skip
    for name in ("router_bench_benched", "router_bench_build_set", "router_bench_model_commit", "router_bench_host",
                 "router_bench_url"):  # fmt: skip
        variables[name] = trust_as_template(VARS[name])
    variables["router_every_interface"] = VARS["router_every_interface"]
    templar = Templar(loader=DataLoader(), variables=variables)
    return {n: templar.template(variables[n]) for n in names}


def _result(verdict, build_set, commit="c" * 40):
    out = {"verdict": verdict, "build_set": build_set, "model_commit": commit, "python": f"/opt/sets/{build_set}/bin/"
           "python", "tokenizer": "/opt/models/glm"}  # fmt: skip
    return dict(out, figures={"output_throughput": 1.0}) if verdict in ("baseline", "ok", "slower") else out


def test_the_benchmark_through_the_router_runs_from_a_head_benchmarked_in_this_run_and_names_the_fleet():
    replicas = [{"name": n, "head": n, "url": f"http://{n}:30000"} for n in ("g1", "g2", "g3")]
    hostvars = {"g1": {"server_bench_result": _result("not due", "set-a")},  # settled: not benchmarked
                "g2": {"server_bench_result": _result("ok", "set-b")},
                "g3": {"server_bench_result": _result("baseline", "set-b")}}  # fmt: skip
    got = bench_vars(replicas, hostvars)
    assert [b["host"] for b in got["router_bench_benched"]] == ["g2", "g3"]
    assert got["router_bench_build_set"] == "3 replicas: set-b" and got["router_bench_model_commit"] == "c" * 40
    assert got["router_bench_url"] == "http://10.0.0.9:30080"  # every interface: the router host's address
    # a replica that served slower than its baseline is no client for the fleet's benchmark; nothing benchmarked: none
    hostvars["g2"]["server_bench_result"] = _result("slower", "set-b")
    assert [b["host"] for b in bench_vars(replicas, hostvars)["router_bench_benched"]] == ["g3"]
    assert bench_vars(replicas, {"g1": {"server_bench_result": {}}})["router_bench_benched"] == []
    assert bench_vars(replicas, {})["router_bench_build_set"] == "3 replicas: -"  # a --limit without the replicas
    v6 = bench_vars(replicas, hostvars, llmops_router_host="fd00::9")
    assert v6["router_bench_url"] == "http://[fd00::9]:30080"


@pytest.mark.parametrize(
    ("host", "url"),
    [("0.0.0.0", "http://127.0.0.1:30080"), ("::", "http://127.0.0.1:30080"), ("10.0.0.9", "http://10.0.0.9:30080"),
     ("fd00::9", "http://[fd00::9]:30080")],
)  # fmt: skip
def test_the_role_reaches_its_router_over_loopback_when_it_binds_every_interface(host, url):
    variables = {**DEFAULTS, "router_api_host": host, "router_api_port": 30080,
                 "router_every_interface": VARS["router_every_interface"]}  # fmt: skip
    assert Templar(loader=DataLoader(), variables=variables).template(trust_as_template(VARS["router_api_url"])) == url
