"""The simple index: pip installs the stand-in torch from the mirror alone; torch.cuda follows the GPU profile."""

import json
import subprocess
import sys

from _mirror_util import ROOT, clean_env, http

PROFILES = ROOT / "sim" / "gpu" / "profiles"


def run_py(python, code, tmp_path, *, profile="rtx-pro-6000-x8", driver="580.95.05", pythonpath=None):
    drv = tmp_path / "driver-version"
    if driver:
        drv.write_text(driver + "\n")
    env = clean_env(
        SIM_GPU_PROFILE=str(PROFILES / f"{profile}.json"),
        SIM_GPU_DRIVER_FILE=str(drv),
        SIM_GPU_LOADED_FILE=str(tmp_path / "loaded"),
        SIM_GPU_USAGE_DIR=str(tmp_path / "used"),
    )
    if pythonpath:
        env["PYTHONPATH"] = str(pythonpath)
    proc = subprocess.run([python, "-c", code], capture_output=True, text=True, env=env, check=False)
    return proc


def test_index_is_pep503(server):
    status, headers, body = http(server["pypi"] + "torch/")
    assert status == 200 and headers["Content-Type"].startswith("text/html")
    assert 'href="../../files/torch-2.9.1%2Bcu128-py3-none-any.whl#sha256=' in body.decode()
    status, _, body = http(server["torch_index"] + "cu124/torch/")
    assert status == 200 and "2.5.1%2Bcu124" in body.decode() and "cu128" not in body.decode()


def test_pip_installs_torch_cu128_from_mirror_only(torch_venv, tmp_path):
    assert "Successfully installed torch-2.9.1+cu128" in torch_venv["pip_output"]
    code = (
        "import json, torch; print(json.dumps([torch.__version__, torch.version.cuda, torch.cuda.is_available(), "
        "torch.cuda.device_count(), torch.cuda.get_device_capability(0), torch.cuda.get_device_name(1), "
        "torch.cuda.mem_get_info(0), torch.cuda.get_arch_list()])); torch.zeros(2).cuda()"
    )
    proc = run_py(torch_venv["python"], code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    version, cuda, avail, count, cap, name, mem, archs = json.loads(proc.stdout)
    assert (version, cuda, avail, count, cap) == ("2.9.1+cu128", "12.8", True, 8, [12, 0])
    assert name == "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    assert mem == [97887 << 20, 97887 << 20]
    assert "sm_120" in archs


def test_cuda_unavailable_without_driver_or_gpus(torch_venv, tmp_path):
    code = "import torch; print(torch.cuda.is_available(), torch.cuda.device_count())"
    assert run_py(torch_venv["python"], code, tmp_path, driver=None).stdout.split() == ["False", "0"]
    assert run_py(torch_venv["python"], code, tmp_path, profile="no-gpu").stdout.split() == ["False", "0"]
    # CUDA 12.x builds accept an R575 driver (only cu13x needs R580)
    assert run_py(torch_venv["python"], code, tmp_path, driver="575.57.08").stdout.split() == ["True", "8"]


def test_cu124_lacks_sm120(torch_venv, server, tmp_path):
    target = tmp_path / "t124"
    proc = subprocess.run(
        [
            torch_venv["python"],
            "-m",
            "pip",
            "install",
            "--target",
            target,
            "--index-url",
            server["torch_index"] + "cu124/",
            "torch",
        ],
        capture_output=True,
        text=True,
        env=clean_env(),
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    code = "import torch; print(torch.__version__, torch.version.cuda, ' '.join(torch.cuda.get_arch_list()))"
    out = run_py(sys.executable, code, tmp_path, pythonpath=target).stdout.split()
    assert out[:2] == ["2.5.1+cu124", "12.4"] and "sm_90" in out and "sm_120" not in out
    fail = run_py(sys.executable, "import torch; torch.zeros(1).cuda()", tmp_path, pythonpath=target)
    assert fail.returncode != 0 and "no kernel image is available for execution on the device" in fail.stderr
