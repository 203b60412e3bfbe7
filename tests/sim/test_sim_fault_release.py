"""The stand-in's release-scoped faults: ``release=X`` applies only under the sglang distribution of that version
installed beside it (a build set holding a real release's wheel), read from real package metadata."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SIM_PY = Path(__file__).resolve().parents[2] / "sim" / "sglang" / "python"


def faults_seen(tmp_path, installed: str | None, spec: str) -> str:
    """Which crash fault the stand-in finds at weights_loading, in a fresh interpreter whose environment holds an
    sglang distribution of version ``installed`` (a dist-info directory, as pip writes it) or none."""
    site = tmp_path / "site"
    site.mkdir()
    if installed:
        info = site / f"sglang-{installed}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: sglang\nVersion: {installed}\n")
    code = (
        "import sys; sys.path[:0] = [sys.argv[1], sys.argv[2]];"
        "from sglang.srt import sim_faults as f;"
        "i = f.FaultInjector(f.parse_faults(sys.argv[3]));"
        "print(f.installed_release(), i.find('crash', 'weights_loading') is not None)"
    )
    out = subprocess.run([sys.executable, "-I", "-c", code, str(SIM_PY), str(site), spec],
                         capture_output=True, text=True, check=True)  # fmt: skip
    return out.stdout.strip()


def test_a_release_fault_applies_under_that_release_only(tmp_path):
    assert faults_seen(tmp_path, "0.5.9", "crash@weights_loading release=0.5.9") == "0.5.9 True"


def test_a_release_fault_applies_to_a_local_build_of_that_release(tmp_path):
    assert faults_seen(tmp_path, "0.5.9+g1234abc", "crash@weights_loading release=0.5.9") == "0.5.9+g1234abc True"


def test_a_release_fault_does_not_apply_to_a_later_patch_release(tmp_path):
    assert faults_seen(tmp_path, "0.5.9.1", "crash@weights_loading release=0.5.9") == "0.5.9.1 False"


def test_a_release_fault_does_not_apply_under_another_release(tmp_path):
    assert faults_seen(tmp_path, "0.5.8", "crash@weights_loading release=0.5.9") == "0.5.8 False"


def test_a_release_fault_does_not_apply_without_an_installed_release(tmp_path):
    assert faults_seen(tmp_path, None, "crash@weights_loading release=0.5.9") == "None False"


def test_a_fault_without_release_applies_everywhere(tmp_path):
    assert faults_seen(tmp_path, "0.5.8", "crash@weights_loading") == "0.5.8 True"
