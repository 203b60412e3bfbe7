"""The NVIDIA driver moved under a serving fleet (issue 28 item 2): playbooks/driver_upgrade.yml on three simulated
nodes, two SGLang replicas behind SGLang's real router.

du1 and du2 (10.213.0.131-132, 8 x RTX PRO 6000 each) boot with no driver; du3 (10.213.0.133, no GPU) is the
router host. The driver stage installs 580.95.05-1 from the NVIDIA stand-in repository (sim/mirrors/apt_repo.py: its
packages carry Debian 12's real names, sources and relations), then preflight, model, server and router stages make
the fleet serve. On the same nodes, in file order:
- a plain site.yml with the pin moved to 580.105.08-1 is refused on both serving hosts, naming driver_upgrade.yml:
  nothing changes, nothing reboots;
- with du2 out of the router, the upgrade refuses to take du1 out (the last healthy replica): nothing changes;
- under a bounded client loop through the router, the fleet moves to 580.105.08-1: each replica host is rebooted
  once (systemd-nspawn starts its container again on the reboot's exit code 133; the fake nvidia-smi reports the
  driver of the installed libnvidia-ml1 package once the loaded one is gone with /run), nvidia-smi reports the new
  driver, the pin holds (`apt-get -s dist-upgrade` moves nothing of the driver), deployment.json records the
  driver's move and the roll, and no request fails;
- a second run finds the driver loaded and changes nothing.

The sim nodes are containers: the driver role reboots them only with nvidia_driver_reboot_in_containers (a real
container host never reboots for its guest). The fabric manager's pin moves with the driver's in the same preferences
file (roles/nvidia_driver/templates/nvidia-driver.pref.j2); these RTX PRO 6000 nodes have no NVSwitch, so no fabric
manager is installed here (test_driver_pin_on_node.py installs one at the pinned version on an H100 node).

Day two: run only with LLMOPS_DAYTWO=1 (`make test-driver-upgrade`, and `make test-daytwo`).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import urllib.request
from pathlib import Path

import pytest
from _node_util import booted_nodes, fleet_inventory, ssh_key
from events import wait_until
from playbook_output import play_recap
from test_router_rolling_on_nodes import OPENER, ROUTER_PORT, SERVER_PORT, ClientLoop, Fleet, bearer, ssh

pytestmark = [
    pytest.mark.node,
    pytest.mark.skipif(not os.environ.get("LLMOPS_DAYTWO"), reason="a driver upgrade: make test-driver-upgrade"),
]

REPLICAS = {"du1": "10.213.0.131", "du2": "10.213.0.132"}
ROUTER, ROUTER_IP = "du3", "10.213.0.133"
URLS = {f"http://{ip}:{SERVER_PORT}" for ip in REPLICAS.values()}
OLD, NEW = "580.95.05", "580.105.08"
STAGES = ["playbooks/preflight.yml", "playbooks/model.yml", "playbooks/server.yml", "playbooks/router.yml"]
SIM_STATE = Path(os.environ.get("SIM_STATE", "/run/llmops-sim"))
FIGURES: list[str] = []


def boots(name: str) -> int:
    """How often the node's container was started: systemd-nspawn says 'Spawning container' on each start
    (sim/node's loop starts it again when it exits with 133, a reboot)."""
    return (SIM_STATE / "nodes" / name / "console.log").read_text(errors="replace").count("Spawning container")


def smi_driver(fleet: Fleet, ip: str) -> str:
    return ssh(fleet.key, ip, "nvidia-smi --query-gpu=driver_version --format=csv,noheader | sort -u").strip()


def deployment(fleet: Fleet, ip: str) -> dict:
    return json.loads(ssh(fleet.key, ip, "cat /var/lib/llmops-sglang/deployment.json"))


def admin(fleet: Fleet, method: str, path: str):
    """The router's control plane with its admin key (the fleet's own credential)."""
    req = urllib.request.Request(
        f"http://{ROUTER_IP}:{ROUTER_PORT}{path}", headers=bearer(fleet.admin_key), method=method
    )
    with OPENER.open(req, timeout=10) as r:
        body = r.read()
    return json.loads(body) if body.strip() else None


def pin(fleet: Fleet, ip: str) -> str:
    return ssh(fleet.key, ip, "cat /etc/apt/preferences.d/llmops-nvidia-driver.pref")


def upgraded(fleet: Fleet, figure: str):
    """driver_upgrade.yml to NEW under the bounded client loop through the router (started once both replicas served
    a request); the figure (time, requests) is recorded. Returns (run, loop)."""
    served = fleet.served_by_worker()
    loop = ClientLoop(limit=50000, deadline=1800, key=fleet.client_key, router_ip=ROUTER_IP).start()
    fleet.wait_served_by_both(served)
    run = fleet.playbook(["playbooks/driver_upgrade.yml"], {"llmops_driver_version": f"{NEW}-1"}, timeout=1800)
    loop.stop()
    FIGURES.append(
        f"{figure}: {run.seconds:.0f} s, {loop.codes[200]} requests served through the router during it, "
        f"{loop.failed} failed (rc {run.rc})"
    )
    return run, loop


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    if os.geteuid() != 0 or shutil.which("systemd-nspawn") is None:
        pytest.skip("node tests need root and systemd-nspawn")
    work = tmp_path_factory.mktemp("du")
    t0 = time.time()
    nodes = {name: (ip, "rtx-pro-6000-x8") for name, ip in REPLICAS.items()} | {ROUTER: (ROUTER_IP, "none")}
    try:
        with booted_nodes(nodes, driver="none", mirrors=True):
            key = ssh_key()
            replicas = {
                "hosts": REPLICAS,
                "vars": {
                    "llmops_server_host": "0.0.0.0",
                    "server_environment": {"SGLANG_SIM_REQUEST_SECONDS": "0.25"},
                    "server_progress_interval": 5,
                    # the nodes are systemd-nspawn containers: let the driver role reboot them
                    "nvidia_driver_reboot_in_containers": True,
                },
            }
            groups = {"gpu_servers": replicas, "sglang_routers": {"hosts": {ROUTER: ROUTER_IP}}}
            f = Fleet(key, fleet_inventory(work / "inventory", groups), work, router_ip=ROUTER_IP, urls=URLS)
            for ip in [*REPLICAS.values(), ROUTER_IP]:
                ssh(key, ip, "systemctl is-system-running --wait || true")
            prep = f.playbook(
                ["tests/integration/server_prepare.yml"],
                env_extra={"MOLECULE_PROJECT_DIRECTORY": str(Path(__file__).resolve().parents[2]),
                           "MOLECULE_EPHEMERAL_DIRECTORY": str(work)},
            )  # fmt: skip
            assert prep.rc == 0, prep.why()
            yield f
    finally:
        print("\n" + "\n".join(FIGURES) + f"\nmodule wall time {time.time() - t0:.0f} s")


def test_the_driver_stage_installs_the_old_driver_and_the_fleet_serves_behind_the_router(fleet):
    driver = fleet.playbook(["playbooks/preflight.yml", "playbooks/gpu_stack.yml"], options=("--tags", "driver"))
    assert driver.rc == 0, driver.why()
    for ip in REPLICAS.values():
        assert smi_driver(fleet, ip) == OLD
    run = fleet.playbook(STAGES)
    assert run.rc == 0, run.why()
    assert fleet.workers() == {u: True for u in URLS}
    for name, ip in REPLICAS.items():
        assert deployment(fleet, ip)["driver"] == OLD, deployment(fleet, ip)
        assert boots(name) == 2, name  # booted, and rebooted once by the driver role's handler after the install


def test_a_driver_pin_bump_in_a_plain_site_yml_is_refused_on_the_serving_fleet_naming_driver_upgrade(fleet):
    # A merge request bumps llmops_driver_version and CI runs the usual site.yml: on hosts that serve, that would
    # reinstall the driver and reboot every replica at once. Preflight refuses it on each serving host before anything
    # changes, naming the playbook that drains one replica at a time.
    pins = {ip: pin(fleet, ip) for ip in REPLICAS.values()}
    pids = {ip: fleet.main_pid(ip) for ip in REPLICAS.values()}
    before = {n: boots(n) for n in REPLICAS}
    # llmops_allow_downtime: false as an operator's inventory has it (the default; the lab's group_vars accept downtime)
    run = fleet.playbook(["site.yml"], {"llmops_driver_version": f"{NEW}-1", "llmops_allow_downtime": False})
    assert run.rc != 0
    refused = {h: m for h, n, m in run.failures()}
    assert set(refused) == set(REPLICAS), refused
    for host, msg in refused.items():
        assert msg.startswith(f"{host}: nothing was changed."), msg
        assert f"driver {OLD} loaded while the inventory pins {NEW}-1" in msg and "playbooks/driver_upgrade.yml" in msg
    # the one write: preflight's record of what was requested (preflight.json, as any stage's preflight writes it)
    assert {n for h, n in run.changed()} <= {"Record what preflight found on the host"}, run.changed()
    assert {ip: pin(fleet, ip) for ip in REPLICAS.values()} == pins
    assert {ip: fleet.main_pid(ip) for ip in REPLICAS.values()} == pids
    assert {n: boots(n) for n in REPLICAS} == before
    assert [smi_driver(fleet, ip) for ip in REPLICAS.values()] == [OLD, OLD]
    assert fleet.workers() == {u: True for u in URLS}


def test_the_upgrade_refuses_to_take_out_the_last_healthy_replica_and_changes_nothing(fleet):
    du1, du2 = REPLICAS["du1"], REPLICAS["du2"]
    # du2 leaves the router (as during another change): du1 is the only healthy replica left
    ids = {w["url"]: w["id"] for w in admin(fleet, "GET", "/workers")["workers"]}
    admin(fleet, "DELETE", f"/workers/{ids[f'http://{du2}:{SERVER_PORT}']}")
    wait_until(lambda: f"http://{du2}:{SERVER_PORT}" not in fleet.workers(), "du2 out of the router")
    pins = {ip: pin(fleet, ip) for ip in REPLICAS.values()}
    try:
        run = fleet.playbook(["playbooks/driver_upgrade.yml"], {"llmops_driver_version": f"{NEW}-1"})
        assert run.rc != 0
        msgs = [m for h, n, m in run.failures()]
        assert len(msgs) == 1 and msgs[0].startswith("du1: expected another replica healthy behind the router"), msgs
        assert "du3 reports no other replica healthy" in msgs[0] and "were not touched" in msgs[0], msgs
        # the one write: preflight's record of what was requested (preflight.json, as any stage's preflight writes it)
        assert {n for h, n in run.changed()} <= {"Record what preflight found on the host"}, run.changed()
        assert {ip: pin(fleet, ip) for ip in REPLICAS.values()} == pins
        assert fleet.workers() == {f"http://{du1}:{SERVER_PORT}": True}
        assert [smi_driver(fleet, ip) for ip in REPLICAS.values()] == [OLD, OLD]
    finally:
        back = fleet.playbook(["playbooks/router.yml"])
        assert back.rc == 0, back.why()
    assert fleet.workers() == {u: True for u in URLS}


def test_the_fleet_moves_to_the_new_driver_one_replica_at_a_time_with_no_failed_request(fleet):
    before = {n: boots(n) for n in REPLICAS}
    run, loop = upgraded(fleet, f"driver upgrade {OLD} -> {NEW} on 2 replicas")
    assert run.rc == 0, run.why()
    assert loop.failed == 0 and loop.codes[200] > 0, (loop.codes, loop.errors[:5])
    assert fleet.workers() == {u: True for u in URLS}
    for name, ip in REPLICAS.items():
        assert boots(name) == before[name] + 1, name  # rebooted once
        assert smi_driver(fleet, ip) == NEW
        assert f"Pin: version {NEW}-1" in pin(fleet, ip)
        record = deployment(fleet, ip)
        assert record["driver"] == NEW and record.get("previous", {}).get("driver") == OLD, record
        steps = [e["event"] for e in record["roll"]["events"]]
        assert steps == ["drained", "driver_upgraded", "restarted", "ready", "rejoined"], steps
        event = record["roll"]["events"][1]
        assert (event["from_driver"], event["to_driver"]) == (OLD, NEW), event
        # the pin holds: a dist-upgrade moves no package of NVIDIA's repository
        sim = ssh(fleet.key, ip, "apt-get -s -o Debug::NoLocking=1 dist-upgrade")
        moves = [ln for ln in sim.splitlines() if ln.startswith(("Inst ", "Remv ", "Conf "))]
        assert not [m for m in moves if "nvidia" in m.lower() or "cuda" in m.lower()], sim
        # every installed package of the driver's sources is at the new version and held again
        rows = ssh(fleet.key, ip, "dpkg-query -W -f='${Package} ${source:Package} ${Version} ${db:Status-Abbrev}\\n'")
        driver = [r.split() for r in rows.splitlines() if len(r.split()) >= 4 and "nvidia" in r.split()[1]]
        driver = [r for r in driver if r[2].startswith("580.")]
        assert len(driver) >= 10 and {"libnvidia-ml1", "nvidia-driver-cuda"} <= {r[0] for r in driver}, rows
        assert [r for r in driver if r[2] != f"{NEW}-1" or not r[3].startswith("hi")] == [], rows
    # one replica at a time: du1 was back in the router before du2 left it
    rejoined = deployment(fleet, REPLICAS["du1"])["roll"]["events"][-1]["at"]
    drained = deployment(fleet, REPLICAS["du2"])["roll"]["events"][0]["at"]
    assert rejoined <= drained, (rejoined, drained)


def test_a_driver_installed_but_never_loaded_is_loaded_by_the_next_runs_reboot(fleet):
    # An interrupted upgrade: the packages moved, the reboot never came. The fake nvidia-smi then reports what the real
    # one does, "Driver/library version mismatch" (exit 18), as long as the old version is the loaded one.
    du1, du2 = REPLICAS["du1"], REPLICAS["du2"]
    ssh(fleet.key, du1, f"echo {OLD} > /run/sim-gpu/loaded-driver-version")
    assert "mismatch" in ssh(fleet.key, du1, "nvidia-smi || true")
    before = {n: boots(n) for n in REPLICAS}
    run, loop = upgraded(fleet, "driver_upgrade.yml again with du1's new driver installed but not loaded")
    assert run.rc == 0, run.why()
    assert loop.failed == 0 and loop.codes[200] > 0, (loop.codes, loop.errors[:5])
    assert {n: boots(n) for n in REPLICAS} == {"du1": before["du1"] + 1, "du2": before["du2"]}
    assert smi_driver(fleet, du1) == NEW and smi_driver(fleet, du2) == NEW
    assert fleet.workers() == {u: True for u in URLS}
    steps = [e["event"] for e in deployment(fleet, du1)["roll"]["events"]]
    assert steps == ["drained", "driver_upgraded", "restarted", "ready", "rejoined"], steps
    # du2 already ran the new driver: not part of this roll (its record keeps the previous roll)
    assert deployment(fleet, du2)["roll"]["id"] != deployment(fleet, du1)["roll"]["id"]


def test_a_second_run_finds_the_new_driver_loaded_and_changes_nothing(fleet):
    before = {n: boots(n) for n in REPLICAS}
    again = fleet.playbook(["playbooks/driver_upgrade.yml"], {"llmops_driver_version": f"{NEW}-1"},
                           env_extra={"ANSIBLE_STDOUT_CALLBACK": "default"})  # fmt: skip
    counts = play_recap(again.stdout)
    assert again.rc == 0 and set(counts) >= {*REPLICAS, ROUTER}, again.stdout[-3000:]
    assert {h: c["changed"] for h, c in counts.items() if c["changed"]} == {}, counts
    assert {n: boots(n) for n in REPLICAS} == before
    assert fleet.workers() == {u: True for u in URLS}
