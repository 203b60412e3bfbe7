"""Fixtures of the security cases: the server role's input checks rendered without a host."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_flags

ROOT = Path(__file__).resolve().parents[2]
SERVER = ROOT / "roles" / "server"


@pytest.fixture(scope="session")
def server_problems():
    """problems(**overrides): the server role's input-check sentences (roles/server/templates/checks.json.j2) for
    its defaults with ``overrides``; server_own_flags and server_extra_args_guarded as roles/server/vars/main.yml sets
    them (the same functions of plugins/module_utils/sglang_flags.py)."""
    checks = (SERVER / "templates" / "checks.json.j2").read_text()
    defaults = yaml.safe_load((SERVER / "defaults" / "main.yml").read_text())

    def problems(**overrides):
        variables = {"model_dir": "/opt/models/m", "model_repo_id": "org/m", **defaults}
        variables["server_own_flags"] = sglang_flags.own_flags("main")
        variables.update(overrides)
        variables["server_extra_args_guarded"] = sglang_flags.guarded_args(
            variables["server_extra_args"], variables["server_own_flags"]
        )
        variables = {k: trust_as_template(v) if isinstance(v, str) and "{{" in v else v for k, v in variables.items()}
        rendered = Templar(loader=DataLoader(), variables=variables).template(trust_as_template(checks))
        return json.loads(rendered)["problems"]

    return problems
