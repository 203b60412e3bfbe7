"""The driver stays exactly where it is pinned on a node whose NVIDIA repository carries a newer driver.

One node (gs4, 10.213.0.44: 8 x H100 behind NVSwitch, no driver) takes preflight and the driver stage from the
stand-in repository, which serves Debian's real package graph of the driver at 580.95.05 and 580.105.08 (and two
575 versions). The desktop set is installed on purpose: nvidia-open pulls nvidia-driver -> nvidia-driver-libs ->
libgl1-nvidia-glvnd-glx, libegl-nvidia0, ... each with an exact-version dependency, the chain that broke the
name-pattern pin (the compute-only default is a subset of it; molecule/gpu_stack checks that one).

Run: .venv/bin/pytest tests/integration/test_driver_pin_on_node.py -m node (root, under the nodes lock; ~5 min).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from _node_util import ROOT, VENV_BIN, booted, nvidia_packages, one_host_inventory, sim_node, stage_env
from events import PLAYBOOK_GUARD
from playbook_output import play_recap

NAME = os.environ.get("GS_PIN_NODE_NAME", "gs4")
IP = os.environ.get("GS_PIN_NODE_IP", "10.213.0.44")
PINNED = "580.95.05-1"
NEWER = "580.105.08-1"
EXTRA = {"nvidia_driver_package_set": "desktop", "nvidia_driver_fabricmanager": True}

pytestmark = pytest.mark.node


def ssh(command: str) -> str:
    return sim_node("ssh", NAME, command).stdout


def play(inventory: Path) -> subprocess.CompletedProcess:
    playbook = inventory / "driver.yml"
    cmd = [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory / "hosts.yml"), str(playbook), "--tags", "driver"]
    cmd += ["--diff"]
    cmd += ["-e", json.dumps(EXTRA)]
    return subprocess.run(
        cmd, capture_output=True, text=True, env=stage_env(), cwd=ROOT, timeout=PLAYBOOK_GUARD, check=False
    )


def recap(result: subprocess.CompletedProcess) -> dict:
    counts = play_recap(result.stdout)
    assert NAME in counts, result.stdout[-2000:]
    return counts[NAME]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    if os.geteuid() != 0 or shutil.which("systemd-nspawn") is None:
        pytest.skip("needs root and systemd-nspawn (simulated nodes)")
    with booted(NAME, IP, profile="h100-80gb-x8", driver="none", mirrors=True):
        inv = one_host_inventory(tmp_path_factory.mktemp("inventory"), NAME, IP)
        (inv / "driver.yml").write_text(
            f"- ansible.builtin.import_playbook: {ROOT}/playbooks/preflight.yml\n"
            f"- ansible.builtin.import_playbook: {ROOT}/playbooks/gpu_stack.yml\n"
        )
        first = play(inv)
        assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-2000:]
        second = play(inv)
        yield {"first": first, "second": second}


def installed():
    """[(package, source, version, held)] of every installed package built from an NVIDIA source package."""
    return [(p, *row) for p, row in nvidia_packages(NAME).items()]


def test_every_package_of_the_drivers_sources_is_installed_and_held_at_exactly_the_pinned_version(runs):
    pkgs = installed()
    driver = [p for p in pkgs if p[2].startswith("580.")]
    assert len(driver) >= 35, pkgs  # the desktop set: GL, EGL, Vulkan, VDPAU, X driver, CUDA, NVML, ...
    assert {v for _, _, v, _ in driver} == {PINNED}, [p for p in driver if p[2] != PINNED]
    assert all(h for *_, h in driver), [p for p in driver if not p[3]]
    names = {p for p, *_ in driver}
    assert {"libgl1-nvidia-glvnd-glx", "libegl-nvidia0", "nvidia-driver-libs", "nvidia-open"} <= names
    assert NEWER not in ssh("dpkg -l")


def test_the_newer_driver_is_there_but_apt_keeps_the_pinned_one(runs):
    policy = ssh("apt-cache policy libgl1-nvidia-glvnd-glx")
    assert f"Installed: {PINNED}" in policy
    assert f"Candidate: {PINNED}" in policy
    assert NEWER in policy  # the repository does offer the newer one


def test_the_fabric_manager_of_branch_580_is_installed_at_the_drivers_version(runs):
    out = ssh("dpkg-query -W -f='${Package} ${Version}\\n' 'nvidia-fabricmanager*'").split()
    assert out == ["nvidia-fabricmanager", PINNED]
    assert ssh("systemctl is-active nvidia-fabricmanager").strip() == "active"


def changed_tasks(result: subprocess.CompletedProcess) -> list[str]:
    task, out = None, []
    for line in result.stdout.splitlines():
        if line.startswith("TASK ["):
            task = line
        elif line.startswith(f"changed: [{NAME}]"):
            out.append(task)
        elif line.startswith(("+", "-")) and not line.startswith(("+++", "---")):
            out.append(line)
    return out


def test_a_second_run_changes_nothing(runs):
    assert recap(runs["second"])["changed"] == 0, changed_tasks(runs["second"])


def test_a_dist_upgrade_moves_nothing_of_the_driver(runs):
    # The node's Debian packages may have security updates since its image was built; nothing from NVIDIA's
    # repository, and no package of the driver's sources, may move.
    sim = ssh("apt-get -s -o Debug::NoLocking=1 dist-upgrade")
    driver = {p for p, *_ in installed()}
    moves = [line for line in sim.splitlines() if line.startswith(("Inst ", "Remv ", "Conf "))]
    assert not [m for m in moves if m.split()[1] in driver or "NVIDIA" in m], sim
