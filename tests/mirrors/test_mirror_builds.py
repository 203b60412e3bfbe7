"""The stand-in CUDA extension builds (flash-attn, sgl-kernel): recorded knobs, OOM kill, arch-specific import."""

import io
import json
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from _mirror_util import ROOT, clean_env

PROFILES = ROOT / "sim" / "gpu" / "profiles"
STUBS = ROOT / "sim" / "mirrors" / "stubs"


@pytest.fixture(scope="module")
def cuda_home(built, tmp_path_factory):
    d = tmp_path_factory.mktemp("cuda")
    deb = built["out"] / "www/nvidia/compute/cuda/repos/debian12/x86_64/cuda-toolkit-12-8_12.8.1-1_amd64.deb"
    subprocess.run(["dpkg-deb", "-x", deb, d], check=True)
    return d / "usr/local/cuda-12.8"


def source(tmp_path, name):
    src = tmp_path / name
    shutil.copytree(STUBS / name, src)
    shutil.copytree(STUBS / "simbuild", src / "_simbuild")
    return src


def pip_install(python, src, cuda_home, isolation=False, **env):
    cmd = [python, "-m", "pip", "install", "-v", "--no-index"]
    if not isolation:
        cmd.append("--no-build-isolation")
    env = clean_env(CUDA_HOME=str(cuda_home), SIM_BUILD_TIME_SCALE="0", **env)
    return subprocess.run([*cmd, str(src)], capture_output=True, text=True, env=env, check=False, timeout=120)


def import_on(python, module, profile):
    env = clean_env(SIM_GPU_PROFILE=str(PROFILES / f"{profile}.json"))
    return subprocess.run([python, "-c", f"import {module}"], capture_output=True, text=True, env=env, check=False)


def build_info(python, module):
    code = f"import importlib.util, pathlib; print(pathlib.Path(importlib.util.find_spec('{module}').origin).parent)"
    pkg = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True, env=clean_env()).stdout
    return json.loads((Path(pkg.strip()) / "_build_info.json").read_text())


