"""Real compilers, no GPU: the SM120 fix through the real Triton, the roles' arch flags through a real nvcc.

Everything is fetched from the package registries with pip at test time and cached in TOOLCHAIN_CACHE
(scripts/toolchain/cache.py; never committed): Triton at the version torch 2.9.1 pins, SGLang 0.5.8/0.5.9 sdists and
the newest wheel, NVIDIA's CUDA 13.0 nvcc wheels and cuobjdump, flash-attention's sdist. Nothing skips: without the
registry and without a cache these tests fail, saying what could not be fetched.
Cold (empty cache, 2 cores): about 5 minutes, most of it Triton compiling 40 kernels; warm: seconds (Triton's own
cache, TOOLCHAIN_CACHE/triton-cache, keyed by kernel source and options).
"""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from toolchain import archprobe, cache, sglkernel_cmake, sm120  # noqa: E402

pytestmark = pytest.mark.slow
PROBE = ROOT / "roles" / "sglang" / "files" / "sm120_smem_probe.py"
_PROBE_DEFAULTS = runpy.run_path(str(PROBE))
CONFIGS = len(_PROBE_DEFAULTS["DEFAULT_DIMS"]) * len(_PROBE_DEFAULTS["DEFAULT_DTYPES"])


@pytest.fixture(scope="module")
def sm120_result():
    return sm120.run()


@pytest.fixture(scope="module")
def arch_rows():
    return archprobe.run()


@pytest.fixture(scope="module")
def cmake_rows():
    # The role's CMAKE_ARGS only (make toolchain-check compares the other variants too): one configure + build each.
    return {r["fleet"].split(" (")[0].split(":")[0]: r for r in sglkernel_cmake.run(only_role=True)}


def by_label(result):
    return {label.split(" (")[0]: res for label, res in result["releases"]}


def test_triton_is_the_version_torch_pins(sm120_result):
    assert sm120_result["triton"] == cache.pinned(cache.torch_requires("2.9.1"), "triton") == "3.5.1"
    for _, res in sm120_result["releases"]:
        assert res["triton"] == "3.5.1" and res["target"] == "cuda:120" and res["limit"] == 101376


def test_released_058_exceeds_sm120_shared_memory(sm120_result):
    res = by_label(sm120_result)["0.5.8"]
    assert len(res["rows"]) == CONFIGS
    over = [r for r in res["rows"] if not r["fits"]]
    assert over, res["rows"]
    # 0.5.8 takes the Hopper tiles on capability 12: BLOCK_M 128 up to Lq 256, 32x64 above.
    assert {(r["lq"], r["block_m"], r["block_n"]) for r in over} <= {(256, 128, 64), (576, 32, 64)}
    assert all(r["shared"] > 101376 for r in over)


@pytest.mark.parametrize("label", ["0.5.8 + role patch", "0.5.9", "newest"])
def test_patched_and_fixed_releases_fit(sm120_result, label):
    trees = by_label(sm120_result)
    res = trees[label] if label != "newest" else next(r for lbl, r in sm120_result["releases"] if "newest" in lbl)
    assert len(res["rows"]) == CONFIGS
    assert res["fits"] and all(r["shared"] <= r["limit"] for r in res["rows"]), res["rows"]


def test_role_patch_picks_what_059_picks_and_compiles_the_same(sm120_result):
    trees = by_label(sm120_result)
    keys = ("lq", "lv", "dtype", "block_m", "block_n", "num_warps", "num_stages", "shared")
    pick = lambda res: [tuple(r[k] for k in keys) for r in res["rows"]]  # noqa: E731
    assert pick(trees["0.5.8 + role patch"]) == pick(trees["0.5.9"])


def test_newest_release_keeps_the_kernel_where_the_probe_looks(sm120_result):
    label, res = sm120_result["releases"][-1]
    assert "newest" in label
    assert res["file"] in (
        "sglang/kernels/ops/attention/extend_attention.py",
        "sglang/srt/layers/attention/triton_ops/extend_attention.py",
    )


