"""The SM120 fix proven by compiling: SGLang's real extend-attention kernel, per release, with the real Triton.

Four trees: 0.5.8 as released (no fix), 0.5.8 with the role's patch (roles/sglang/files/patches), 0.5.9 (the first
release with PR #14311) and the newest release. 0.5.8 and 0.5.9 come from their PyPI sdists (the shared cache of
sim/mirrors/sglang_releases.py); the newest from its PyPI wheel (newer releases publish no sdist). Each tree is run
through roles/sglang/files/sm120_smem_probe.py -- the same script the role runs on a builder -- with the Triton that
torch pins (cache.triton_python), for GPUTarget("cuda", 120, 32).

Where each release keeps the kernel comes from plugins/module_utils/sglang_flags.py (sm120_fix), as in the role.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "sim" / "mirrors"))
import sglang_releases  # noqa: E402

sys.path.insert(0, str(ROOT / "plugins" / "module_utils"))
import sglang_flags  # noqa: E402

from . import cache  # noqa: E402

PROBE = ROOT / "roles" / "sglang" / "files" / "sm120_smem_probe.py"
PATCH = ROOT / "roles" / "sglang" / "files" / "patches" / "0001-sm120-extend-attention-block-size.patch"
_WHEEL = re.compile(r"^sglang-(\d+(?:\.\d+)*(?:\.post\d+)?)-.*\.whl$")


def newest_wheel(cache_dir: Path = sglang_releases.CACHE) -> tuple:
    """(version, path) of the newest sglang wheel: the highest in the shared cache above 0.5.9, else downloaded."""
    have = {m.group(1): p for p in cache_dir.glob("sglang-*.whl") if (m := _WHEEL.match(p.name))}
    newer = sorted((v for v in have if sglang_releases.version_key(v) > (0, 5, 9, -1)), key=sglang_releases.version_key)
    if newer:
        return newer[-1], have[newer[-1]]
    path = cache.wheel("sglang", cache_dir)
    return _WHEEL.match(path.name).group(1), path


def _tree_from_sdist(sdist: Path, dest: Path) -> Path:
    if not (dest / ".llmops-done").is_file():
        shutil.rmtree(dest, ignore_errors=True)
        sglang_releases.extract_python_tree(sdist, dest / "python")
        (dest / ".llmops-done").write_text("")
    return dest / "python"


def _tree_from_wheel(whl: Path, dest: Path) -> Path:
    if not (dest / ".llmops-done").is_file():
        shutil.rmtree(dest, ignore_errors=True)
        with zipfile.ZipFile(whl) as z:
            z.extractall(dest / "python", [n for n in z.namelist() if n.startswith("sglang/") and n.endswith(".py")])
        (dest / ".llmops-done").write_text("")
    return dest / "python"


def _patched(sdist: Path, dest: Path) -> Path:
    """0.5.8 with the role's patch, applied the way the role does (git apply from the repository root)."""
    if not (dest / ".llmops-done").is_file():
        shutil.rmtree(dest, ignore_errors=True)
        sglang_releases.extract_python_tree(sdist, dest / "python")
        proc = subprocess.run(["git", "apply", str(PATCH)], cwd=dest, capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise cache.ToolchainError(f"the role's SM120 patch does not apply to 0.5.8: {proc.stderr.strip()}")
        (dest / ".llmops-done").write_text("")
    return dest / "python"


def kernel_file(release: str) -> str:
    """The extend-attention kernel's file in ``release``'s tree (``python/...``), from sglang_flags."""
    return sglang_flags.sm120_fix(release)["path"]


def trees() -> list:
    """[(label, release, python/ tree)] for the four SGLang trees, fetched and unpacked once."""
    sdists = sglang_releases.ensure(("0.5.8", "0.5.9"))
    newest, whl = newest_wheel()
    base = cache.CACHE / "sglang-trees"
    return [
        ("0.5.8", "0.5.8", _tree_from_sdist(sdists["0.5.8"], base / "0.5.8")),
        ("0.5.8 + role patch", "0.5.8", _patched(sdists["0.5.8"], base / "0.5.8-patched")),
        ("0.5.9", "0.5.9", _tree_from_sdist(sdists["0.5.9"], base / "0.5.9")),
        (f"{newest} (newest)", newest, _tree_from_wheel(whl, base / newest)),
    ]


def run(torch_version: str = cache.TORCH_VERSION_DEFAULT) -> dict:
    """{"triton": version, "releases": [(label, probe JSON)]}: every tree compiled for sm_120."""
    python, triton_version = cache.triton_python(torch_version)
    env = dict(os.environ, TRITON_CACHE_DIR=str(cache.CACHE / "triton-cache"))
    out = []
    for label, release, tree in trees():
        proc = subprocess.run(
            [str(python), str(PROBE), "--tree", str(tree), "--file", kernel_file(release), "--torch", "standin"],
            capture_output=True,
            text=True,
            timeout=1800,
            env=env,
            check=False,
        )
        if proc.returncode not in (0, 1):
            raise cache.ToolchainError(f"{label}: {proc.stderr.strip() or proc.stdout.strip()}")
        out.append((label, json.loads(proc.stdout)))
    return {"triton": triton_version, "torch": torch_version, "releases": out}


def table(result: dict) -> str:
    """The docs/builds.md table: release x kernel configuration x shared memory (fp16, bf16) x limit x fits."""
    lines = [
        "| SGLang | kernel file | Lq/Lv | BLOCK_M x N | warps | stages | shared fp16 (bytes) | shared bf16 (bytes) "
        "| limit | fits |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for label, res in result["releases"]:
        by_dim = {}
        for r in res["rows"]:
            by_dim.setdefault((r["lq"], r["lv"]), {})[r["dtype"]] = r
        short = "/".join(res["file"].split("/")[-3:])
        for (lq, lv), rows in by_dim.items():
            first = next(iter(rows.values()))
            fits = "yes" if all(r["fits"] for r in rows.values()) else "**no**"
            shared = [f"{rows[d]['shared']:,}" if d in rows else "-" for d in ("float16", "bfloat16")]
            lines.append(
                f"| {label} | `…/{short}` | {lq}/{lv} | {first['block_m']} x {first['block_n']} | {first['num_warps']} "
                f"| {first['num_stages']} | {shared[0]} | {shared[1]} | {first['limit']:,} | {fits} |"
            )
    return "\n".join(lines)
