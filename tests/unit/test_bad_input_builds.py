"""Bad input to the build planner (llmops.sglang.build_plan): one row per case.

Every row runs the module as Ansible does (a subprocess with a time bound), and asserts the exact one-line message
(expected, found, what to do), the failed flag and exit status, that no Python traceback appears, and that nothing
changed (the module is pure computation: a fingerprint of the directory it runs in, before and after).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "plugins" / "modules" / "build_plan.py"
KNOWN = "sm_70, sm_72, sm_75, sm_80, sm_86, sm_87, sm_89, sm_90, sm_100, sm_101, sm_103, sm_110, sm_120, sm_121"
BASE = {"package": "sgl-kernel", "ref": "a" * 40, "ram_mib": 65536, "cpus": 8, "gib_per_thread": 1}

CASES = [
    # (id, args, exact message)
    (
        "ram_fraction_above_one",
        {**BASE, "ram_fraction": 1.5},
        "sgl-kernel: cannot size the build: expected ram_fraction (python_env_build_ram_fraction) in (0, 1], found "
        "1.5: it is the share of RAM the compilers may use; set it to 0.75 or lower",
    ),
    (
        "ram_fraction_zero",
        {**BASE, "ram_fraction": 0},
        "sgl-kernel: cannot size the build: expected ram_fraction (python_env_build_ram_fraction) in (0, 1], found "
        "0.0: it is the share of RAM the compilers may use; set it to 0.75 or lower",
    ),
    (
        "ram_fraction_nan",
        {**BASE, "ram_fraction": "nan"},
        "sgl-kernel: cannot size the build: expected ram_fraction (python_env_build_ram_fraction) in (0, 1], found "
        "nan: it is the share of RAM the compilers may use; set it to 0.75 or lower",
    ),
    (
        "gib_per_thread_inf",
        {**BASE, "gib_per_thread": "inf"},
        "sgl-kernel: cannot size the build: cpus, ram_mib and gib_per_thread must be positive",
    ),
    (
        "arch_sm_999",
        {**BASE, "arch_list": ["sm_999"], "arch_style": "sgl_kernel"},
        f"sgl-kernel: cannot build for sm_999: GPU architecture 'sm_999' is not one NVIDIA makes; known architectures: "
        f"{KNOWN}.",
    ),
    (
        "flash_attn_arch_sm_75",
        {**BASE, "package": "flash-attn", "arch_list": ["sm_75"], "arch_style": "flash_attn"},
        "flash-attn: cannot build for sm_75: flash-attention 2 has no kernels for sm_75 (FLASH_ATTN_CUDA_ARCHS accepts "
        "only 80;90;100;120): disable flash_attn for this host.",
    ),
    (
        "flash_attn_below_2_7_3",
        {
            "package": "flash-attn",
            "ref": "v2.6.3",
            "ls_remote": "1" * 40 + "\trefs/tags/v2.6.3\n",
            "arch_list": ["sm_120"],
            "arch_style": "flash_attn",
        },
        "flash-attn: expected flash-attention v2.7.3 or later (the first that reads FLASH_ATTN_CUDA_ARCHS, which "
        "scopes the build to the GPUs), found v2.6.3: set flash_attn_version to v2.7.3 or later (default v2.8.3). "
        "Nothing was built.",
    ),
    (
        "no_gpu_architecture",
        {**BASE, "arch_list": [], "arch_style": "sgl_kernel"},
        "sgl-kernel: expected at least one GPU architecture to build for, found none: is the NVIDIA driver installed "
        "(gpu_facts reads the GPUs from nvidia-smi or the PCI bus)?",
    ),
]


def tree_fingerprint(path: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(path.rglob("*")):
        h.update(str(p.relative_to(path)).encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize(("case", "args", "message"), CASES, ids=[c[0] for c in CASES])
def test_build_plan_refuses_bad_input_in_one_line(tmp_path, case, args, message):
    argfile = tmp_path / "args.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    before = tree_fingerprint(tmp_path)
    proc = subprocess.run(
        [sys.executable, str(MODULE), str(argfile)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        timeout=30,
        check=False,
    )
    assert "Traceback" not in proc.stdout + proc.stderr, case
    assert proc.returncode == 1, (case, proc.stdout, proc.stderr)
    res = json.loads(proc.stdout)
    assert res["failed"] is True
    assert res["msg"] == message
    assert "\n" not in res["msg"]
    assert tree_fingerprint(tmp_path) == before
