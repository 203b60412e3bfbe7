"""Preflight refuses what the GPUs cannot run, before any change, on a simulated node.

One node (gs1, 10.213.0.41: 8 x RTX PRO 6000 Blackwell, driver 580.95.05 so nvidia-smi reports sm_120) takes
playbooks/preflight.yml (and once playbooks/gpu_stack.yml) with different -e values. Each refusal must fail with a
message a user can act on and leave the node exactly as it was: the installed packages, /etc, /usr, /opt, apt's
state and /var/lib/llmops-sglang are fingerprinted before and after. A last run with the defaults passes and writes the
record, which shows the fingerprint does notice a change.

Run: .venv/bin/pytest tests/integration/test_preflight_refusals.py -m node (root; about 1 min).
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
    booted,
    nvidia_packages,
    one_host_inventory,
    sim_node,
    stage_env,
)
from events import PLAYBOOK_GUARD
from playbook_output import failed_tasks, play_recap

NAME = os.environ.get("GS_NODE_NAME", "gs1")
IP = os.environ.get("GS_NODE_IP", "10.213.0.41")

pytestmark = pytest.mark.node

# What a refusal must not touch. __pycache__ is left out: the node's python3 may compile stdlib modules that
# Ansible imports, which is not a change the play makes.
FINGERPRINT = r"""
set -e
{
  dpkg-query -W -f='${Package} ${Version} ${db:Status-Abbrev}\n'
  find /etc /usr /opt /var/lib/apt /var/lib/dpkg /var/lib/llmops-sglang -xdev -path '*/__pycache__' -prune \
       -o -printf '%p %y %s %m %T@\n' 2>/dev/null | sort
  cat /etc/apt/sources.list.d/* /etc/apt/preferences.d/* 2>/dev/null
} | sha256sum | cut -d' ' -f1
"""


def ssh(command: str) -> str:
    return sim_node("ssh", NAME, command).stdout


@pytest.fixture(scope="module")
def inventory(tmp_path_factory):
    if os.geteuid() != 0 or shutil.which("systemd-nspawn") is None:
        pytest.skip("needs root and systemd-nspawn (simulated nodes)")
    if not NAME.startswith("gs") or not IP.startswith("10.213.0.4"):
        pytest.skip("GPU-stack test nodes are named gs* and use 10.213.0.41-49")
    # the mirrors: the driver stage's refusal reads the stand-in of NVIDIA's repository index
    with booted(NAME, IP, profile="rtx-pro-6000-x8", driver="580.95.05", mirrors=True):
        yield one_host_inventory(tmp_path_factory.mktemp("inventory"), NAME, IP)


def play(inventory: Path, playbook: Path, extra: dict | None = None, options=()) -> subprocess.CompletedProcess:
    cmd = [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory / "hosts.yml"), *options, str(playbook)]
    if extra:
        cmd += ["-e", json.dumps(extra)]
    return subprocess.run(
        cmd, capture_output=True, text=True, env=stage_env(), cwd=ROOT, timeout=PLAYBOOK_GUARD, check=False
    )


def refused(inventory: Path, extra: dict | None = None, playbook: Path | None = None) -> str:
    before = ssh(FINGERPRINT)
    result = play(inventory, playbook or ROOT / "playbooks" / "preflight.yml", extra)
    assert result.returncode != 0, f"preflight accepted {extra}:\n{result.stdout[-3000:]}"
    assert ssh(FINGERPRINT) == before, f"the refused run changed the node ({extra})"
    assert ssh("test -e /var/lib/llmops-sglang && echo present || echo absent").strip() == "absent"
    return result.stdout


def test_cuda_12_4_on_sm120_is_refused(inventory):
    out = refused(inventory, {"llmops_cuda_versions": ["12.4"]})
    assert "nothing was changed" in out
    assert "RTX PRO 6000 Blackwell Workstation Edition (sm_120) needs CUDA >= 12.8 and open kernel modules" in out
    assert "you asked for CUDA 12.4 (llmops_cuda_versions). Ask for CUDA 12.8 or newer" in out


def test_proprietary_modules_on_blackwell_are_refused(inventory):
    out = refused(inventory, {"llmops_driver_flavor": "proprietary"})
    assert "(sm_120) needs CUDA >= 12.8 and open kernel modules" in out
    assert "you asked for llmops_driver_flavor: proprietary" in out
    assert "set llmops_driver_flavor: open (the default)" in out


def test_driver_branch_older_than_the_toolkit_needs_is_refused(inventory):
    out = refused(
        inventory,
        {"llmops_driver_branch": "575", "llmops_driver_version": "575.57.08-1", "llmops_cuda_versions": ["13.0"]},
    )
    assert "CUDA 13.0 needs driver branch >= 580; you asked for llmops_driver_branch 575" in out
    assert "or keep branch 575 with CUDA 12.9 or older" in out


def test_unsupported_operating_system_is_refused(inventory, tmp_path):
    # The real role on the real node, with the distribution facts replaced after gathering (cacheable set_fact
    # writes ansible_facts), as a Rocky Linux 9 host would report them.
    playbook = tmp_path / "fake_os.yml"
    playbook.write_text(
        "- name: Preflight on a host that reports Rocky Linux 9\n"
        "  hosts: gpu_servers\n"
        "  gather_facts: true\n"
        "  tasks:\n"
        "    - name: Pretend to be Rocky Linux 9.4\n"
        "      ansible.builtin.set_fact:\n"
        "        distribution: Rocky\n"
        "        distribution_major_version: '9'\n"
        "        distribution_version: '9.4'\n"
        "        os_family: RedHat\n"
        "        cacheable: true\n"
        "    - name: Run preflight\n"
        "      ansible.builtin.include_role:\n"
        "        name: llmops.sglang.preflight\n"
    )
    out = refused(inventory, playbook=playbook)
    assert "Rocky 9.4 is not supported" in out
    assert "Debian 12 (tested), Ubuntu 22.04 and Ubuntu 24.04" in out


def test_a_driver_version_the_repository_lacks_is_refused_before_the_driver_stage_changes_anything(inventory):
    # The driver stage alone (as `site.yml --tags driver` runs it after preflight): the version is well formed and on
    # its branch, but the stand-in of NVIDIA's repository, served from the control node, does not have it.
    out = refused(inventory, {"llmops_driver_version": "580.95.06-1"}, playbook=ROOT / "playbooks" / "gpu_stack.yml")
    fatal = [line for line in out.splitlines() if line.startswith("fatal: [")]
    assert len(fatal) == 1, out[-3000:]
    assert "Check that the repository has every package at the version asked for" in out
    assert "Expected driver 580.95.06-1 in NVIDIA's repository at http" in fatal[0]
    assert (
        "it lacks nvidia-driver-cuda 580.95.06-1 (it has 575.57.08-1, 575.64.05-1, 580.95.05-1, 580.105.08-1)"
        in fatal[0]
    )
    assert "nothing was changed" in fatal[0]
    assert "or point nvidia_repo_url at a repository that has them." in fatal[0]


def test_a_whole_site_yml_in_check_mode_on_the_bare_node_exits_0_and_changes_nothing(inventory):
    # What an operator tries first on a new server: every stage in check mode, from a node that has no NVIDIA package,
    # no venv, no model and no record yet. Each stage reports what it would do; none may fail for what an earlier
    # stage would have installed, and the node must be exactly as it was.
    before = ssh(FINGERPRINT)
    result = play(inventory, ROOT / "site.yml", options=("--check",))
    assert result.returncode == 0, failed_tasks(result.stdout) + "\n" + result.stdout[-3000:]
    recap = play_recap(result.stdout)[NAME]
    assert recap["failed"] == 0 and recap["unreachable"] == 0
    assert recap["changed"] > 0  # it reports the install it would make
    # the stages that read what the GPU stack installs say why they are not predicted, instead of failing on its absence
    out = result.stdout
    assert f"Dry run: build is not predicted on {NAME}: it needs what gpu_stack would install first." in out
    assert f"Dry run: server is not predicted on {NAME}: it needs what gpu_stack and build would install first." in out
    assert "TASK [llmops.sglang.model : " in out  # the model stage needs neither: it is predicted
    assert ssh(FINGERPRINT) == before, "site.yml --check changed the node"
    assert not nvidia_packages(NAME), "site.yml --check installed NVIDIA packages"


def test_the_defaults_pass_and_only_then_preflight_writes_its_record(inventory):
    before = ssh(FINGERPRINT)
    result = play(inventory, ROOT / "playbooks" / "preflight.yml")
    assert result.returncode == 0, result.stdout[-3000:]
    assert ssh(FINGERPRINT) != before
    record = json.loads(ssh("cat /var/lib/llmops-sglang/preflight.json"))
    assert record["sm_list"] == ["sm_120"]
    assert record["gpu_source"] == "nvidia-smi"
    assert record["requested"] == {
        "llmops_driver_branch": "580",
        "llmops_driver_version": "580.95.05-1",
        "llmops_driver_flavor": "open",
        "llmops_cuda_versions": ["12.8"],
    }
    assert record["torch_cuda_variants"] == ["cu128"]
