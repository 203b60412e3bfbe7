"""The driver and CUDA stages take the roles' Ubuntu paths end to end, on nodes with Ubuntu's identity.

Two nodes boot with the identity of an Ubuntu release on the Debian 12 userland (sim/os/README.md): gs5 (10.213.0.45,
Ubuntu 24.04, 8 x RTX PRO 6000 Blackwell) and gs6 (10.213.0.46, Ubuntu 22.04, 8 x H100 behind NVSwitch: the fabric
manager), neither with a driver. Preflight and the GPU stage run on both from the stand-ins of NVIDIA's ubuntu2404
and ubuntu2204 repositories, which carry Ubuntu's driver names at 580.95.05-0ubuntu1 and a newer 580.105.08-0ubuntu1
(sim/mirrors/ubuntu_graph.py: names and read relations from packages.ubuntu.com). What this does not prove (Ubuntu's
own userland, kernel and Python, NVIDIA's real Ubuntu index) is in docs/gpu-stack.md, "Support matrix".

Last, the driver moves to 580.105.08-0ubuntu1 with one reboot per host.

Run: .venv/bin/pytest tests/integration/test_ubuntu_gpu_stack_on_nodes.py -m node (root; about 3 min).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from _node_util import (
    ROOT,
    VENV_BIN,
    booted_nodes,
    fleet_inventory,
    nvidia_packages,
    sim_node,
    stage_env,
)
from events import PLAYBOOK_GUARD
from playbook_output import play_recap

NODES = {
    os.environ.get("GS_NOBLE_NODE_NAME", "gs5"): ("10.213.0.45", "rtx-pro-6000-x8", "ubuntu-24.04"),
    os.environ.get("GS_JAMMY_NODE_NAME", "gs6"): ("10.213.0.46", "h100-80gb-x8", "ubuntu-22.04"),
}
NOBLE, JAMMY = list(NODES)
PINNED = "580.95.05-0ubuntu1"
NEWER = "580.105.08-0ubuntu1"
SIM_STATE = Path(os.environ.get("SIM_STATE", "/run/llmops-sim"))

pytestmark = pytest.mark.node


def ssh(node: str, command: str) -> str:
    return sim_node("ssh", node, command).stdout


def play(inventory: Path, extra: dict | None = None, limit: str | None = None) -> subprocess.CompletedProcess:
    cmd = [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory / "hosts.yml"), str(inventory / "gpu.yml")]
    cmd += ["--diff"] + (["-e", json.dumps(extra)] if extra else []) + (["--limit", limit] if limit else [])
    return subprocess.run(
        cmd, capture_output=True, text=True, env=stage_env(), cwd=ROOT, timeout=PLAYBOOK_GUARD, check=False
    )


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    if os.geteuid() != 0 or shutil.which("systemd-nspawn") is None:
        pytest.skip("needs root and systemd-nspawn (simulated nodes)")
    with booted_nodes(NODES, driver="none", mirrors=True):
        inv = fleet_inventory(
            tmp_path_factory.mktemp("inventory"), {"gpu_servers": {"hosts": {n: v[0] for n, v in NODES.items()}}}
        )
        # the simulated PCI bus shows the GPUs, not the NVSwitch bridges that `auto` looks for
        (inv / "host_vars").mkdir()
        (inv / "host_vars" / f"{JAMMY}.yml").write_text("nvidia_driver_fabricmanager: true\n")
        (inv / "gpu.yml").write_text(
            f"- ansible.builtin.import_playbook: {ROOT}/playbooks/preflight.yml\n"
            f"- ansible.builtin.import_playbook: {ROOT}/playbooks/gpu_stack.yml\n"
        )
        first = play(inv)
        assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-2000:]
        second = play(inv)
        yield {"inventory": inv, "first": first, "second": second}


def boots(node: str) -> int:
    """How often the node's container was started (sim/node's loop starts it again after a reboot)."""
    return (SIM_STATE / "nodes" / node / "console.log").read_text(errors="replace").count("Spawning container")


def test_the_nodes_report_ubuntu_and_get_the_repository_of_their_release(runs):
    for node, release in ((NOBLE, "ubuntu2404"), (JAMMY, "ubuntu2204")):
        assert f"/nvidia/compute/cuda/repos/{release}/x86_64/ /" in ssh(
            node, f"cat /etc/apt/sources.list.d/cuda-{release}-x86_64.list"
        )
        record = json.loads(ssh(node, "cat /var/lib/llmops-sglang/driver.json"))
        assert record["package_version"] == PINNED
        assert record["packages"] == ["nvidia-headless-580-open", "nvidia-utils-580", "nvidia-compute-utils-580"]


def test_ubuntus_driver_packages_are_installed_and_held_at_exactly_the_pinned_version(runs):
    for node in NODES:
        rows = nvidia_packages(node)
        driver = {p: r for p, r in rows.items() if r[0] == "nvidia-graphics-drivers-580"}
        # the compute set and what it needs at exactly its version (sim/mirrors/ubuntu_graph.py)
        assert {"nvidia-headless-580-open", "nvidia-dkms-580-open", "nvidia-headless-no-dkms-580-open",
                "nvidia-kernel-source-580-open", "nvidia-kernel-common-580", "libnvidia-compute-580",
                "nvidia-utils-580", "nvidia-compute-utils-580"} <= set(driver), rows  # fmt: skip
        assert {v for _, v, _ in driver.values()} == {PINNED}, driver
        assert all(h for *_, h in driver.values()), driver
        assert "nvidia-headless-580" not in driver and "nvidia-dkms-580" not in driver  # open modules only
        policy = ssh(node, "apt-cache policy nvidia-utils-580")
        assert f"Installed: {PINNED}" in policy and f"Candidate: {PINNED}" in policy and NEWER in policy
        assert ssh(node, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").split()[0] == "580.95.05"
        assert ssh(node, "systemctl is-active nvidia-persistenced").strip() == "active"
        assert ssh(node, "readlink -f /usr/local/cuda").strip() == "/usr/local/cuda-12.8"


def test_the_nvswitch_node_runs_the_fabric_manager_at_the_drivers_version(runs):
    rows = nvidia_packages(JAMMY)
    assert rows["nvidia-fabricmanager"][1:] == ("580.95.05-1", True)
    assert ssh(JAMMY, "systemctl is-active nvidia-fabricmanager").strip() == "active"
    assert "nvidia-fabricmanager" not in nvidia_packages(NOBLE)


def test_a_second_run_changes_nothing(runs):
    counts = play_recap(runs["second"].stdout)
    assert {n: counts[n]["changed"] for n in NODES} == dict.fromkeys(NODES, 0), runs["second"].stdout[-4000:]


def test_a_dist_upgrade_moves_nothing_of_the_driver(runs):
    for node in NODES:
        sim = ssh(node, "apt-get -s -o Debug::NoLocking=1 dist-upgrade")
        driver = set(nvidia_packages(node))
        moves = [line for line in sim.splitlines() if line.startswith(("Inst ", "Remv ", "Conf "))]
        assert not [m for m in moves if m.split()[1] in driver or "NVIDIA" in m], sim


def test_a_debian_version_on_ubuntu_is_refused_before_anything_changes(runs):
    before = ssh(NOBLE, "dpkg -l | sha256sum; cat /etc/apt/preferences.d/* | sha256sum")
    result = play(runs["inventory"], {"llmops_driver_version": "580.95.05-1"}, limit=NOBLE)
    assert result.returncode != 0
    assert (
        "llmops_driver_version 580.95.05-1 is a Debian package version, but Ubuntu 24.04's NVIDIA packages are "
        "versioned like '580.95.05-0ubuntu1'" in result.stdout
    )
    assert ssh(NOBLE, "dpkg -l | sha256sum; cat /etc/apt/preferences.d/* | sha256sum") == before


def test_the_driver_moves_to_a_newer_version_with_one_reboot_per_host(runs):
    # last: it changes the nodes. The simulated nodes are containers: the role reboots them only when asked.
    before = {n: boots(n) for n in NODES}
    result = play(runs["inventory"], {"llmops_driver_version": NEWER, "nvidia_driver_reboot_in_containers": True})
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert {n: boots(n) for n in NODES} == {n: before[n] + 1 for n in NODES}
    for node in NODES:
        driver = {p: r for p, r in nvidia_packages(node).items() if r[0] == "nvidia-graphics-drivers-580"}
        assert {v for _, v, _ in driver.values()} == {NEWER}, driver
        assert all(h for *_, h in driver.values()), driver
        assert ssh(node, "nvidia-smi --query-gpu=driver_version --format=csv,noheader").split()[0] == "580.105.08"
    assert nvidia_packages(JAMMY)["nvidia-fabricmanager"][1:] == ("580.105.08-1", True)
    assert ssh(JAMMY, "systemctl is-active nvidia-fabricmanager").strip() == "active"
