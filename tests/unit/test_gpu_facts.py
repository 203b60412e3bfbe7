# ruff: noqa: E501  (captured nvidia-smi rows are kept verbatim)
"""gpu_facts: parsing of captured nvidia-smi outputs, state classification, and the module end to end."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.llmops.sglang.plugins.module_utils.gpu_inventory import (
    GpuQueryError,
    classify_failure,
    parse_query_csv,
    read_pci_gpus,
    read_pci_ids,
    sm_string,
    summarize,
)

ROOT = Path(__file__).resolve().parents[2]
ANSWERS = yaml.safe_load((Path(__file__).parent / "fixtures" / "nvidia_smi_answers.yml").read_text())
MODULE = ROOT / "plugins" / "modules" / "gpu_facts.py"
FAKE_SMI = ROOT / "sim" / "gpu" / "nvidia-smi"

# Captured from `nvidia-smi --query-gpu=index,name,uuid,memory.total,memory.used,memory.free,compute_cap,
# driver_version,pci.bus_id --format=csv,noheader,nounits` (first two rows of an 8-GPU host shown per case).
RTX_PRO_6000 = """\
0, NVIDIA RTX PRO 6000 Blackwell Workstation Edition, GPU-5c1a9d2e-8d1b-4f4e-9a0e-1f2b3c4d5e6f, 97887, 3, 97375, 12.0, 580.95.05, 00000000:01:00.0, Disabled
1, NVIDIA RTX PRO 6000 Blackwell Workstation Edition, GPU-6d2b0e3f-9e2c-405f-8b1f-2a3c4d5e6f70, 97887, 3, 97375, 12.0, 580.95.05, 00000000:21:00.0, Disabled
"""
H100_MIXED = """\
0, NVIDIA H100 80GB HBM3, GPU-0a, 81559, 0, 81004, 9.0, 575.57.08, 00000000:18:00.0, Disabled
1, NVIDIA A100-SXM4-80GB, GPU-0b, 81920, 0, 81500, 8.0, 575.57.08, 00000000:2A:00.0, Disabled
"""


def test_parses_blackwell_rows():
    gpus = parse_query_csv(RTX_PRO_6000)
    assert len(gpus) == 2
    g = gpus[0]
    assert g["name"] == "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    assert g["memory_total_mib"] == 97887
    assert g["memory_free_mib"] == 97375
    assert g["compute_capability"] == "12.0"
    assert g["sm"] == "sm_120"
    assert g["architecture"] == "Blackwell"
    assert g["driver_version"] == "580.95.05"
    assert gpus[1]["pci_bus_id"] == "00000000:21:00.0"


def test_summary_of_a_mixed_host_sorts_architectures_and_takes_the_smallest_memory():
    s = summarize(parse_query_csv(H100_MIXED))
    assert s["count"] == 2
    assert s["sm_list"] == ["sm_80", "sm_90"]
    assert s["arch_list"] == ["80", "90"]
    assert s["min_memory_total_mib"] == 81559
    assert s["driver_branch"] == 575
    assert s["homogeneous"] is False


def test_summary_without_gpus_is_empty_not_an_error():
    s = summarize([])
    assert s["count"] == 0
    assert s["driver_version"] is None
    assert s["sm_list"] == []


@pytest.mark.parametrize(("cap", "sm"), [("12.0", "sm_120"), ("9.0", "sm_90"), ("8.6", "sm_86"), ("10.3", "sm_103")])
def test_sm_string(cap, sm):
    assert sm_string(cap) == sm


def test_malformed_rows_are_refused_with_the_line():
    with pytest.raises(GpuQueryError, match="has 3 fields"):
        parse_query_csv("0, NVIDIA X, GPU-1\n")
    with pytest.raises(GpuQueryError, match=r"memory\.total='12 GB', not a number"):
        parse_query_csv("0, N, U, 12 GB, 0, 0, 9.0, 575.57.08, 0000:01:00.0, [N/A]\n")
    with pytest.raises(GpuQueryError, match="has no GPU index"):
        parse_query_csv("GPU 0, N, U, 1, 0, 0, 9.0, 575.57.08, 0000:01:00.0, [N/A]\n")


@pytest.mark.parametrize(
    ("rc", "text", "state"),
    [
        (
            9,
            "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
            "Make sure that the latest NVIDIA driver is installed and running.",
            "no_driver",
        ),
        (6, "No devices were found", "no_gpu"),
        (
            18,
            "Failed to initialize NVML: Driver/library version mismatch\nNVML library version: 580.95",
            "driver_mismatch",
        ),
        (255, "Segmentation fault", "error"),
    ],
)
def test_failure_states(rc, text, state):
    assert classify_failure(rc, text) == state


def run_module(tmp_path, args, env):
    argfile = tmp_path / "args.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    full_env = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    proc = subprocess.run(
        [sys.executable, str(MODULE), str(argfile)], capture_output=True, text=True, env=full_env, check=False
    )
    return proc.returncode, json.loads(proc.stdout)


@pytest.fixture
def driver_files(tmp_path):
    version = tmp_path / "driver-version"
    version.write_text("580.95.05\n")
    return {"SIM_GPU_DRIVER_FILE": str(version), "SIM_GPU_LOADED_FILE": str(tmp_path / "loaded")}


def test_module_reports_eight_blackwell_gpus(tmp_path, driver_files):
    env = {"SIM_GPU_PROFILE": str(ROOT / "sim/gpu/profiles/rtx-pro-6000-x8.json"), **driver_files}
    rc, res = run_module(tmp_path, {"nvidia_smi": str(FAKE_SMI)}, env)
    assert rc == 0, res
    assert res["changed"] is False
    assert res["gpu_state"] == "present"
    assert res["gpu_count"] == 8
    assert res["sm_list"] == ["sm_120"]
    assert {g["memory_total_mib"] for g in res["gpus"]} == {97887}
    assert res["message"].startswith("8 x NVIDIA RTX PRO 6000 Blackwell Workstation Edition (sm_120, 97887 MiB each)")
    assert res["ansible_facts"]["llmops_gpu"]["gpu_count"] == 8


def test_module_without_driver_reports_the_state(tmp_path):
    env = {"SIM_GPU_DRIVER_FILE": str(tmp_path / "absent")}
    rc, res = run_module(tmp_path, {"nvidia_smi": str(FAKE_SMI)}, env)
    assert rc == 0, res
    assert res["gpu_state"] == "no_driver"
    assert res["gpu_count"] == 0
    assert "couldn't communicate" in res["nvidia_smi_output"]


def test_module_without_nvidia_smi_reports_no_driver(tmp_path):
    rc, res = run_module(tmp_path, {"nvidia_smi": str(tmp_path / "nvidia-smi")}, {})
    assert rc == 0, res
    assert res["gpu_state"] == "no_driver"


def test_module_on_a_host_without_gpus(tmp_path, driver_files):
    env = {"SIM_GPU_PROFILE": str(ROOT / "sim/gpu/profiles/no-gpu.json"), **driver_files}
    rc, res = run_module(tmp_path, {"nvidia_smi": str(FAKE_SMI)}, env)
    assert rc == 0, res
    assert res["gpu_state"] == "no_gpu"


def test_module_reports_a_driver_library_mismatch(tmp_path, driver_files):
    Path(driver_files["SIM_GPU_LOADED_FILE"]).write_text("575.57.08\n")
    env = {"SIM_GPU_PROFILE": str(ROOT / "sim/gpu/profiles/rtx-pro-6000-x8.json"), **driver_files}
    rc, res = run_module(tmp_path, {"nvidia_smi": str(FAKE_SMI)}, env)
    assert rc == 0, res
    assert res["gpu_state"] == "driver_mismatch"
    assert "reboot" in res["message"]


def test_module_rejects_a_bad_timeout_before_running_anything(tmp_path):
    rc, res = run_module(tmp_path, {"nvidia_smi": "/bin/false", "timeout": 0}, {})
    assert rc == 1
    assert "timeout must be at least 1" in res["msg"]


def make_pci(root, devices):
    for bus, vendor, device, cls in devices:
        d = root / bus
        d.mkdir(parents=True)
        (d / "vendor").write_text(vendor + "\n")
        (d / "device").write_text(device + "\n")
        (d / "class").write_text(cls + "\n")


def test_pci_bus_names_blackwell_gpus_without_a_driver(tmp_path):
    pci = tmp_path / "pci"
    make_pci(
        pci,
        [
            ("0000:00:00.0", "0x8086", "0x0d57", "0x060000"),  # host bridge
            ("0000:01:00.0", "0x10de", "0x2bb1", "0x030200"),
            ("0000:02:00.0", "0x10de", "0x2bb1", "0x030000"),
            ("0000:03:00.0", "0x10de", "0x22e8", "0x040300"),  # the GPU's audio function
        ],
    )
    args = {"nvidia_smi": str(tmp_path / "absent"), "pci_root": str(pci), "pci_ids": [pci_ids_file()]}
    rc, res = run_module(tmp_path, args, {})
    assert rc == 0, res
    assert res["gpu_state"] == "no_driver"
    assert res["pci_ids"] == pci_ids_file()
    assert [g["pci_bus_id"] for g in res["pci_gpus"]] == ["0000:01:00.0", "0000:02:00.0"]
    assert res["sm_list"] == ["sm_120"]
    assert res["arch_source"] == "pci"
    assert "2 x NVIDIA RTX PRO 6000 Blackwell Workstation Edition (sm_120)" in res["message"]


def test_unknown_pci_device_is_listed_without_an_architecture(tmp_path):
    pci = tmp_path / "pci"
    make_pci(pci, [("0000:01:00.0", "0x10de", "0x9999", "0x030200")])
    args = {"nvidia_smi": str(tmp_path / "absent"), "pci_root": str(pci), "pci_ids": [pci_ids_file()]}
    rc, res = run_module(tmp_path, args, {})
    assert rc == 0, res
    assert res["pci_gpus"][0]["sm"] is None
    assert res["sm_list"] == []
    assert res["arch_source"] == "none"
    assert "1 x NVIDIA device 0x9999 (not in the PCI id database " in res["message"]


def test_without_a_pci_id_database_the_bus_lists_ids_and_says_what_to_install(tmp_path):
    pci = tmp_path / "pci"
    make_pci(pci, [("0000:01:00.0", "0x10de", "0x2bb1", "0x030200")])
    args = {"nvidia_smi": str(tmp_path / "absent"), "pci_root": str(pci), "pci_ids": [str(tmp_path / "none")]}
    rc, res = run_module(tmp_path, args, {})
    assert rc == 0, res
    assert res["pci_ids"] is None
    assert res["sm_list"] == []
    assert "NVIDIA device 0x2bb1 (no PCI id database: install pci.ids or hwdata)" in res["message"]


def test_nvidia_smi_wins_over_the_pci_bus(tmp_path, driver_files):
    pci = tmp_path / "pci"
    make_pci(pci, [("0000:01:00.0", "0x10de", "0x2330", "0x030200")])
    env = {"SIM_GPU_PROFILE": str(ROOT / "sim/gpu/profiles/rtx-pro-6000-x8.json"), **driver_files}
    rc, res = run_module(tmp_path, {"nvidia_smi": str(FAKE_SMI), "pci_root": str(pci)}, env)
    assert rc == 0, res
    assert res["arch_source"] == "nvidia-smi"
    assert res["sm_list"] == ["sm_120"]


@pytest.mark.parametrize("case", ANSWERS["query_rows"], ids=lambda c: c["case"])
def test_real_answers_with_placeholders_never_fail_and_say_why(case):
    (gpu,) = parse_query_csv(case["text"])
    for key, want in case["expect"].items():
        assert gpu[key] == want, key
    for field, value in zip(("memory.total", "memory.used", "memory.free"), case["text"].split(",")[3:6], strict=True):
        if value.strip().startswith("["):
            assert gpu["notes"][field].startswith(value.strip() + ": ")
    summary = summarize([gpu])
    assert summary["sm_list"] == [case["expect"]["sm"]]
    assert summary["min_memory_total_mib"] == case["expect"]["memory_total_mib"]


@pytest.mark.parametrize("case", ANSWERS["failures"], ids=lambda c: c["case"])
def test_real_failure_texts_name_the_state(case):
    assert classify_failure(case["rc"], case["text"]) == case["state"]


def test_module_on_a_unified_memory_gpu_reports_it_instead_of_failing(tmp_path, driver_files):
    env = {"SIM_GPU_PROFILE": str(ROOT / "sim/gpu/profiles/gb10-unified.json"), **driver_files}
    rc, res = run_module(tmp_path, {"nvidia_smi": str(FAKE_SMI)}, env)
    assert rc == 0, res
    assert res["gpu_state"] == "present"
    assert res["gpus"][0]["memory_total_mib"] is None
    assert res["unified_memory"] is True
    assert res["min_memory_total_mib"] is None
    assert res["message"] == "1 x NVIDIA GB10 (sm_121, unified memory), driver 580.95.05"


def pci_ids_file():
    """Debian's own pci.ids (trixie's package: bookworm's predates Blackwell), fetched by `make setup`."""
    path = subprocess.run(
        [sys.executable, str(ROOT / "sim/gpu/pci_ids.py")], capture_output=True, text=True, check=False, timeout=300
    )
    assert path.returncode == 0, "run `make setup` (sim/gpu/pci_ids.py fetches Debian's pci.ids): " + path.stderr
    return path.stdout.strip()


