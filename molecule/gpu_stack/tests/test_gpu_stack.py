"""Verifier for gpu_stack: what preflight + playbooks/gpu_stack.yml leave on bare simulated nodes.

gs2: RTX PRO 6000 x8, CUDA 12.8 and 13.0 (12.8 the default). gs3: H100 x8 behind NVSwitch, fabric manager, CUDA 12.8.
"""

import os

import pytest
import testinfra.utils.ansible_runner

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts("all")

DRIVER = "580.95.05"
PINNED = "580.95.05-1"
DRIVER_PACKAGES = ["nvidia-open", "nvidia-driver", "nvidia-kernel-open-dkms", "nvidia-persistenced"]
NVCC = {"12.8": "V12.8.93", "13.0": "V13.0.88"}


def toolkits(host):
    return ["12.8", "13.0"] if host.backend.get_hostname() == "gs2" else ["12.8"]


@pytest.mark.parametrize("name", DRIVER_PACKAGES)
def test_driver_packages_are_at_the_pinned_version(host, name):
    pkg = host.package(name)
    assert pkg.is_installed
    assert pkg.version == PINNED


@pytest.mark.parametrize("name", ["nvidia-open", "nvidia-persistenced"])
def test_driver_packages_are_held(host, name):
    assert host.check_output(f"dpkg --get-selections {name}").split() == [name, "hold"]


def test_apt_pins_the_driver_and_forbids_the_metapackages(host):
    pref = host.file("/etc/apt/preferences.d/llmops-nvidia-driver.pref")
    assert pref.contains(f"Pin: version {PINNED}")
    assert pref.contains("Pin-Priority: 1001")
    assert pref.contains("Pin-Priority: -1")
    # apt itself says so: the candidate is the pinned version, and cuda-drivers cannot be installed.
    policy = host.check_output("apt-cache policy nvidia-driver")
    assert f"Candidate: {PINNED}" in policy
    assert "Candidate: (none)" in host.check_output("apt-cache policy cuda-drivers")
    assert "Candidate: (none)" in host.check_output("apt-cache policy cuda")


def test_driver_is_kept_out_of_unattended_upgrades(host):
    conf = host.file("/etc/apt/apt.conf.d/51llmops-nvidia-driver")
    assert conf.contains("Unattended-Upgrade::Package-Blacklist")
    out = host.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    assert '"nvidia-"' in out


@pytest.mark.parametrize("name", ["cuda", "cuda-drivers", "cuda-drivers-580", "cuda-12-8", "cuda-13-0"])
def test_no_driver_replacing_metapackage_is_installed(host, name):
    assert not host.package(name).is_installed


def test_no_proprietary_kernel_modules(host):
    assert not host.package("nvidia-kernel-dkms").is_installed
    assert host.file("/usr/lib/sim-gpu/kernel-module-flavor").content_string.strip() == "open"


def test_nouveau_is_blacklisted(host):
    conf = host.file("/etc/modprobe.d/llmops-blacklist-nouveau.conf")
    assert conf.contains("^blacklist nouveau$")
    assert conf.contains("^options nouveau modeset=0$")


def test_persistenced_is_enabled_and_running(host):
    svc = host.service("nvidia-persistenced")
    assert svc.is_enabled
    assert svc.is_running
    assert "Enabled" in host.check_output("nvidia-smi --query-gpu=persistence_mode --format=csv,noheader")


def test_nvidia_smi_reports_the_pinned_driver(host):
    versions = set(host.check_output("nvidia-smi --query-gpu=driver_version --format=csv,noheader").split())
    assert versions == {DRIVER}


def test_fabric_manager_only_with_nvswitch(host):
    fm = host.package("nvidia-fabricmanager")
    if host.backend.get_hostname() == "gs3":
        assert fm.is_installed
        assert fm.version == PINNED
        assert host.check_output("dpkg --get-selections nvidia-fabricmanager").split()[1] == "hold"
        svc = host.service("nvidia-fabricmanager")
        assert svc.is_enabled
        assert svc.is_running
    else:
        assert not fm.is_installed


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
