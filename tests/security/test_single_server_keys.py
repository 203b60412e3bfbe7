"""A stand-alone server (no sglang_routers group) that binds off loopback is keyed: roles/llmops_defaults generates its
API key and admin key (each in its own 0600 file of the inventory's credentials directory), so SGLang starts with
--api-key and --admin-api-key instead of answering anyone on every interface, admin routes included. On loopback it
stays unkeyed unless the inventory sets keys; keys the inventory sets are taken as they are. Rendered by
ansible-playbook on localhost (a local connection), reading only what llmops_defaults derives."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
PLAY = """
- hosts: gpu_servers
  gather_facts: false
  roles:
    - role: llmops.sglang.llmops_defaults
  tasks:
    - name: Show the lengths of the keys the server would start with
      ansible.builtin.debug:
        msg: "KEYS {{ {'api': llmops_server_api_key | length,
                       'admin': llmops_server_admin_api_key | length} | to_json }}"
"""


def keys(tmp_path, hostvars, routers=False):
    inv_dir = tmp_path / "inventory"
    inv_dir.mkdir()
    groups = {"gpu_servers": {"hosts": {"g1": {**LOCAL, **hostvars}}}}
    if routers:
        groups["sglang_routers"] = {"hosts": {"r1": dict(LOCAL)}}
    (inv_dir / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": groups}}))
    (tmp_path / "play.yml").write_text(PLAY)
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(ROOT), "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    cmd = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inv_dir), str(tmp_path / "play.yml")]
    p = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-3000:]
    line = next(x for x in out.splitlines() if "KEYS {" in x)
    return json.loads(line.split("KEYS ", 1)[1].rstrip('"').replace('\\"', '"')), inv_dir / "credentials"


@pytest.mark.parametrize("bind", ["0.0.0.0", "10.0.0.5", "::"])
def test_a_stand_alone_server_off_loopback_gets_both_keys_in_0600_files(tmp_path, bind):
    got, creds = keys(tmp_path, {"llmops_server_host": bind})
    assert got == {"api": 40, "admin": 40}, got
    assert stat.S_IMODE(creds.stat().st_mode) == 0o700, oct(creds.stat().st_mode)
    files = sorted(p.name for p in creds.iterdir())
    assert files == ["replica-g1-admin-api-key.txt", "replica-g1-api-key.txt"], files
    for f in creds.iterdir():
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f


@pytest.mark.parametrize("bind", ["127.0.0.1", "localhost", "::1"])
def test_a_stand_alone_server_on_loopback_gets_its_admin_key_only(tmp_path, bind):
    # its OpenAI routes stay open to local clients; its admin routes answer no other local account
    got, creds = keys(tmp_path, {"llmops_server_host": bind})
    assert got == {"api": 0, "admin": 40}, got
    assert sorted(p.name for p in creds.iterdir()) == ["replica-g1-admin-api-key.txt"]


def test_keys_the_inventory_sets_are_taken_as_they_are(tmp_path):
    mine = {"llmops_server_api_key": "k" * 24, "llmops_server_admin_api_key": "a" * 32}
    got, creds = keys(tmp_path, {"llmops_server_host": "0.0.0.0", **mine})
    assert got == {"api": 24, "admin": 32} and not creds.exists(), got
