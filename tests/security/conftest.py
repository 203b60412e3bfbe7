"""Fixtures of the security cases."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import server_checks
import yaml


@pytest.fixture(scope="session")
def server_problems():
    """problems(**overrides): the server role's input-check sentences for its defaults with ``overrides``."""
    return server_checks.problems


@pytest.fixture(scope="session")
def ansible_playbook():
    """run(cwd, inventory_dict, playbook_path, *args): ansible-playbook of this checkout on the controller (only local
    connections), bounded to 120 s; returns the CompletedProcess."""
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(root), "ANSIBLE_CONFIG": str(root / "ansible.cfg")}
    binary = str(Path(sys.executable).with_name("ansible-playbook"))

    def run(cwd, inventory, playbook, *args):
        (Path(cwd) / "inv.yml").write_text(yaml.safe_dump(inventory))
        cmd = [binary, "-i", str(Path(cwd) / "inv.yml"), str(playbook), *args]
        return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)

    return run
