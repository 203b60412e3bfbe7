"""make toolchain-check runs the python_env role's own torch tasks (scripts/toolchain/torchcheck.py role_tasks) against
the real torch wheels; that check runs on CI only when its pins change. When the role's tasks began to read
python_env_set_venv (the build set's venv), the play role_tasks builds did not give it, and CI's toolchain check of
9d285ab failed with "'python_env_set_venv' is undefined" -- a day after the change. This test runs the same play, with
a torch module of a few lines standing in for the wheel, in make test: every variable the tasks read is given, and the
two verdicts (accepted, refused in one line) come through ansible-playbook."""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from toolchain import torchcheck  # noqa: E402

FAKE_TORCH = """
__version__ = {version!r}
class version:
    cuda = {cuda!r}
class backends:
    class cuda:
        @staticmethod
        def is_built():
            return True
class cuda:
    @staticmethod
    def get_arch_list():
        return {archs!r}
"""


def _venv(tmp_path, monkeypatch, version, cuda, archs):
    site = tmp_path / "site"
    (site / "torch").mkdir(parents=True)
    (site / "torch" / "__init__.py").write_text(FAKE_TORCH.format(version=version, cuda=cuda, archs=archs))
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").symlink_to(sys.executable)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    return venv


def test_the_role_tasks_play_gives_every_variable_and_accepts_a_matching_torch(tmp_path, monkeypatch):
    venv = _venv(tmp_path, monkeypatch, "2.9.1+cu128", "12.8", ["sm_90", "sm_100", "sm_120"])
    got = torchcheck.role_tasks(venv, "12.8")
    assert "undefined" not in got["msg"], got
    assert got["rc"] == 0, got


def test_the_role_tasks_play_refuses_a_torch_without_the_gpus_kernels_in_one_line(tmp_path, monkeypatch):
    venv = _venv(tmp_path, monkeypatch, "2.7.1+cu126", "12.6", ["sm_80", "sm_90"])
    got = torchcheck.role_tasks(venv, "12.6")
    assert got["rc"] != 0 and not got["traceback"], got
    assert got["msg"].startswith("torch 2.7.1+cu126 has no kernels for sm_120"), got
