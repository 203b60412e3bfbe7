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

ROLE = Path(__file__).resolve().parents[2] / "roles" / "router"
CHECKS = (ROLE / "templates" / "checks.json.j2").read_text()
# The role's defaults over the shared ones (roles/llmops_defaults, a dependency of every role), as Ansible merges them.
SHARED = yaml.safe_load((ROLE.parent / "llmops_defaults" / "defaults" / "main.yml").read_text())
DEFAULTS = {**SHARED, **yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())}


def problems(**overrides):
    variables = {**DEFAULTS, **overrides}
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
        ({"router_roll_batch_size": "all"}, "Expected router_roll_batch_size to be a whole number >= 1"),
        ({"router_drain_timeout": 0}, "Expected router_drain_timeout >= 1; found 0."),
        ({"router_drain_quiet_polls": 0}, "Expected router_drain_quiet_polls >= 1; found 0."),
        ({"router_extra_args": "--retry-max-retries 3"}, "Expected router_extra_args to be a list of arguments"),
        ({"router_extra_args": ["--api-key", "sk-1"]}, "Expected no secret in router_extra_args"),
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
