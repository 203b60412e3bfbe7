"""roles/sglang/files/sgl_kernel_scope.py on a CMake file laid out as upstream's sgl-kernel (main list, FA3, FlashMLA).

The layout is scripts/toolchain/sglkernel_cmake.py's (the shape of upstream's sgl-kernel/CMakeLists.txt and
cmake/flashmla.cmake at sgl-project/sglang 00390b8); tests/unit/test_toolchain_real.py compiles the result with the real
CMake and nvcc.
"""

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
from toolchain import sglkernel_cmake  # noqa: E402

spec = importlib.util.spec_from_file_location("sgl_kernel_scope", sglkernel_cmake.SCOPE)
scope_mod = importlib.util.module_from_spec(spec)
spec.loader.exec_module(scope_mod)
SM = {t: f"-gencode=arch=compute_{t},code=sm_{t}" for t in ("90a", "100a", "120a")}


def scoped(*targets):
    text = sglkernel_cmake.CMAKELISTS.replace("@TORCH_STEP@", "")
    return scope_mod.scope(text, [SM[t] for t in targets], extra={"cmake/flashmla.cmake": sglkernel_cmake.FLASHMLA})


def test_h100_fleet_cuts_flashmla_to_sm90a_and_keeps_fa3():
    new, summary, files = scoped("90a")
    assert summary["libraries"]["flashmla_ops (FlashMLA)"]["kept"] == ["sm_90a"]
    assert "compute_100a" not in files["cmake/flashmla.cmake"] and "compute_90a" in files["cmake/flashmla.cmake"]
    assert summary["libraries"]["flash_ops (FA3)"]["kept"] == ["sm_90a"]
    # FA3's below-SM90 lines go too: the fleet has no sm_80/sm_86 target
    assert summary["removed_from_libraries"] == [
        "-gencode=arch=compute_80,code=sm_80",
        "-gencode=arch=compute_86,code=sm_86",
        "-gencode=arch=compute_100a,code=sm_100a",
    ]
    main_block = new.split("set(SGL_KERNEL_CUDA_FLAGS", 1)[1].split("add_library(common_ops", 1)[0]
    assert main_block.count("-gencode") == 1 and SM["90a"] in main_block


def test_sm120_fleet_keeps_the_libraries_it_cannot_run_and_says_so():
    _, summary, files = scoped("120a")
    for lib in ("flash_ops (FA3)", "flashmla_ops (FlashMLA)"):
        assert summary["libraries"][lib]["scoped"] is False
        assert summary["libraries"][lib]["kept"] == summary["libraries"][lib]["upstream"]
    assert files["cmake/flashmla.cmake"] == sglkernel_cmake.FLASHMLA
    assert summary["libraries"]["common_ops, spatial_ops, deep_gemm_cpp"]["kept"] == ["sm_120a"]


def test_script_writes_flashmla_cmake_next_to_the_file(tmp_path):
    sglkernel_cmake.project(tmp_path)
    proc = subprocess.run(
        [sys.executable, sglkernel_cmake.SCOPE, tmp_path / "CMakeLists.txt", f"--gencode={SM['100a']}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["libraries"]["flashmla_ops (FlashMLA)"]["kept"] == ["sm_100a"]
    assert "compute_90a" not in (tmp_path / "cmake" / "flashmla.cmake").read_text()


def test_flashmla_cmake_clone_is_listed_and_mirrored_too():
    # upstream's cmake/flashmla.cmake clones FlashMLA itself (FetchContent): the reachability check and the mirror
    # must see it as well as the CMakeLists.txt ones.
    flashmla = (
        "FetchContent_Declare(\n    repo-flashmla\n    GIT_REPOSITORY https://github.com/sgl-project/FlashMLA\n)\n"
    )
    text = sglkernel_cmake.CMAKELISTS.replace("@TORCH_STEP@", "")
    _, summary, files = scope_mod.scope(
        text, [SM["90a"]], "http://mirror.test/git", extra={"cmake/flashmla.cmake": flashmla + sglkernel_cmake.FLASHMLA}
    )
    assert summary["repositories"] == ["http://mirror.test/git/sgl-project/FlashMLA.git"]
    assert "GIT_REPOSITORY http://mirror.test/git/sgl-project/FlashMLA.git" in files["cmake/flashmla.cmake"]
