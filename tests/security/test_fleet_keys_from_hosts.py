"""The running fleet is the source of truth for its keys (playbooks/fleet_keys.yml, imported first by every playbook
that uses them; roles/llmops_defaults/tasks/fleet_keys.yml): a second control node - a CI runner's fresh checkout
without credentials/ - takes the keys the hosts hold instead of generating new ones, which would have restarted every
replica with a key its router does not know; a control node with other keys stops before it replaces the fleet's;
nothing is ever shown. Hosts here are local connections whose key files are written by the test in the formats the
server role (NAME=value lines, 0600) and the router role (JSON) write."""

from __future__ import annotations

import json
import stat
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PLAN = ROOT / "playbooks" / "fleet_roll_plan.yml"
FLEET_KEYS = {
    "replica-g1-api-key": "G1api" + "a" * 35,
    "replica-g1-admin-api-key": "G1adm" + "b" * 35,
    "replica-g2-api-key": "G2api" + "c" * 35,
    "replica-g2-admin-api-key": "G2adm" + "d" * 35,
    "router-api-key": "Rtapi" + "e" * 35,
    "router-admin-key": "Rtadm" + "f" * 35,
}


def fleet(tmp_path: Path, **g2) -> dict:
    """Two single-node replicas and a router, all local, whose key files (as the roles write them) hold FLEET_KEYS."""
    hosts = tmp_path / "hosts"
    hosts.mkdir(exist_ok=True)
    for r in ("g1", "g2"):
        env = hosts / f"{r}.env"
        env.write_text(
            f"NCCL_DEBUG=WARN\nSGLANG_API_KEY={FLEET_KEYS[f'replica-{r}-api-key']}\n"
            f"SGLANG_ADMIN_API_KEY={FLEET_KEYS[f'replica-{r}-admin-api-key']}\n"
        )
        env.chmod(0o600)
    keys = hosts / "router-keys.json"
    keys.write_text(json.dumps({"api_key": FLEET_KEYS["router-api-key"], "admin_key": FLEET_KEYS["router-admin-key"]}))
    keys.chmod(0o600)
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    return {
        "all": {
            "vars": local,
            "children": {
                "gpu_servers": {
                    "vars": {"llmops_server_host": "0.0.0.0"},
                    "hosts": {
                        "g1": {"ansible_host": "10.9.0.1", "llmops_env_file": str(hosts / "g1.env")},
                        "g2": {"ansible_host": "10.9.0.2", "llmops_env_file": str(hosts / "g2.env"), **g2},
                    },
                },
                "sglang_routers": {"hosts": {"r1": {"ansible_host": "10.9.0.3"}}},
            },
        }
    }


def router_file(tmp_path: Path) -> tuple[str, str]:
    return "-e", json.dumps({"llmops_defaults_router_keys_file": str(tmp_path / "hosts" / "router-keys.json")})


def kept(tmp_path: Path) -> dict[str, str]:
    return {p.name.removesuffix(".txt"): p.read_text().split()[0] for p in (tmp_path / "credentials").iterdir()}


def shown(run, keys=FLEET_KEYS) -> list[str]:
    return [n for n, k in keys.items() if k in run.stdout + run.stderr]


def test_a_control_node_without_credentials_takes_the_keys_the_fleet_holds(tmp_path, ansible_playbook):
    run = ansible_playbook(tmp_path, fleet(tmp_path), PLAN, *router_file(tmp_path), "-vvv")
    assert run.returncode == 0, run.stdout[-3000:]
    assert kept(tmp_path) == FLEET_KEYS  # no key generated: each is the one the fleet runs with
    creds = tmp_path / "credentials"
    assert stat.S_IMODE(creds.stat().st_mode) == 0o700
    assert {stat.S_IMODE(p.stat().st_mode) for p in creds.iterdir()} == {0o600}
    assert shown(run) == []
    again = ansible_playbook(tmp_path, fleet(tmp_path), PLAN, *router_file(tmp_path))
    assert again.returncode == 0 and kept(tmp_path) == FLEET_KEYS, again.stdout[-3000:]


