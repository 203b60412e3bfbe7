"""roles/python_env/files/nccl_wheel.py: which NCCL wheel a virtualenv carries, read from installed distributions'
metadata as the role runs it (the virtualenv's Python, the script's text as ``-c``). The names and versions are the
ones torch's real wheels require (PyPI metadata: torch 2.9.1 requires nvidia-nccl-cu12==2.27.5)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "roles" / "python_env" / "files" / "nccl_wheel.py"


def installed(site: Path, name: str, version: str, requires=()):
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Dist: {r}" for r in requires]
    (info / "METADATA").write_text("\n".join(lines) + "\n")


def probe(site: Path):
    # -S: no site-packages of the interpreter running the tests, only the simulated virtualenv's
    code = f"import sys; sys.path.insert(0, {str(site)!r})\n" + SCRIPT.read_text()
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, check=True, timeout=60)
    return json.loads(out.stdout)


def test_the_wheel_torch_requires_is_read(tmp_path):
    installed(tmp_path, "torch", "2.9.1", ['nvidia-nccl-cu12==2.27.5; platform_system == "Linux"'])
    installed(tmp_path, "nvidia-nccl-cu12", "2.27.5")
    assert probe(tmp_path) == {"dist": "nvidia-nccl-cu12", "version": "2.27.5"}


def test_with_two_nccl_wheels_the_one_torch_requires_wins(tmp_path):
    installed(tmp_path, "torch", "2.9.1", ["nvidia-nccl-cu12==2.27.5"])
    installed(tmp_path, "nvidia-nccl-cu12", "2.27.5")
    installed(tmp_path, "nvidia-nccl-cu13", "2.28.9")
    assert probe(tmp_path) == {"dist": "nvidia-nccl-cu12", "version": "2.27.5"}


@pytest.mark.parametrize("torch_installed", [True, False])
def test_no_nccl_wheel_reads_as_null(tmp_path, torch_installed):
    if torch_installed:
        installed(tmp_path, "torch", "2.9.1")
    installed(tmp_path, "nvidia-cuda-runtime-cu12", "12.8.90")
    assert probe(tmp_path) is None


def virtualenv(path: Path, nccl: str | None) -> Path:
    """A virtualenv (no pip) holding torch 2.7.1's metadata and, when given, that NCCL wheel's."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True, timeout=120)
    site = next(path.glob("lib/python3*/site-packages"))
    installed(site, "torch", "2.7.1", [f"nvidia-nccl-cu12=={nccl}"] if nccl else [])
    if nccl:
        installed(site, "nvidia-nccl-cu12", nccl)
    return path


RTX = {"name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "sm": "sm_120"}
B200 = {"name": "NVIDIA B200", "sm": "sm_100"}


@pytest.mark.parametrize(("gpu", "refused"), [(RTX, True), (B200, False)])
def test_the_role_refuses_the_virtualenvs_old_nccl_in_one_sentence(tmp_path, gpu, refused):
    """roles/python_env/tasks/nccl.yml as the role runs it, on a virtualenv with torch 2.7.1's NCCL (2.26.2): below
    RTX PRO 6000's floor, above B200's (the whole table: tests/unit/test_gpu_compat.py)."""
    from _localhost_play import PASSED, run_tasks_from

    venv = virtualenv(tmp_path / "venv", "2.26.2")
    rc, out = run_tasks_from(
        tmp_path,
        "llmops.sglang.python_env",
        "nccl",
        {"python_env_set_venv": str(venv), "preflight_gpu": {"gpus": [gpu]}},
    )
    if refused:
        assert rc == 2 and PASSED not in out, out[-2000:]
        assert f"{gpu['name']} (sm_120) needs NCCL 2.27.3 or newer" in out and "nvidia-nccl-cu12 2.26.2" in out
        assert "Traceback" not in out
    else:
        assert rc == 0 and PASSED in out, out[-2000:]