def test_probe_says_in_one_line_when_the_tree_has_no_kernel(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            str(PROBE),
            "--tree",
            str(tmp_path),
            "--file",
            "python/sglang/kernels/ops/attention/extend_attention.py",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "expected SGLang's extend_attention.py" in proc.stderr


def test_every_fleet_fatbinary_holds_exactly_the_planned_architectures(arch_rows):
    assert len(arch_rows) == 2 * len(archprobe.FLEETS)
    for row in arch_rows:
        assert row["exact"], row
    got = {(r["fleet"].split(" (")[0].split(":")[0], r["build"].split(" ")[0]): r["elf"] for r in arch_rows}
    assert got[("8 x RTX PRO 6000", "sgl-kernel")] == ["sm_120a"]
    assert got[("8 x RTX PRO 6000", "flash-attn")] == ["sm_120"]
    assert got[("H100", "sgl-kernel")] == ["sm_90a"]
    assert got[("B200", "sgl-kernel")] == ["sm_100a"]
    assert got[("mixed", "sgl-kernel")] == ["sm_100a", "sm_120a", "sm_90a"]
    assert got[("mixed", "flash-attn")] == ["sm_100", "sm_120", "sm_90"]


def test_flash_attn_setup_gives_no_gencode_without_a_token_it_knows():
    # FLASH_ATTN_CUDA_ARCHS=86 is not one of 80/90/100/120: setup.py passes no -gencode at all, so torch's
    # BuildExtension decides the architectures (docs/builds.md); the roles therefore map sm_86 to 80.
    home = cache.cuda_toolkit("13.0")
    assert archprobe.flash_attn_flags(home, "86")["gencode"] == []
    assert archprobe.flash_attn_flags(home, "80")["gencode"] == ["arch=compute_80,code=sm_80"]


def test_sgl_kernel_main_library_holds_exactly_the_fleet(cmake_rows):
    assert cmake_rows["8 x RTX PRO 6000"]["targets"]["common_ops"] == {
        "elf": ["sm_120a"],
        "ptx": [],
        "flags": ["-gencode=arch=compute_120a,code=sm_120a"],
    }
    assert cmake_rows["mixed"]["targets"]["common_ops"]["elf"] == ["sm_100a", "sm_120a", "sm_90a"]
    for row in cmake_rows.values():
        assert "CMAKE_CUDA_ARCHITECTURES" not in row["cmake_args"]
        assert all(not t["ptx"] for t in row["targets"].values()), row


def test_fa3_and_flashmla_scoped_where_the_fleet_runs_them_and_kept_where_it_runs_none(cmake_rows):
    libs = {fleet: {t: v["elf"] for t, v in row["targets"].items()} for fleet, row in cmake_rows.items()}
    assert libs["H100"] == {"common_ops": ["sm_90a"], "flash_ops": ["sm_90a"], "flashmla_ops": ["sm_90a"]}
    assert libs["B200"]["flashmla_ops"] == ["sm_100a"]
    assert libs["mixed"]["flashmla_ops"] == ["sm_100a", "sm_90a"]
    # An sm_120-only fleet runs neither: upstream builds both unconditionally, so they keep upstream's list.
    assert libs["8 x RTX PRO 6000"]["flash_ops"] == ["sm_90a"]
    assert libs["8 x RTX PRO 6000"]["flashmla_ops"] == ["sm_100a", "sm_90a"]
    summary = cmake_rows["8 x RTX PRO 6000"]["summary"]["libraries"]
    assert not summary["flash_ops (FA3)"]["scoped"] and not summary["flashmla_ops (FlashMLA)"]["scoped"]
    assert "unconditionally" in summary["flash_ops (FA3)"]["note"]


def test_cmake_cuda_architectures_adds_ptx_and_sass_to_every_library_unless_torch_turns_it_off(tmp_path):
    home = cache.cuda_toolkit("13.0")
    plan = {"cmake_cuda_architectures": "120a", "cmake_arch_args": "-DENABLE_BELOW_SM90=OFF"}
    _, (_, with_torch, _), (_, without_torch, _) = sglkernel_cmake.variants(plan)
    got = {}
    for step in (True, False):
        src = tmp_path / str(step)
        sglkernel_cmake.project(src, torch_step=step)
        got[step] = sglkernel_cmake.configure_and_build(src, with_torch, home)
    assert with_torch == without_torch == "-DCMAKE_CUDA_ARCHITECTURES=120a -DENABLE_BELOW_SM90=OFF"
    assert got[True]["flash_ops"]["elf"] == ["sm_90a"] and not got[True]["flash_ops"]["ptx"]
    for target in sglkernel_cmake.TARGETS:
        assert "sm_120a" in got[False][target]["elf"] and got[False][target]["ptx"] == ["sm_120a"]


def test_probe_reads_the_capability_in_every_spelling_the_roles_use():
    cap = _PROBE_DEFAULTS["_capability"]
    assert {cap(s) for s in ("120", "12.0", "sm_120", "12.0a")} == {(12, 0)} and cap("121") == (12, 1)
    with pytest.raises(_PROBE_DEFAULTS["ProbeError"], match="expected a compute capability"):
        cap("twelve")
