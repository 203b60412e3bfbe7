"""Verifier for the default scenario: what site.yml leaves on a simulated 8 x RTX PRO 6000 node."""

import json
import os

import testinfra.utils.ansible_runner

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts("all")


def test_systemd_is_pid1(host):
    assert host.process.get(pid=1).comm == "systemd"


def test_simulated_gpus_answer(host):
    out = host.check_output("nvidia-smi -L")
    assert out.count("NVIDIA RTX PRO 6000 Blackwell Workstation Edition") == 8


def test_preflight_recorded_the_gpus(host):
    record = host.file("/var/lib/llmops-sglang/preflight.json")
    assert record.exists
    assert record.mode == 0o644
    data = json.loads(record.content_string)
    assert data["gpu_state"] == "present"
    assert data["gpu_count"] == 8
    assert data["sm_list"] == ["sm_120"]
    assert data["driver_version"] == "580.95.05"
    assert {g["memory_total_mib"] for g in data["gpus"]} == {97887}
    assert data["os"].startswith("Debian 12")
    # Volatile figures stay out of the record, or re-runs would never be idempotent.
    assert "memory_free_mib" not in data["gpus"][0]