# One board per chip family from Volta to Blackwell: (device id, name in pci.ids 2025.06.09, sm). The names are the
# database's; the architectures are NVIDIA's compute-capability table (developer.nvidia.com/cuda-gpus).
PCI_BOARDS = [
    ("0x1db6", "NVIDIA Tesla V100 PCIe 32GB", "sm_70"),
    ("0x1df6", "NVIDIA Tesla V100S PCIe 32GB", "sm_70"),
    ("0x1eb8", "NVIDIA Tesla T4", "sm_75"),
    ("0x1e30", "NVIDIA Quadro RTX 6000/8000", "sm_75"),
    ("0x20b2", "NVIDIA A100 SXM4 80GB", "sm_80"),
    ("0x20b7", "NVIDIA A30 PCIe", "sm_80"),
    ("0x2235", "NVIDIA A40", "sm_86"),
    ("0x2236", "NVIDIA A10", "sm_86"),
    ("0x2230", "NVIDIA RTX A6000", "sm_86"),
    ("0x27b8", "NVIDIA L4", "sm_89"),
    ("0x26b9", "NVIDIA L40S", "sm_89"),
    ("0x26b1", "NVIDIA RTX 6000 Ada Generation", "sm_89"),
    ("0x2684", "NVIDIA GeForce RTX 4090", "sm_89"),
    ("0x2330", "NVIDIA H100 SXM5 80GB", "sm_90"),
    ("0x2321", "NVIDIA H100L 94GB", "sm_90"),
    ("0x233b", "NVIDIA H200 NVL", "sm_90"),
    ("0x2342", "NVIDIA GH200 120GB / 480GB", "sm_90"),
    ("0x2901", "NVIDIA B200", "sm_100"),
    ("0x2941", "NVIDIA HGX GB200", "sm_100"),
    ("0x2bb1", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "sm_120"),
    ("0x2bb4", "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", "sm_120"),
    ("0x2bb5", "NVIDIA RTX PRO 6000 Blackwell Server Edition", "sm_120"),
    ("0x2bb3", "NVIDIA RTX PRO 5000 Blackwell", "sm_120"),
    ("0x2b85", "NVIDIA GeForce RTX 5090", "sm_120"),
]


