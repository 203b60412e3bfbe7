"""gpu_tuning, the module, run as Ansible runs it (JSON arguments on standard input) against a fake host: the
simulated nvidia-smi (sim/gpu), a sysfs tree for nvidia_uvm and the IOMMU groups in a temporary directory, and a
fake modprobe that loads and unloads that tree's nvidia_uvm the way the kernel module's parameter behaves (read at
load time from the modprobe.d file, shown as Y or N, not unloadable while in use)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import host_tuning as T

ROOT = Path(__file__).resolve().parents[2]
SIM = ROOT / "sim" / "gpu"
RTX = [{"compute_capability": "12.0", "sm": "sm_120"}] * 8
H100 = [{"compute_capability": "9.0", "sm": "sm_90"}] * 8

# The fake modprobe: `-r nvidia_uvm` removes the module's sysfs directory unless refcnt says it is used; `nvidia_uvm`
# creates it with the option's value from the conf file the test names (the kernel's default, N, without one).
FAKE_MODPROBE = r"""#!/usr/bin/env python3
import os, sys, shutil
uvm, conf = os.environ["FAKE_UVM"], os.environ["FAKE_UVM_CONF"]
args = sys.argv[1:]
with open(os.environ["FAKE_MODPROBE_LOG"], "a") as log:
    log.write(" ".join(args) + "\n")
if args == ["-r", "nvidia_uvm"]:
    try:
        used = int(open(os.path.join(uvm, "refcnt")).read())
    except OSError:
        sys.exit(0)
    if used:
        print("modprobe: FATAL: Module nvidia_uvm is in use.", file=sys.stderr)
        sys.exit(1)
    shutil.rmtree(uvm)
    sys.exit(0)
if args == ["nvidia_uvm"]:
    value = "N"
    try:
        if "uvm_disable_hmm=1" in open(conf).read():
            value = "Y"
    except OSError:
        pass
    os.makedirs(os.path.join(uvm, "parameters"), exist_ok=True)
    open(os.path.join(uvm, "parameters", "uvm_disable_hmm"), "w").write(value + "\n")
    open(os.path.join(uvm, "refcnt"), "w").write("0\n")
    sys.exit(0)