def test_flash_attn_build_records_knobs_and_is_arch_specific(torch_venv, cuda_home, tmp_path):
    py = torch_venv["python"]
    proc = pip_install(
        py,
        source(tmp_path, "flash-attention"),
        cuda_home,
        MAX_JOBS="2",
        NVCC_THREADS="2",
        FLASH_ATTN_CUDA_ARCHS="80;90",
        SIM_BUILD_RAM_MIB="65536",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    info = build_info(py, "flash_attn")
    assert info["env"]["MAX_JOBS"] == "2" and info["env"]["NVCC_THREADS"] == "2"
    assert (info["jobs"], info["nvcc_threads"], info["archs"]) == (2, 2, ["80", "90"])
    assert (info["cuda"], info["torch_cuda"], info["peak_mib"]) == ("12.8", "12.8", 2 * 2 * 2048)
    assert import_on(py, "flash_attn", "h100-80gb-x8").returncode == 0
    bad = import_on(py, "flash_attn", "rtx-pro-6000-x8")
    assert bad.returncode != 0 and "ImportError" in bad.stderr
    assert "no kernel image is available for execution on the device" in bad.stderr


def test_flash_attn_build_killed_when_over_ram(torch_venv, cuda_home, tmp_path):
    src = source(tmp_path, "flash-attention")
    env = clean_env(
        CUDA_HOME=str(cuda_home), SIM_BUILD_TIME_SCALE="0", MAX_JOBS="4", NVCC_THREADS="4", SIM_BUILD_RAM_MIB="8192"
    )
    code = "import sys; sys.path.insert(0, '_simbuild'); import sim_build_backend as b; b.build_wheel('.')"
    proc = subprocess.run(
        [torch_venv["python"], "-c", code], cwd=src, capture_output=True, text=True, env=env, check=False
    )
    assert proc.returncode == 137 and "Killed" in proc.stderr
    via_pip = pip_install(
        torch_venv["python"], src, cuda_home, MAX_JOBS="4", NVCC_THREADS="4", SIM_BUILD_RAM_MIB="8192"
    )
    assert via_pip.returncode != 0 and "Killed" in via_pip.stdout + via_pip.stderr


def test_build_needs_torch_so_build_isolation_fails(torch_venv, cuda_home, tmp_path):
    proc = pip_install(torch_venv["python"], source(tmp_path, "flash-attention"), cuda_home, isolation=True)
    assert proc.returncode != 0 and "No module named 'torch'" in proc.stdout + proc.stderr


SCOPE = ROOT / "roles" / "sglang" / "files" / "sgl_kernel_scope.py"
SM120A = "-gencode=arch=compute_120a,code=sm_120a"


def scoped(src, *args):
    proc = subprocess.run(
        [sys.executable, SCOPE, src / "CMakeLists.txt", *args], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_sgl_kernel_compiles_its_own_gencode_list_and_ignores_torch_arch_list(torch_venv, cuda_home, server, tmp_path):
    py = torch_venv["python"]
    src = source(tmp_path, "sgl-kernel")
    text = (src / "CMakeLists.txt").read_text()  # upstream's gencode list; only the downloads go to the mirror
    mirrored = re.sub(
        r"(?m)GIT_REPOSITORY https://github\.com/(\S+?)(?:\.git)?$", rf"GIT_REPOSITORY {server['git']}\1.git", text
    )
    (src / "CMakeLists.txt").write_text(mirrored)
    proc = pip_install(
        py,
        src,
        cuda_home,
        CMAKE_BUILD_PARALLEL_LEVEL="2",
        CMAKE_ARGS="-DSGL_KERNEL_COMPILE_THREADS=1",
        TORCH_CUDA_ARCH_LIST="12.0a",
        SIM_BUILD_RAM_MIB="4096",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    info = build_info(py, "sgl_kernel")
    # TORCH_CUDA_ARCH_LIST=12.0a changed nothing: the file's own list for CUDA 12.8, compiled for two targets.
    assert info["archs"] == ["90", "80", "89", "100a", "120a", "90a"]
    assert info["cmake_targets"] == 2 and info["units"] == 120


def test_sgl_kernel_scoped_by_the_role_script_compiles_exactly_sm120a(torch_venv, cuda_home, server, tmp_path):
    py = torch_venv["python"]
    src = source(tmp_path, "sgl-kernel")
    summary = scoped(src, f"--gencode={SM120A}", "--git-mirror", server["git"].rstrip("/"))
    assert len(summary["removed"]) == 7 and summary["gencodes"] == [SM120A]
    assert all(r.startswith(server["git"]) for r in summary["repositories"]) and len(summary["repositories"]) == 4
    proc = pip_install(
        py,
        src,
        cuda_home,
        CMAKE_BUILD_PARALLEL_LEVEL="2",
        CMAKE_ARGS="-DSGL_KERNEL_COMPILE_THREADS=1",
        SIM_BUILD_RAM_MIB="4096",
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    info = build_info(py, "sgl_kernel")
    assert info["gencodes"] == [SM120A]
    assert sorted(info["fetched"]) == ["repo-cutlass", "repo-deepgemm", "repo-flashinfer", "repo-mscclpp"]
    assert import_on(py, "sgl_kernel", "rtx-pro-6000-x8").returncode == 0
    assert "no kernel image" in import_on(py, "sgl_kernel", "h100-80gb-x8").stderr


def test_sgl_kernel_configure_fails_when_its_dependencies_cannot_be_cloned(torch_venv, cuda_home, tmp_path):
    src = source(tmp_path, "sgl-kernel")
    scoped(src, f"--gencode={SM120A}", "--git-mirror", "http://127.0.0.1:9/git")  # nothing listens there
    proc = pip_install(torch_venv["python"], src, cuda_home, SIM_BUILD_RAM_MIB="4096")
    assert proc.returncode != 0
    assert "Failed to clone repository: 'http://127.0.0.1:9/git/NVIDIA/cutlass.git'" in proc.stdout + proc.stderr


def test_scope_script_refuses_a_cmake_file_without_the_flag_list(tmp_path):
    (tmp_path / "CMakeLists.txt").write_text("project(x)\n")
    proc = subprocess.run(
        [sys.executable, SCOPE, tmp_path / "CMakeLists.txt", f"--gencode={SM120A}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert proc.stderr.strip().startswith("sgl-kernel scoping failed: expected a set(SGL_KERNEL_CUDA_FLAGS ...)")
    assert (tmp_path / "CMakeLists.txt").read_text() == "project(x)\n"


def test_sgl_kernel_default_threads_oom_on_small_host(torch_venv, cuda_home, server, tmp_path):
    src = source(tmp_path, "sgl-kernel")
    scoped(src, f"--gencode={SM120A}", "--git-mirror", server["git"].rstrip("/"))
    proc = pip_install(torch_venv["python"], src, cuda_home, MAX_JOBS="2", SIM_BUILD_RAM_MIB="24000")
    assert proc.returncode != 0 and "Killed" in proc.stdout + proc.stderr  # 2 jobs x 32 threads x 1 GiB


def test_time_scales_with_work(torch_venv, cuda_home, tmp_path):
    py = torch_venv["python"]
    src = source(tmp_path, "flash-attention")
    env = clean_env(
        CUDA_HOME=str(cuda_home),
        SIM_BUILD_TIME_SCALE="0.0005",
        MAX_JOBS="4",
        NVCC_THREADS="1",
        FLASH_ATTN_CUDA_ARCHS="80",
        SIM_BUILD_RAM_MIB="65536",
    )
    code = "import sys; sys.path.insert(0, '_simbuild'); import sim_build_backend as b; b.build_wheel('.')"
    subprocess.run([py, "-c", code], cwd=src, capture_output=True, text=True, env=env, check=True)
    whl = next(src.glob("*.whl"))
    info = json.loads(zipfile.ZipFile(whl).read("flash_attn/_build_info.json"))
    assert info["nominal_seconds"] == 1 * 72 * 60 / 4
    assert info["elapsed_seconds"] >= info["nominal_seconds"] * 0.0005 * 0.9


def test_real_sglang_imports_its_version_with_only_the_wheels_the_index_serves(built, server, tmp_path):
    """The real 0.5.8 and 0.5.9 sources: `import sglang` fails in a bare venv and prints the release's own version
    once the requirements the mirror read from that release are installed from the local index alone."""
    import sglang_releases

    imports = json.loads((built["out"] / "www" / "pypi" / "sglang-imports.json").read_text())
    venv = tmp_path / "v"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, env=clean_env())
    py = str(venv / "bin" / "python")
    for release in ("0.5.8", "0.5.9"):
        sdist = sglang_releases.cached_sdists()[release]
        with tarfile.open(sdist) as tar:
            tar.extractall(tmp_path, members=[m for m in tar.getmembers() if "/sglang/" in m.name], filter="data")
        env = clean_env(PYTHONPATH=str(tmp_path / f"sglang-{release}"))
        code = "import sglang; print(sglang.__version__)"
        bare = subprocess.run([py, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, check=False)
        if release == "0.5.8":
            assert bare.returncode != 0 and "ModuleNotFoundError" in bare.stderr, bare.stderr
        install = subprocess.run(
            [py, "-m", "pip", "install", "-q", "--index-url", server["pypi"], *imports["releases"][release]],
            capture_output=True,
            text=True,
            env=clean_env(),
            check=False,
        )
        assert install.returncode == 0, install.stderr
        done = subprocess.run([py, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path, check=False)
        assert done.stdout.strip() == release, done.stderr


def _sdist(tmp_path, files):
    path = tmp_path / "sglang-9.9.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"sglang-9.9/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_import_scan_counts_module_level_imports_as_the_release_declares_them(tmp_path):
    """Function bodies and guarded optional imports are not needed at import time; the requirement text is the
    release's own (version specifier included)."""
    import sglang_deps

    sdist = _sdist(
        tmp_path,
        {
            "pyproject.toml": '[project]\nname = "sglang"\ndependencies = ["numpy", "requests>=2", "IPython"]\n',
            "sglang/__init__.py": "import json\nfrom sglang.lang import api\n",
            "sglang/lang/__init__.py": "",
            "sglang/lang/api.py": "from .ir import X\n\ndef later():\n    import requests\n",
            "sglang/lang/ir.py": (
                "import numpy as np\ntry:\n    import optional_thing\nexcept ImportError:\n    pass\n"
                "class X:\n    from IPython import display\n"
            ),
        },
    )
    assert sglang_deps.import_requirements(sdist, cache=tmp_path / "cache") == ["IPython", "numpy"]
    broken = _sdist(
        tmp_path, {"pyproject.toml": "[project]\ndependencies = []\n", "sglang/__init__.py": "import zmq\n"}
    )
    with pytest.raises(ValueError, match=r"import sglang loads \['zmq'\], which pyproject.toml does not declare"):
        sglang_deps.import_requirements(broken, cache=tmp_path / "cache")
