"""The server role's input checks (roles/server/templates/checks.json.j2) rendered with Ansible's own templating,
without a host: shared by tests/unit/test_server_role_checks.py and tests/security."""

from __future__ import annotations

import json
from pathlib import Path

import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.llmops.sglang.plugins.module_utils import inventory_values, sglang_bench, sglang_flags

ROOT = Path(__file__).resolve().parents[1]
ROLE = ROOT / "roles" / "server"
CHECKS = (ROLE / "templates" / "checks.json.j2").read_text()
# The role's defaults over the shared ones (roles/llmops_defaults, a dependency of every role), as Ansible merges them.
SHARED = yaml.safe_load((ROLE.parent / "llmops_defaults" / "defaults" / "main.yml").read_text())
DEFAULTS = {**SHARED, **yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())}


def problems(**overrides):
    """The problem sentences for the role defaults with ``overrides``. server_own_flags and server_extra_args_guarded
    are set as roles/server/vars/main.yml sets them (the same functions of plugins/module_utils/sglang_flags.py)."""
    # a stand-alone server: no generated keys (llmops_defaults generates them only behind a router)
    variables = {**DEFAULTS, "llmops_model_dir": "/opt/models/GLM-5-NVFP4"}
    variables.update(llmops_server_api_key="", llmops_server_admin_api_key="")
    variables["llmops_model_repo_id"] = "zai-org/GLM-5-NVFP4"
    variables["server_own_flags"] = sglang_flags.own_flags("main")
    variables.update(overrides)
    keyed = bool(variables["llmops_server_api_key"] or variables["llmops_server_admin_api_key"])
    variables["server_extra_args_guarded"] = sglang_flags.guarded_args(
        variables["server_extra_args"], variables["server_own_flags"], sglang_flags.unsafe_flags(keyed)
    )
    variables["server_key_problems"] = inventory_values.key_problems(
        {k: variables[k] for k in ("llmops_server_api_key", "llmops_server_admin_api_key")}
    )
    variables["server_bench_problems"] = sglang_bench.problems(
        {s: variables["server_bench_" + s] for s in ("prompts", "input_len", "output_len", "concurrency", "seed",
                                                      "timeout", "max_slowdown_pct")}, "server_bench")  # fmt: skip
    variables = {k: trust_as_template(v) if isinstance(v, str) and "{{" in v else v for k, v in variables.items()}
    # server_path_problems as vars/main.yml computes it: its server_paths rendered, then path_problems
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    templar = Templar(loader=DataLoader(), variables={**variables})
    paths = {k: templar.template(trust_as_template(v)) for k, v in role_vars["server_paths"].items()}
    variables["server_path_problems"] = inventory_values.path_problems(
        paths, tuple(role_vars["server_owned_paths"]), role_vars["server_path_follows"]
    )
    # server_account_problems as vars/main.yml computes it (root accepted for the service account)
    assert "account_problems(allow_root=true)" in role_vars["server_account_problems"]
    accounts = {k: templar.template(trust_as_template(v)) for k, v in role_vars["server_accounts"].items()}
    variables["server_account_problems"] = inventory_values.account_problems(accounts, allow_root=True)
    assert (
        role_vars["server_unit_problems"]
        == "{{ {'server_unit_name': server_unit_name} | llmops.sglang.unit_problems }}"
    )
    variables["server_unit_problems"] = inventory_values.unit_problems(
        {"server_unit_name": variables["server_unit_name"]}
    )
    return json.loads(Templar(loader=DataLoader(), variables=variables).template(trust_as_template(CHECKS)))["problems"]