sys.exit(2)
"""


class Host:
    def __init__(self, tmp: Path, profile: str):
        self.tmp = tmp
        self.bin = tmp / "bin"
        self.bin.mkdir()
        (self.bin / "nvidia-smi").symlink_to(SIM / "nvidia-smi")
        (self.bin / "modprobe").write_text(FAKE_MODPROBE)
        (self.bin / "modprobe").chmod(0o755)
        (tmp / "driver").write_text("580.95.05\n")
        self.uvm = tmp / "sys" / "module" / "nvidia_uvm"
        self.groups = tmp / "sys" / "kernel" / "iommu_groups"
        self.cmdline = tmp / "cmdline"
        self.cmdline.write_text("BOOT_IMAGE=/vmlinuz-6.8.0-49-generic root=/dev/sda2 ro quiet splash\n")
        self.conf = tmp / "etc" / "modprobe.d" / "llmops-nvidia-uvm.conf"
        self.log = tmp / "modprobe.log"
        self.log.write_text("")
        self.env = dict(
            os.environ,
            PYTHONPATH=str(ROOT),
            PATH=f"{self.bin}:{os.environ['PATH']}",
            SIM_GPU_PROFILE=str(SIM / "profiles" / profile),
            SIM_GPU_DRIVER_FILE=str(tmp / "driver"),
            SIM_GPU_LOADED_FILE=str(tmp / "loaded"),
            SIM_GPU_USAGE_DIR=str(tmp / "used"),
            FAKE_UVM=str(self.uvm),
            FAKE_UVM_CONF=str(self.conf),
            FAKE_MODPROBE_LOG=str(self.log),
        )

    def load_uvm(self, value: str, refcnt: int):
        (self.uvm / "parameters").mkdir(parents=True, exist_ok=True)
        (self.uvm / "parameters" / "uvm_disable_hmm").write_text(value + "\n")
        (self.uvm / "refcnt").write_text(f"{refcnt}\n")

    def iommu(self, *types: str):
        self.groups.mkdir(parents=True, exist_ok=True)
        for i, t in enumerate(types):
            (self.groups / str(i)).mkdir()
            (self.groups / str(i) / "type").write_text(t + "\n")

    def run(self, check_mode=False, **args) -> dict:
        args = {"conf_path": str(self.conf), **args, "_ansible_check_mode": check_mode}
        code = (
            "import sys\n"
            "from ansible_collections.llmops.sglang.plugins.modules import gpu_tuning as m\n"
            f"m.PATHS.update(uvm={str(self.uvm)!r}, iommu_groups={str(self.groups)!r}, cmdline={str(self.cmdline)!r},"
            f" pci_devices={str(self.tmp / 'sys' / 'bus' / 'pci' / 'devices')!r})\n"
            "m.main()\n"
        )
        p = subprocess.run([sys.executable, "-c", code], input=json.dumps({"ANSIBLE_MODULE_ARGS": args}),
                           capture_output=True, text=True, env=self.env, cwd=ROOT, timeout=60, check=False)  # fmt: skip
        assert p.stdout, p.stderr[-2000:]
        return json.loads(p.stdout)


@pytest.fixture
def rtx(tmp_path):
    return Host(tmp_path, "rtx-pro-6000-x8.json")


@pytest.fixture
def h100(tmp_path):
    return Host(tmp_path, "h100-80gb-x8.json")


def by_check(result):
    return {f["check"]: f for f in result["findings"]}


def test_a_pcie_only_blackwell_host_gets_hmm_off_in_one_file_and_a_rerun_changes_nothing(rtx):
    first = rtx.run(gpus=RTX)
    assert first["changed"] is True and first["hmm"]["file"] == "written" and first["hmm"]["action"] == "none"
    assert rtx.conf.read_text() == T.conf_text(True)
    assert oct(rtx.conf.stat().st_mode & 0o777) == "0o644"
    assert "options nvidia_uvm uvm_disable_hmm=1" in rtx.conf.read_text().splitlines()
    assert first["pcie_only"] is True
    found = by_check(first)
    assert found["uvm_hmm"]["severity"] == "ok" and "not loaded" in found["uvm_hmm"]["found"]
    assert found["pcie_peers"]["found"] == "PCIe only (no NVLink)"
    assert found["bar1"]["severity"] == "ok"  # the simulated GPUs' BAR1 covers their memory
    again = rtx.run(gpus=RTX)
    assert again["changed"] is False and again["hmm"]["file"] == "unchanged"
    assert rtx.log.read_text() == ""  # nvidia_uvm was never loaded: nothing to unload


def test_an_nvlink_host_keeps_the_drivers_default_and_gets_no_file(h100):
    result = h100.run(gpus=H100)
    assert result["changed"] is False and result["hmm"]["disable"] is False
    assert not h100.conf.exists()
    assert result["pcie_only"] is False
    assert by_check(result)["pcie_peers"]["found"] == "NVLink between the GPUs"
    assert result["severity"] == "ok"


def test_check_mode_reports_the_file_and_writes_nothing(rtx):
    result = rtx.run(check_mode=True, gpus=RTX)
    assert result["changed"] is True and result["hmm"]["file"] == "written"
    assert not rtx.conf.exists()


def test_an_unused_loaded_module_is_loaded_again_with_the_option_and_its_value_read_back(rtx):
    rtx.load_uvm("N", refcnt=0)
    result = rtx.run(gpus=RTX)
    assert result["changed"] is True and result["hmm"]["action"] == "reloaded"
    assert result["hmm"]["live"] is True
    assert rtx.log.read_text().splitlines() == ["-r nvidia_uvm", "nvidia_uvm"]
    assert (rtx.uvm / "parameters" / "uvm_disable_hmm").read_text().strip() == "Y"
    again = rtx.run(gpus=RTX)
    assert again["changed"] is False and again["hmm"]["action"] == "none"


def test_a_module_in_use_is_left_alone_and_the_option_is_reported_pending(rtx):
    rtx.load_uvm("N", refcnt=3)  # a serving SGLang holds it
    result = rtx.run(gpus=RTX)
    assert result["hmm"]["action"] == "pending" and result["hmm"]["file"] == "written"
    assert rtx.log.read_text() == ""  # not even tried: nothing running is touched
    hmm = by_check(result)["uvm_hmm"]
    assert hmm["severity"] == "warning" and "next loaded" in hmm["action"]
    assert result["severity"] == "warning"


def test_another_file_that_sets_the_option_back_is_named(rtx):
    rtx.load_uvm("N", refcnt=0)
    rtx.conf.parent.mkdir(parents=True)
    rtx.env["FAKE_UVM_CONF"] = str(rtx.tmp / "other.conf")  # the fake loads from a file that says nothing
    result = rtx.run(gpus=RTX)
    hmm = by_check(result)["uvm_hmm"]
    assert hmm["severity"] == "warning" and "another file sets the option" in hmm["found"]


def test_false_removes_the_roles_file_and_leaves_a_value_set_elsewhere_alone(rtx):
    rtx.run(gpus=RTX)
    rtx.load_uvm("Y", refcnt=0)  # loaded with HMM off
    result = rtx.run(gpus=RTX, disable_hmm="false")
    assert result["hmm"]["file"] == "removed" and not rtx.conf.exists()
    assert result["hmm"]["action"] == "reloaded" and result["hmm"]["live"] is False
    rtx.load_uvm("Y", refcnt=0)  # now set by some other file: not the role's business
    again = rtx.run(gpus=RTX, disable_hmm="false")
    assert again["changed"] is False and again["hmm"]["action"] == "none"


def test_a_translating_iommu_on_a_pcie_only_host_is_a_warning_with_what_to_do(rtx):
    rtx.iommu("DMA-FQ", "DMA-FQ", "identity")
    result = rtx.run(gpus=RTX)
    iommu = by_check(result)["iommu_acs"]
    assert iommu["severity"] == "warning" and "the IOMMU translates DMA" in iommu["found"]
    assert "iommu=pt" in iommu["action"] and "never changes the kernel command line" in iommu["action"]


def test_the_gpus_own_groups_decide_over_other_devices_groups(rtx):
    rtx.iommu("DMA", "identity")  # group 0: some other device, translated; group 1: the GPUs, passthrough
    devices = rtx.tmp / "sys" / "bus" / "pci" / "devices"
    for bus in ("01", "11", "21", "31", "41", "51", "61", "71"):
        (devices / f"0000:{bus}:00.0").mkdir(parents=True)
        (devices / f"0000:{bus}:00.0" / "iommu_group").symlink_to(rtx.groups / "1")
    iommu = by_check(rtx.run(gpus=RTX))["iommu_acs"]
    assert iommu["found"] == "IOMMU passthrough; ACS not read"


def test_passthrough_groups_are_fine(rtx):
    rtx.iommu("identity", "identity")
    iommu = by_check(rtx.run(gpus=RTX))["iommu_acs"]
    assert iommu["severity"] == "info"  # ACS not read: the fake host has no lspci
    assert iommu["found"] == "IOMMU passthrough; ACS not read"


def test_a_host_whose_driver_does_not_answer_gets_the_file_and_no_path_report(rtx):
    (rtx.tmp / "driver").unlink()
    result = rtx.run(gpus=RTX)
    assert result["hmm"]["file"] == "written" and result["pcie_only"] is None
    assert by_check(result)["pcie_peers"]["found"] == "not read"


@pytest.mark.parametrize("value", ["sometimes", "1", ""])
def test_a_setting_that_is_not_a_choice_is_refused_in_one_line_and_nothing_is_written(rtx, value):
    result = rtx.run(gpus=RTX, disable_hmm=value)
    assert result["failed"] is True and not rtx.conf.exists()
    assert result["msg"].startswith("nvidia_driver_disable_hmm: expected auto, true or false, found")
    assert "\n" not in result["msg"] and "Traceback" not in json.dumps(result)
