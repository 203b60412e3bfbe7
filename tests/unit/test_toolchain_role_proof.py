"""The sglang role's SM120 proof (roles/sglang/tasks/sm120_proof.yml) run for real: ansible-playbook on the local
connection with the real Triton (the version torch pins, scripts/toolchain/cache.py) as the "build virtualenv" and the
real SGLang trees as the checkout. Released 0.5.8 stops the play in one line naming the configurations over the limit;
0.5.9 passes and the play says it was compiled; a Python without Triton falls back to the marker check and says so.
Kernels compiled by tests/unit/test_toolchain_real.py are reused from Triton's cache (TOOLCHAIN_CACHE/triton-cache).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from toolchain import cache, sm120  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trees():
    return {label.split(" (")[0]: tree for label, _release, tree in sm120.trees()}


def play(tmp_path, python, tree):
    checkout = tmp_path / "checkout"
    checkout.mkdir(exist_ok=True)
    (checkout / "python").unlink(missing_ok=True)
    (checkout / "python").symlink_to(tree)
    book = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "python_env_facts": {"python": str(python), "arch_list": ["120"], "sm_list": ["sm_120"]},
                "llmops_build_dir": str(cache.CACHE),  # TRITON_CACHE_DIR = TOOLCHAIN_CACHE/triton-cache
                "sglang_src": str(checkout),
                "sglang_fix_path": "python/sglang/srt/layers/attention/triton_ops/extend_attention.py",
                "sglang_version": "v-test",
                "sglang_build_plan": {"commit": "0" * 40},
            },
            "tasks": [
                {
                    "name": "Run the SM120 proof",
                    "ansible.builtin.include_tasks": str(ROOT / "roles" / "sglang" / "tasks" / "sm120_proof.yml"),
                }
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(book))
    # The task file is included as it is; its script comes from the role's files/, found next to the playbook.
    (tmp_path / "files").mkdir(exist_ok=True)
    probe = tmp_path / "files" / "sm120_smem_probe.py"
    if not probe.exists():
        probe.symlink_to(ROOT / "roles" / "sglang" / "files" / "sm120_smem_probe.py")
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(ROOT),
        "ANSIBLE_ROLES_PATH": str(ROOT / "roles"),
    }
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(tmp_path / "play.yml")],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=1800,
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_released_058_is_stopped_in_one_line(tmp_path, trees):
    python, _ = cache.triton_python()
    rc, out = play(tmp_path, python, trees["0.5.8"])
    assert rc != 0, out[-3000:]
    line = next(x for x in out.splitlines() if "needs more shared memory than the GPU allows" in x)
    assert "Triton 3.5.1 for cuda:120" in line and "(101376 bytes per block)" in line
    assert "Lq=256/Lv=256 float16 needs 114688 bytes" in line and "Lq=576/Lv=512 bfloat16 needs 106496 bytes" in line
    assert "Traceback" not in out


def test_059_is_proven_by_compiling(tmp_path, trees):
    python, _ = cache.triton_python()
    rc, out = play(tmp_path, python, trees["0.5.9"])
    assert rc == 0, out[-3000:]
    assert (
        "SM120 fix of SGLang v-test: compiled: Triton 3.5.1 for cuda:120, 10 configurations, largest 73728 of "
        "101376 bytes of shared memory per block"
    ) in " ".join(out.split())


def test_without_triton_the_marker_check_is_the_proof_and_is_named(tmp_path, trees):
    rc, out = play(tmp_path, sys.executable, trees["0.5.9"])  # the project's venv: no triton
    assert rc == 0, out[-3000:]
    assert "content check (the marker line): Triton does not import in the build virtualenv" in " ".join(out.split())