def test_gpus_from_volta_to_blackwell_resolve_through_the_pci_id_database(tmp_path):
    ids = read_pci_ids(pci_ids_file())
    pci = tmp_path / "pci"
    make_pci(pci, [(f"0000:{i + 1:02x}:00.0", "0x10de", dev, "0x030200") for i, (dev, _, _) in enumerate(PCI_BOARDS)])
    gpus = read_pci_gpus(str(pci), ids)
    assert [(g["device_id"], g["name"], g["sm"]) for g in gpus] == PCI_BOARDS
    assert len({g["chip"].rstrip("GLM") for g in gpus}) >= 9  # one rule per chip family, not per board


def test_a_device_the_database_does_not_list_stays_unknown(tmp_path):
    ids = read_pci_ids(pci_ids_file())
    pci = tmp_path / "pci"
    make_pci(pci, [("0000:01:00.0", "0x10de", "0x31c0", "0x030200"), ("0000:02:00.0", "0x10de", "0x9999", "0x030200")])
    gb110, missing = read_pci_gpus(str(pci), ids)
    assert (gb110["pci_name"], gb110["name"], gb110["sm"]) == ("GB110", "NVIDIA GB110", None)
    assert (missing["pci_name"], missing["name"], missing["sm"]) == (None, None, None)
