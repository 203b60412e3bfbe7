"""Verifier for gpu_stack: what preflight + playbooks/gpu_stack.yml leave on bare simulated nodes.

gs2: RTX PRO 6000 x8, driver 580.95.05, CUDA 12.8 and 13.0 (12.8 the default). gs3: H100 x8 behind NVSwitch,
driver 575.57.08 with its fabric manager (nvidia-fabricmanager-575), CUDA 12.8. Both get NVIDIA's compute-only set,
from a stand-in repository that also serves a newer version of each branch (580.105.08, 575.64.05).
"""

import json
import os
import re

import pytest
import testinfra.utils.ansible_runner

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts("all")

DRIVERS = {"gs2": "580.95.05", "gs3": "575.57.08"}
NEWER = {"gs2": "580.105.08-1", "gs3": "575.64.05-1"}
DRIVER_PACKAGES = ["nvidia-driver-cuda", "nvidia-kernel-open-dkms", "nvidia-persistenced", "libcuda1", "nvidia-smi"]
NVCC = {"12.8": "V12.8.93", "13.0": "V13.0.88"}


def driver(host):
    return DRIVERS[host.backend.get_hostname()]


def pinned(host):
    return driver(host) + "-1"


def nvidia_packages(host):
    """{package: (version, selection)} of every installed package built from an NVIDIA source package."""
    out = host.check_output("dpkg-query -W -f='${Package} ${source:Package} ${Version} ${db:Status-Abbrev}\\n'")
    # dpkg names a Multi-Arch: same package with its architecture ("libcuda1:amd64"); ${Package} does not.
    selections = host.check_output("dpkg --get-selections | awk '$2 == \"hold\" {print $1}'").split()
    held = {name.split(":")[0] for name in selections}
    rows = [line.split() for line in out.splitlines()]
    return {r[0]: (r[2], r[0] in held) for r in rows if len(r) >= 4 and r[3][1:2] == "i" and "nvidia" in r[1]}


def toolkits(host):
    return ["12.8", "13.0"] if host.backend.get_hostname() == "gs2" else ["12.8"]


@pytest.mark.parametrize("name", DRIVER_PACKAGES)
def test_the_compute_only_set_is_at_the_pinned_version(host, name):
    pkg = host.package(name)
    assert pkg.is_installed
    assert pkg.version == pinned(host)


def test_every_package_of_the_drivers_sources_is_pinned_and_held(host):
    pkgs = {p: vh for p, vh in nvidia_packages(host).items() if vh[0].startswith(driver(host).split(".")[0] + ".")}
    assert len(pkgs) >= 12, pkgs
    assert {v for v, _ in pkgs.values()} == {pinned(host)}
    assert all(h for _, h in pkgs.values()), pkgs
    assert NEWER[host.backend.get_hostname()] not in host.check_output("dpkg -l")


def test_no_desktop_packages_on_a_compute_server(host):
    for name in ("nvidia-driver", "nvidia-open", "libgl1-nvidia-glvnd-glx", "xserver-xorg-video-nvidia"):
        assert not host.package(name).is_installed, name


def test_apt_pins_the_driver_and_forbids_the_metapackages(host):
    pref = host.file("/etc/apt/preferences.d/llmops-nvidia-driver.pref")
    assert pref.contains("^Package: src:\\*nvidia\\*:any src:cuda-compat:any$")
    assert pref.contains(f"Pin: version {pinned(host)}")
    assert pref.contains("Pin-Priority: 1001")
    assert pref.contains("Pin-Priority: -1")
    # apt itself says so: the candidate is the pinned version although a newer one is offered, also for a package
    # of the driver's sources that is not installed, and cuda-drivers cannot be installed.
    for name in ("nvidia-driver-cuda", "libgl1-nvidia-glvnd-glx"):
        policy = host.check_output(f"apt-cache policy {name}")
        assert f"Candidate: {pinned(host)}" in policy
        assert NEWER[host.backend.get_hostname()] in policy
    assert "Candidate: (none)" in host.check_output("apt-cache policy cuda-drivers")
    assert "Candidate: (none)" in host.check_output("apt-cache policy cuda")


