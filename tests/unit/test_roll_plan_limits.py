"""--limit on the server stage (playbooks/fleet_roll_plan.yml, imported by server.yml, rolling_restart.yml,
fleet_switch.yml and driver_upgrade.yml), run by ansible-playbook against an inventory whose hosts are unreachable (a
closed port on loopback): a refusal must come before any connection. Left without localhost, the plan does not run and
the GPU servers of the limit stop with what to add; left without a router host, localhost stops before any replica is
touched (planned without the router's state, replicas would restart at once, without the drain). With both, the run
goes on to the replicas (here: unreachable, which proves the guards let it through)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLAYBOOKS = ["server.yml", "rolling_restart.yml", "fleet_switch.yml"]


def inventory(tmp_path, routers=True):
    groups = {"gpu_servers": {"hosts": {"gpu01": {}, "gpu03": {}}}}
    if routers:
        # router02 answers (a local connection: systemctl is-active on this machine, a read), router01 does not
        local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
        groups["sglang_routers"] = {"hosts": {"router01": {}, "router02": local}}
    inv = {
        "all": {
            "vars": {"ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_ssh_common_args": "-o ConnectTimeout=3"},
            "children": groups,
        }
    }
    path = tmp_path / "hosts.yml"
    path.write_text(json.dumps(inv))
    # a control node that has the fleet's keys (playbooks/fleet_keys.yml reaches no host then): the refusals below
    # must come before any connection
    creds = tmp_path / "credentials"
    creds.mkdir(mode=0o700)
    names = ["router-api-key", "router-admin-key"] if routers else []
    for r in ("gpu01", "gpu03"):
        names += [f"replica-{r}-api-key", f"replica-{r}-admin-api-key"]
    for i, name in enumerate(names):
        (creds / f"{name}.txt").write_text(f"Key{i:02d}" + "k" * 35 + "\n")
    return path


def run(tmp_path, playbook, limit, routers=True):
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory(tmp_path, routers))]
    cmd += [str(ROOT / "playbooks" / playbook), "--limit", limit]
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, check=False, timeout=300)
    return p.returncode, " ".join((p.stdout + p.stderr).split())


@pytest.mark.parametrize("playbook", PLAYBOOKS)
def test_a_limit_without_localhost_is_refused_on_the_limited_hosts(tmp_path, playbook):
    rc, out = run(tmp_path, playbook, "gpu03")
    assert rc != 0, out[-3000:]
    assert "Nothing was changed. Expected localhost in this run" in out, out[-3000:]
    assert "--limit gpu03,localhost." in out and "UNREACHABLE" not in out, out[-3000:]


def test_a_limit_without_the_router_hosts_is_refused_before_any_replica(tmp_path):
    rc, out = run(tmp_path, "server.yml", "gpu03,localhost")
    assert rc != 0, out[-3000:]
    assert "Expected every sglang_routers host in this run" in out, out[-3000:]
    assert "found router01, router02 not in it" in out, out[-3000:]
    assert "gpu03 " not in out.split("PLAY RECAP")[-1] and "UNREACHABLE" not in out, out[-3000:]


def test_an_unreachable_router_host_is_refused_too(tmp_path):
    rc, out = run(tmp_path, "server.yml", "gpu03,router01,router02,localhost")
    assert rc != 0, out[-3000:]
    assert "found router01 not in it (left out of --limit, or unreachable)" in out, out[-3000:]
    assert "gpu03 " not in out.split("PLAY RECAP")[-1], out[-3000:]


def test_with_localhost_and_no_router_group_the_run_reaches_the_replica(tmp_path):
    rc, out = run(tmp_path, "server.yml", "gpu03,localhost", routers=False)
    assert rc != 0, out[-3000:]
    assert "Expected localhost" not in out and "Expected every sglang_routers" not in out, out[-3000:]
    assert "UNREACHABLE" in out and "gpu03 " in out.split("PLAY RECAP")[-1], out[-3000:]
