"""roles/python_env/files/torch_check.py's decision, on the arch lists the real wheels report (read with
`make toolchain-check` from torch._C._cuda_getArchFlags(), 2026-12-01; docs/builds.md): PyPI's 2.9.1 (cu128) and
2.7.1 (cu126). `make toolchain-check` runs the script itself against those wheels."""

import importlib.util
from pathlib import Path

import pytest

CHECK = Path(__file__).resolve().parents[2] / "roles" / "python_env" / "files" / "torch_check.py"
spec = importlib.util.spec_from_file_location("torch_check", CHECK)
tc = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tc)

CU128 = ["sm_70", "sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120"]  # torch 2.9.1+cu128
CU126 = ["sm_50", "sm_60", "sm_70", "sm_75", "sm_80", "sm_86", "sm_90"]  # torch 2.7.1+cu126


def info(version, cuda, arch_list, built=True):
    return {"version": version, "cuda": cuda, "cuda_built": built, "arch_list": arch_list}


@pytest.mark.parametrize(
    ("sm", "ok"),
    [
        ("sm_120", True),
        ("sm_121", True),
        ("sm_89", True),
        ("sm_90", True),
        ("sm_103", True),
        ("sm_110", False),
        ("sm_61", False),
    ],
)
def test_same_major_lower_minor_sass_covers_a_gpu(sm, ok):
    assert tc.covered(sm, CU128) is ok


def test_ptx_covers_every_capability_at_or_above_it():
    assert tc.covered("sm_120", ["sm_80", "compute_90"]) and not tc.covered("sm_86", ["compute_90"])


def test_cu126_torch_for_sm120_is_refused_in_one_line():
    msg = tc.verdict(
        info("2.7.1+cu126", "12.6", CU126), ["sm_120"], ["NVIDIA RTX PRO 6000 Blackwell Workstation Edition"], "12.6"
    )
    assert msg.startswith("torch 2.7.1+cu126 has no kernels for sm_120 (NVIDIA RTX PRO 6000 Blackwell Workstation")
    assert "its arch list is sm_50 sm_60 sm_70 sm_75 sm_80 sm_86 sm_90. Use a cu128 or newer build" in msg
    assert "\n" not in msg


def test_cu128_torch_matches_the_fleet_and_refuses_another_toolkit():
    fleet = ["sm_120", "sm_90", "sm_100", "sm_89", "sm_121"]
    assert tc.verdict(info("2.9.1+cu128", "12.8", CU128), fleet, cuda="12.8") is None
    assert "was built for CUDA 12.8 but the toolkit is CUDA 13.0" in tc.verdict(
        info("2.9.1+cu128", "12.8", CU128), ["sm_120"], cuda="13.0"
    )


def test_cpu_only_torch_is_refused():
    assert "CPU-only build" in tc.verdict(info("2.13.0+cpu", None, [], built=False), ["sm_120"], cuda="12.8")