def test_driver_is_kept_out_of_unattended_upgrades(host):
    conf = host.file("/etc/apt/apt.conf.d/51llmops-nvidia-driver")
    assert conf.contains("Unattended-Upgrade::Package-Blacklist")
    out = host.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    # apt-config prints each entry as the role wrote it: an anchored regex with '-' escaped ("^nvidia\\-smi$").
    entries = {e.replace("\\", "") for e in re.findall(r'Package-Blacklist:: "([^"]*)";', out)}
    assert "^nvidia-smi$" in entries, entries
    assert "^libcuda1$" in entries, entries


METAPACKAGES = ["cuda", "cuda-drivers", "cuda-drivers-580", "cuda-drivers-575", "cuda-12-8", "cuda-13-0"]


@pytest.mark.parametrize("name", METAPACKAGES)
def test_no_driver_replacing_metapackage_is_installed(host, name):
    assert not host.package(name).is_installed


def test_no_proprietary_kernel_modules(host):
    assert not host.package("nvidia-kernel-dkms").is_installed
    assert host.file("/usr/lib/sim-gpu/kernel-module-flavor").content_string.strip() == "open"


def test_nouveau_is_blacklisted(host):
    conf = host.file("/etc/modprobe.d/llmops-blacklist-nouveau.conf")
    assert conf.contains("^blacklist nouveau$")
    assert conf.contains("^options nouveau modeset=0$")


def test_hmm_is_off_for_nvidia_uvm_on_the_pcie_only_blackwell_host_only(host):
    conf = host.file("/etc/modprobe.d/llmops-nvidia-uvm.conf")
    record = json.loads(host.file("/var/lib/llmops-sglang/driver.json").content_string)
    if host.backend.get_hostname() == "gs2":  # 8 x RTX PRO 6000: no NVLink, peers over PCIe
        assert conf.exists and conf.mode == 0o644 and conf.user == "root"
        assert conf.contains("^options nvidia_uvm uvm_disable_hmm=1$")
        assert record["uvm_disable_hmm"] is True
    else:  # H100 behind NVSwitch: the driver's default, no file
        assert not conf.exists
        assert record["uvm_disable_hmm"] is False


def test_persistenced_is_enabled_and_running(host):
    svc = host.service("nvidia-persistenced")
    assert svc.is_enabled
    assert svc.is_running
    assert "Enabled" in host.check_output("nvidia-smi --query-gpu=persistence_mode --format=csv,noheader")


def test_nvidia_smi_reports_the_pinned_driver(host):
    versions = set(host.check_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader").split())
    assert versions == {driver(host)}


def test_fabric_manager_only_with_nvswitch_under_the_branchs_name(host):
    fm = host.package("nvidia-fabricmanager-575")
    if host.backend.get_hostname() == "gs3":
        assert fm.is_installed
        assert fm.version == pinned(host)
        assert not host.package("nvidia-fabricmanager").is_installed
        assert host.check_output("dpkg --get-selections nvidia-fabricmanager-575").split()[1] == "hold"
        svc = host.service("nvidia-fabricmanager")
        assert svc.is_enabled
        assert svc.is_running
    else:
        assert not fm.is_installed
        assert not host.package("nvidia-fabricmanager").is_installed


def test_each_toolkit_nvcc_reports_its_release(host):
    for version in toolkits(host):
        out = host.check_output(f"/usr/local/cuda-{version}/bin/nvcc --version")
        assert f"Cuda compilation tools, release {version}, {NVCC[version]}" in out
        assert host.package(f"cuda-toolkit-{version.replace('.', '-')}").is_installed


def test_cuda_default_is_12_8(host):
    assert host.file("/usr/local/cuda").linked_to == "/usr/local/cuda-12.8"
    out = host.check_output("bash -lc 'nvcc --version; echo CUDA_HOME=$CUDA_HOME; echo LD=$LD_LIBRARY_PATH'")
    assert "release 12.8, V12.8.93" in out
    assert "CUDA_HOME=/usr/local/cuda-12.8" in out
    assert "LD=/usr/local/cuda-12.8/lib64" in out


def test_profile_script(host):
    script = host.file("/etc/profile.d/cuda.sh")
    assert script.mode == 0o644
    assert script.contains("^export CUDA_HOME=/usr/local/cuda-12.8$")
    text = script.content_string
    assert 'export PATH="${CUDA_HOME}/bin${PATH:+:${PATH}}"' in text
    assert 'export LD_LIBRARY_PATH="${CUDA_HOME}/lib64${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"' in text
