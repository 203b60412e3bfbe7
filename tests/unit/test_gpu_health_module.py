"""gpu_health, the module: run as Ansible runs it against the simulated GPUs (sim/gpu/nvidia-smi -q, sim/gpu/dmesg)
with faults planted through the fake's fault file, and the fake's -q output judged by the same parser."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import gpu_health as H
from ansible_collections.llmops.sglang.plugins.module_utils import gpu_health_parse as P
from tests.unit._module_run import run_module

ROOT = Path(__file__).resolve().parents[2]
SIM = ROOT / "sim" / "gpu"
# The Xid 79 line quoted in https://github.com/NVIDIA/NVSentinel/issues/155, planted in the fake kernel log.
XID79 = (Path(__file__).parent / "fixtures" / "gpu_health" / "dmesg-nvsentinel155-xid79.txt").read_text()


@pytest.fixture
def host(tmp_path, monkeypatch):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(SIM / "nvidia-smi")
    (bin_dir / "dmesg").symlink_to(SIM / "dmesg")
    (tmp_path / "driver").write_text("580.95.05\n")
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    monkeypatch.setenv("SIM_GPU_PROFILE", str(SIM / "profiles" / "h100-80gb-x8.json"))
    monkeypatch.setenv("SIM_GPU_DRIVER_FILE", str(tmp_path / "driver"))
    monkeypatch.setenv("SIM_GPU_LOADED_FILE", str(tmp_path / "loaded"))
    monkeypatch.setenv("SIM_GPU_FAULTS", str(tmp_path / "faults.json"))
    monkeypatch.setenv("SIM_GPU_KERNEL_LOG", str(tmp_path / "kernel.log"))
    (tmp_path / "kernel.log").write_text("[    0.000000] Linux version 6.1.0-28-amd64\n")

    def plant(faults=None, kernel_log=None, journalctl=None):
        if journalctl is not None:
            (bin_dir / "journalctl").write_text(journalctl)
            (bin_dir / "journalctl").chmod(0o755)
        (tmp_path / "faults.json").write_text(json.dumps(faults or {}))
        if kernel_log is not None:
            (tmp_path / "kernel.log").write_text(kernel_log)

    return plant


def fake_q():
    return subprocess.run([sys.executable, str(SIM / "nvidia-smi"), "-q"], capture_output=True, text=True,
                          check=True).stdout  # fmt: skip


def bad(result):
    return {(c["name"], c["gpu"]) for c in result["checks"] if c["severity"] == "critical"}


def test_a_healthy_nvswitch_host_passes_and_names_every_check(host):
    host()
    r = run_module("gpu_health", {"kernel_log": "dmesg", "under_load": True})
    assert not r.get("failed"), r.get("msg")
    assert r["changed"] is False and r["kernel_log_source"] == "dmesg"
    names = {c["name"] for c in r["checks"]}
    assert names >= {"persistence_mode", "pcie_link", "ecc_uncorrectable", "remapped_rows", "reset_required",
                     "clock_reasons", "temperature", "fabric", "xid"}  # fmt: skip
    assert r["summary"]["critical"] == 0 and len(r["gpus"]) == 8


def test_a_link_at_gen2_is_critical_under_load_and_ok_idle(host):
    host({"pcie_gen_current": {"3": 2}})
    r = run_module("gpu_health", {"kernel_log": "none", "under_load": True})
    assert r["failed"] and bad(r) == {("pcie_link", r["gpus"][3]["id"])}
    assert "expected the PCIe link at Gen5 x16 under load, found Gen2 x16" in r["msg"]
    idle = run_module("gpu_health", {"kernel_log": "none", "under_load": False})
    assert not idle.get("failed") and bad(idle) == set()


def test_a_pending_row_remap_fails_the_task(host):
    host({"remapped_rows_pending": [1]})
    r = run_module("gpu_health", {"kernel_log": "none"})
    assert r["failed"] and bad(r) == {("remapped_rows", r["gpus"][1]["id"])}
    assert "Pending: Yes" in r["msg"]


def test_an_xid_79_in_the_kernel_log_fails_the_task(host):
    host(kernel_log=XID79)
    r = run_module("gpu_health", {"kernel_log": "dmesg"})
    assert r["failed"] and bad(r) == {("xid", "PCI:0000:44:00")}
    assert "Xid 79" in r["msg"] and "fell off the bus" in r["msg"]


def test_a_fabric_not_completed_names_cuda_error_802(host):
    host({"fabric_state": {"0": "In Progress"}})
    r = run_module("gpu_health", {"kernel_log": "none"})
    assert r["failed"] and bad(r) == {("fabric", r["gpus"][0]["id"])}
    assert "error 802" in r["msg"]


def test_check_mode_reads_the_same_and_fail_on_never_only_reports(host):
    host({"ecc_uncorrectable": {"2": 3}})
    r = run_module("gpu_health", {"kernel_log": "none", "fail_on": "never"}, check_mode=True)
    assert not r.get("failed") and r["verdict"] == "critical"
    assert bad(r) == {("ecc_uncorrectable", r["gpus"][2]["id"])}


def test_fail_on_warning_fails_on_persistence_mode_off(host):
    host()
    r = run_module("gpu_health", {"kernel_log": "none", "fail_on": "warning"})
    assert r["failed"] and "expected persistence mode Enabled, found Disabled" in r["msg"]


def test_no_nvidia_smi_is_one_sentence(host):
    r = run_module("gpu_health", {"nvidia_smi": "/nonexistent/nvidia-smi"})
    assert r["failed"] and r["msg"].startswith("expected the nvidia-smi binary") and "Traceback" not in r["msg"]


@pytest.mark.parametrize(
    ("faults", "check", "index"),
    [({"pcie_gen_current": {"5": 2}}, "pcie_link", 5), ({"remapped_rows_pending": [6]}, "remapped_rows", 6),
     ({"fabric_state": {"7": "Not Started"}}, "fabric", 7), ({"clock_reasons": {"4": ["HW Slowdown"]}},
     "clock_reasons", 4), ({"ecc_uncorrectable": {"0": 1}}, "ecc_uncorrectable", 0)],
)  # fmt: skip
def test_the_parser_finds_each_fault_planted_in_the_fake(host, faults, check, index):
    host(faults)
    gpus = P.parse_smi_q(fake_q())
    assert len(gpus) == 8
    crit = [(c["name"], c["gpu"]) for c in H.verdict(gpus, under_load=True) if c["severity"] == "critical"]
    assert crit == [(check, gpus[index]["id"])]


def test_the_fake_without_faults_reads_as_the_real_h100_dump_does(host):
    host()
    fake = P.parse_smi_q(fake_q())[0]
    real_text = (Path(__file__).parent / "fixtures" / "gpu_health" / "smi-q-h100x8-535.183.01.txt").read_text()
    real = P.parse_smi_q(real_text)[0]
    keys = (
        "pcie_gen_max",
        "pcie_gen_current",
        "pcie_width_max",
        "pcie_width_current",
        "remapped_rows_pending",
        "ecc_uncorrectable_volatile",
        "fabric_state",
        "fabric_status",
        "clock_reasons_active",
        "name",
    )
    for key in keys:
        assert fake[key] == real[key], key


def test_auto_reads_journalctl_and_falls_back_to_dmesg_when_it_prints_nothing(host):
    sim_log = '#!/bin/sh\ncat "$SIM_GPU_KERNEL_LOG"\n'
    host(kernel_log=XID79, journalctl=sim_log)
    r = run_module("gpu_health", {"fail_on": "never"})
    assert r["kernel_log_source"] == "journalctl -k -b" and bad(r) == {("xid", "PCI:0000:44:00")}
    host(kernel_log=XID79, journalctl="#!/bin/sh\nexit 0\n")
    r = run_module("gpu_health", {"fail_on": "never"})
    assert r["kernel_log_source"] == "dmesg" and bad(r) == {("xid", "PCI:0000:44:00")}


def test_the_server_task_file_calls_the_module_with_options_it_takes():
    import yaml

    tasks = yaml.safe_load((ROOT / "roles" / "server" / "tasks" / "health.yml").read_text())
    [task] = [t for t in tasks if "llmops.sglang.gpu_health" in t]
    options = {"nvidia_smi", "under_load", "fail_on", "kernel_log", "timeout", "load_url", "load_model", "load_tokens"}
    assert set(task["llmops.sglang.gpu_health"]) <= options | {"load_timeout", "api_key_file", "api_key_name"}
    assert task["register"] == "server_gpu_health"
