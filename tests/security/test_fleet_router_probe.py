"""The router check that rolling_restart.yml, upgrade.yml and rollback.yml run first (playbooks/fleet_router_check.yml:
the router's settings and keys, then its control plane asked with the admin key), against the real sglang-router,
without nodes.

The router is the pinned release's own wheel started on this host's loopback with a client key and an admin key
(tests/real_router.py). What the real router answers here (measured 2026-12-01 with curl before this test was
written): GET /workers 401 without a key and with the client key, 200 with the admin key.

Proves without nodes: the check passes in check mode (the probe is a GET and runs there; before, uri - which does not
support check mode - was skipped and the next task stopped every `upgrade.yml --check` with "no answer"), a wrong
admin key stops the roll with the refusal named, and no key shows in the output at -vvv.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from real_router import running_router

ROOT = Path(__file__).resolve().parents[2]

CLIENT = "Cq7" + "c" * 37  # keys as the controller generates them (40 letters and digits)
ADMIN = "Aq7" + "a" * 37
CHECK = ROOT / "playbooks" / "fleet_router_check.yml"


@pytest.fixture(scope="module")
def router(tmp_path_factory):
    """The real router on 127.0.0.1 with CLIENT and ADMIN (tests/real_router.py); stopped at the end of the module."""
    with running_router(tmp_path_factory.mktemp("router"), CLIENT, ADMIN) as r:
        yield r


def _inventory(router, admin_key):
    unreachable = {"ansible_connection": "ssh", "ansible_ssh_executable": "/bin/false"}  # nothing runs on them
    return {
        "all": {
            "children": {
                "gpu_servers": {
                    "vars": {"llmops_server_host": "0.0.0.0", **unreachable},
                    "hosts": {"g1": {"ansible_host": "10.9.0.1"}, "g2": {"ansible_host": "10.9.0.2"}},
                },
                "sglang_routers": {
                    "hosts": {
                        "r1": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                            "llmops_router_host": "127.0.0.1",
                            "llmops_router_port": router["port"],
                            "llmops_router_prometheus_port": router["metrics"],
                            "llmops_router_api_key": CLIENT,
                            "llmops_router_admin_key": admin_key,
                        }
                    }
                },
            }
        }
    }


def _task_result(stdout: str, task: str) -> str:
    """The first result line (ok/skipping/failed/fatal) after the TASK header that ends with ``task``."""
    block = re.split(r"^TASK \[[^\]]*" + re.escape(task) + r"\] \**$", stdout, maxsplit=1, flags=re.M)
    assert len(block) == 2, f"no task {task!r} in the output"
    return re.search(r"^(ok|skipping|changed|failed|fatal): \[r1\]", block[1], re.M).group(1)


def test_the_router_check_passes_in_check_mode_and_shows_no_key(tmp_path, ansible_playbook, router):
    run = ansible_playbook(tmp_path, _inventory(router, ADMIN), CHECK, "--check", "-vvv")
    assert run.returncode == 0, run.stdout[-3000:]
    assert _task_result(run.stdout, "Ask the router for its replicas") == "ok"  # it ran, and was not skipped
    assert _task_result(run.stdout, "Stop when the router does not answer its control plane") == "skipping"
    assert CLIENT not in run.stdout + run.stderr and ADMIN not in run.stdout + run.stderr


def test_a_router_that_refuses_the_admin_key_stops_the_roll_with_the_refusal_named(tmp_path, ansible_playbook, router):
    wrong = "Wq7" + "w" * 37
    run = ansible_playbook(tmp_path, _inventory(router, wrong), CHECK)
    assert run.returncode != 0
    expected = (
        f"The router on r1 (r1) does not answer (401 from http://127.0.0.1:{router['port']}/workers (its control-plane "
        "key was refused: run the router stage, --tags router)): no replica was restarted or taken out of the router."
    )
    assert expected in " ".join(run.stdout.split()), run.stdout[-3000:]
    assert wrong not in run.stdout + run.stderr and "Traceback" not in run.stdout + run.stderr


def test_rollback_of_one_replica_in_check_mode_gets_through_the_router_and_moves_only_that_replica(
    tmp_path, ansible_playbook, router
):
    """The operator's `rollback.yml -e '{"rollback_replicas": ["g2"]}' --check` as far as a unit can follow it: the
    router's checks, the probe with the admin key and the roll plan pass against the real router; then the switch
    play leaves g1 alone and runs the server role on g2 only, whose connection cannot run a module here (ssh is
    /bin/false: the server role on a replica needs a node, make test-daytwo). g2's failure comes before the drain,
    and the roll's diagnosis says so (it said "the replica is out of the router" before: untrue, it still served)."""
    run = ansible_playbook(
        tmp_path, _inventory(router, ADMIN), ROOT / "playbooks" / "rollback.yml", "--check",
        "-e", '{"rollback_replicas": ["g2"]}',
    )  # fmt: skip
    out = run.stdout
    assert run.returncode != 0
    assert _task_result(out, "Ask the router for its replicas") == "ok"
    switch = out.split(
        "TASK [Drain the replica, switch its build set and model revision, restart it and prove it ready]", 1
    )
    assert len(switch) == 2, out[-3000:]
    results = re.findall(r"^(skipping|included|fatal|ok|changed|failed): \[?(g[12])\b", switch[1], re.M)
    assert {r for r, h in results if h == "g1"} == {"skipping"}, results  # from its switch on, g1 only skips
    assert {r for r, h in results if h == "g2"} >= {"ok", "fatal"}, results  # g2 runs the server role
    stop = "g2: the build set (unknown) did not come up - "
    flat = " ".join(out.split())
    assert stop in flat, out[-3000:]
    assert (
        "The pointer had not moved: nothing to roll back; the replica was not taken out of the router and was not "
        "restarted. The roll stopped here" in flat
    ), flat[flat.index(stop) :][:1500]
    assert ADMIN not in out + run.stderr and CLIENT not in out + run.stderr