def test_a_control_node_with_other_keys_stops_before_it_replaces_the_fleets(tmp_path, ansible_playbook):
    creds = tmp_path / "credentials"
    creds.mkdir(mode=0o700)
    own = "Mine" + "z" * 36
    (creds / "replica-g2-api-key.txt").write_text(own + "\n")
    (creds / "replica-g2-api-key.txt").chmod(0o600)
    run = ansible_playbook(tmp_path, fleet(tmp_path), PLAN, *router_file(tmp_path))
    assert run.returncode != 0
    out = " ".join(run.stdout.split())
    assert f"The fleet runs with other keys than {creds} holds: g2 (replica-g2-api-key); a run would replace" in out, (
        out[-2000:]
    )
    assert "Nothing was changed" in out and "llmops_rotate_keys" in out
    assert shown(run, {**FLEET_KEYS, "own": own}) == []
    assert (creds / "replica-g2-api-key.txt").read_text().split() == [own]  # its own key left as it was
    # a rotation is asked for: the control node's key goes on (the server stage then restarts g2 with it)
    rotate = ansible_playbook(tmp_path, fleet(tmp_path), PLAN, *router_file(tmp_path), "-e", "llmops_rotate_keys=true")
    assert rotate.returncode == 0, rotate.stdout[-3000:]
    assert kept(tmp_path)["replica-g2-api-key"] == own


def test_a_host_that_does_not_answer_is_named_with_the_keys_this_control_node_lacks(tmp_path, ansible_playbook):
    # g2 unreachable (nothing listens on its SSH port) and no copy of its keys here: the run says so (the checks that
    # follow say what an unreachable host means for the run); g1's and the router's keys are taken as always
    inv = fleet(tmp_path, ansible_connection="ssh", ansible_host="127.0.0.1", ansible_port=9)
    run = ansible_playbook(tmp_path, inv, ROOT / "playbooks" / "fleet_keys.yml", *router_file(tmp_path))
    out = " ".join(run.stdout.split())
    assert "Did not answer, and" in out and "g2 (replica-g2-api-key, replica-g2-admin-api-key)" in out, out[-2000:]
    got = kept(tmp_path)  # g1's and the router's as the hosts hold them; g2's generated (it holds others)
    assert {n: k for n, k in got.items() if "g2" not in n} == {n: k for n, k in FLEET_KEYS.items() if "g2" not in n}
    assert got["replica-g2-api-key"] != FLEET_KEYS["replica-g2-api-key"]
    assert shown(run) == []


def test_a_control_node_with_every_key_reaches_no_host(tmp_path, ansible_playbook):
    inv = fleet(tmp_path, ansible_connection="ssh", ansible_host="127.0.0.1", ansible_port=9)
    inv["all"]["vars"] = {"ansible_connection": "ssh", "ansible_host": "127.0.0.1", "ansible_port": 9}
    creds = tmp_path / "credentials"
    creds.mkdir(mode=0o700)
    for name, key in FLEET_KEYS.items():
        (creds / f"{name}.txt").write_text(key + "\n")
    run = ansible_playbook(tmp_path, inv, ROOT / "playbooks" / "fleet_keys.yml", *router_file(tmp_path))
    assert run.returncode == 0 and "UNREACHABLE" not in run.stdout, run.stdout[-3000:]


def test_a_new_fleet_whose_hosts_hold_no_keys_gets_new_ones(tmp_path, ansible_playbook):
    inv = fleet(tmp_path)
    for f in (tmp_path / "hosts").iterdir():
        f.unlink()
    run = ansible_playbook(tmp_path, inv, PLAN, *router_file(tmp_path))
    assert run.returncode == 0, run.stdout[-3000:]
    got = kept(tmp_path)
    assert set(got) == set(FLEET_KEYS) and not set(got.values()) & set(FLEET_KEYS.values())
