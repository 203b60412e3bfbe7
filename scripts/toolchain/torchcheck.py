"""torch, real: the role's torch check (roles/python_env/files/torch_check.py) against the real torch wheels.

- torch 2.9.1 as the python_env role pins it (python_env_torch_version). PyPI's Linux x86_64 wheel of 2.9.1 is the
  CUDA 12.8 build (torch.version.cuda == "12.8", Requires-Dist nvidia-*-cu12 12.8), i.e. the variant the role picks
  for a CUDA 12.8 toolkit (build_plan.torch_variant("12.8") == "cu128"); the PyTorch per-variant index the role uses
  is not reachable from here. It is installed with its dependencies (the nvidia-*-cu12 wheels), as on a host.
- torch 2.7.1, PyPI's CUDA 12.6 build (cu126: no sm_120 kernels), for the refusal. Installed without its own
  nvidia-* dependencies: its CUDA libraries are resolved from the 2.9.1 environment (same sonames, libcudart.so.12,
  libcudnn.so.9, ...), which saves about 3 GB of downloads; torch.version.cuda and the arch list it reports are
  compiled into the wheel itself.

Wheels are downloaded once into TOOLCHAIN_CACHE/wheels/<name> and installed from there, so the figures separate
download from install. Heavy (about 4 GB of downloads and 7 GB installed for 2.9.1): `make toolchain-check`, not
`make test`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from . import cache

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "roles" / "python_env" / "files" / "torch_check.py"
RTX = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
# (GPU sm, name) checked against the real arch lists; L40S (sm_89) and GB10 (sm_121) are covered by same-major SASS.
GPUS = {
    "sm_120": RTX,
    "sm_121": "NVIDIA GB10",
    "sm_100": "NVIDIA B200",
    "sm_90": "NVIDIA H100 80GB HBM3",
    "sm_89": "NVIDIA L40S",
}


def _download(spec: str, name: str, deps=True) -> dict:
    dest = cache.CACHE / "wheels" / name
    done = dest / ".llmops-done"
    if done.is_file():
        return json.loads(done.read_text())
    dest.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    cache._run([sys.executable, "-m", "pip", "download", "-q", *([] if deps else ["--no-deps"]), "-d", str(dest), spec])
    info = {
        "spec": spec,
        "wheels": len(list(dest.glob("*.whl"))),
        "bytes": sum(p.stat().st_size for p in dest.glob("*.whl")),
        "download_seconds": round(time.monotonic() - start, 1),
    }
    done.write_text(json.dumps(info))
    return info


def _install(name: str, spec: str, wheels: Path, deps=True, extra_site=None) -> dict:
    root = cache.CACHE / "venvs" / name
    done = root / ".llmops-done"
    if done.is_file():
        return json.loads(done.read_text())
    start = time.monotonic()
    cache._run([sys.executable, "-m", "venv", "--clear", str(root)])
    py = root / "bin" / "python"
    args = ["--no-index", "--find-links", str(wheels)]
    if not deps:
        # torch's pure-Python requirements, from the 2.9.1 download (same names)
        reqs = ["filelock", "typing-extensions", "sympy", "networkx", "jinja2", "fsspec"]
        cache._run([str(py), "-m", "pip", "install", "-q", *args, "--find-links", str(extra_site["wheels"]), *reqs])
        args.append("--no-deps")
    cache._run([str(py), "-m", "pip", "install", "-q", *args, spec])
    if extra_site:
        site = next(root.glob("lib/python*/site-packages"))
        (site / "llmops-cuda-libs.pth").write_text(str(extra_site["site"]) + "\n")
    size = int(subprocess.run(["du", "-sb", str(root)], capture_output=True, text=True, check=True).stdout.split()[0])
    info = {"python": str(py), "install_seconds": round(time.monotonic() - start, 1), "bytes": size}
    done.write_text(json.dumps(info))
    return info


def check(python: str, sms, cuda: str) -> dict:
    """Run the role's torch_check.py with this Python; (exit status, JSON, stderr, seconds)."""
    argv = [python, str(CHECK), "--cuda", cuda]
    for sm in sms:
        argv += [f"--gpu-sm={sm}", f"--gpu-name={GPUS.get(sm, sm)}"]
    start = time.monotonic()
    proc = subprocess.run(
        argv, capture_output=True, text=True, check=False, timeout=600, env=dict(os.environ, PYTHONWARNINGS="ignore")
    )
    return {
        "gpus": list(sms),
        "cuda": cuda,
        "rc": proc.returncode,
        "result": json.loads(proc.stdout) if proc.stdout.strip() else None,
        "stderr": proc.stderr.strip(),
        "seconds": round(time.monotonic() - start, 1),
    }


ROLE_TASKS = (
    "Read what the installed torch was built for and check it against the GPUs and the toolkit",
    "Keep what torch reported",
    "Refuse a torch build that does not match the GPUs' architecture or the CUDA toolkit",
)


def role_tasks(venv: Path, cuda: str, sm="sm_120", name=RTX) -> dict:
    """The python_env role's own torch tasks, taken from roles/python_env/tasks/main.yml as they are at run time,
    run by ansible-playbook (local connection) against this virtualenv: {'rc', 'msg'}."""
    import tempfile

    import yaml

    tasks = yaml.safe_load((ROOT / "roles" / "python_env" / "tasks" / "main.yml").read_text())
    picked = [t for t in tasks if t.get("name") in ROLE_TASKS]
    if len(picked) != len(ROLE_TASKS):
        raise cache.ToolchainError(f"expected the tasks {ROLE_TASKS} in roles/python_env/tasks/main.yml")
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": picked,
            "vars": {
                "ansible_connection": "local",
                "ansible_python_interpreter": sys.executable,
                "llmops_venv": str(venv),
                "python_env_set_venv": str(venv),  # the build set's venv the role's tasks run torch from
                # on a host the check runs as the server's account in its unit's sandbox; here, as this process
                "llmops_defaults_as_server": [],
                "python_env_cuda_resolved": cuda,
                "python_env_torch_version": "unused",
                "python_env_torch_variant_resolved": "unused",
                "preflight_gpu": {"gpus": [{"sm": sm, "name": name}], "sm_list": [sm]},
            },
        }
    ]
    with tempfile.TemporaryDirectory(prefix="llmops-torch-role-") as tmp:
        (Path(tmp) / "files").mkdir()
        (Path(tmp) / "files" / "torch_check.py").symlink_to(CHECK)  # the role's files/, found next to the play
        (Path(tmp) / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
        proc = subprocess.run(
            [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "play.yml"],
            cwd=tmp,
            capture_output=True,
            text=True,
            check=False,
            timeout=900,
            env=dict(os.environ, PYTHONWARNINGS="ignore", ANSIBLE_CONFIG=str(ROOT / "ansible.cfg")),
        )
    out = proc.stdout + proc.stderr
    msg = next(
        (line.split('"msg": ', 1)[1].rstrip("}").strip('"') for line in out.splitlines() if '"msg": ' in line), ""
    )
    return {"rc": proc.returncode, "msg": msg, "traceback": "Traceback" in out}


def torch_cmake_step(python: str) -> bool:
    """Whether the real torch's CMake package still turns CMAKE_CUDA_ARCHITECTURES off (see sglkernel_cmake)."""
    from . import sglkernel_cmake

    site = subprocess.run(
        [python, "-c", "import torch, os; print(os.path.dirname(torch.__file__))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    text = (Path(site) / "share" / "cmake" / "Caffe2" / "public" / "cuda.cmake").read_text()
    return "if(DEFINED CMAKE_CUDA_ARCHITECTURES)" in text and sglkernel_cmake.TORCH_STEP_MARK in text


def run() -> dict:
    new = _download("torch==2.9.1", "torch-2.9.1")
    new_env = _install("torch-2.9.1", "torch==2.9.1", cache.CACHE / "wheels" / "torch-2.9.1")
    old = _download("torch==2.7.1", "torch-2.7.1", deps=False)
    site = next((cache.CACHE / "venvs" / "torch-2.9.1").glob("lib/python*/site-packages"))
    old_env = _install(
        "torch-2.7.1",
        "torch==2.7.1",
        cache.CACHE / "wheels" / "torch-2.7.1",
        deps=False,
        extra_site={"site": site, "wheels": cache.CACHE / "wheels" / "torch-2.9.1"},
    )
    checks = [check(new_env["python"], [sm], "12.8") for sm in GPUS]
    checks.append(check(new_env["python"], list(GPUS), "12.8"))
    checks.append(check(new_env["python"], ["sm_120"], "13.0"))  # a cu128 torch beside a CUDA 13.0 toolkit
    checks.append(check(old_env["python"], ["sm_120"], "12.6"))  # the cu126 torch for an RTX PRO 6000
    ok = (
        all(c["rc"] == 0 for c in checks[: len(GPUS) + 1])
        and checks[-2]["rc"] == 1
        and checks[-1]["rc"] == 1
        and checks[0]["result"]["cuda"] == "12.8"
        and checks[-1]["result"]["cuda"] == "12.6"
        and "sm_120" in checks[-1]["result"]["missing"]
        and all(c["stderr"].count("\n") == 0 for c in checks)
    )
    # The SM120 probe as the role runs it on a builder: with the real torch (patched capability) and the Triton that
    # torch brought along; it must agree with the stand-in-torch run of make test byte for byte.
    from . import sm120

    probe_env = dict(os.environ, TRITON_CACHE_DIR=str(cache.CACHE / "triton-cache"), PYTHONWARNINGS="ignore")
    sm120_real = {}
    for label, release, tree in sm120.trees()[:3]:
        rows = {}
        for mode, py in (("real", new_env["python"]), ("standin", str(cache.triton_python()[0]))):
            proc = subprocess.run(
                [
                    py,
                    str(sm120.PROBE),
                    "--tree",
                    str(tree),
                    "--file",
                    sm120.kernel_file(release),
                    "--torch",
                    mode,
                    "--capability",
                    "120",
                ],
                capture_output=True,
                text=True,
                check=False,
                timeout=1800,
                env=probe_env,
            )
            rows[mode] = json.loads(proc.stdout) if proc.stdout.strip() else {"error": proc.stderr.strip()}
        sm120_real[label] = {
            "torch": rows["real"].get("torch"),
            "shared": [r["shared"] for r in rows["real"].get("rows", [])],
            "agrees_with_standin": rows["real"].get("rows") == rows["standin"].get("rows"),
        }
    # flash-attn without a token it knows: setup.py passes no -gencode and torch's BuildExtension decides.
    from . import archprobe

    home = cache.cuda_toolkit("13.0")
    fallback = []
    for env in ({}, {"TORCH_CUDA_ARCH_LIST": "8.6"}):
        try:
            got = archprobe.flash_attn_flags(home, "86", real_torch_python=new_env["python"], **env)
            fallback.append({"env": env, "setup_gencode": got["gencode"], "torch_adds": got["torch_adds"]})
        except cache.ToolchainError as e:
            fallback.append({"env": env, "error": str(e)})
    ok = ok and all(v["agrees_with_standin"] and v["shared"] for v in sm120_real.values())
    role = {
        "2.9.1+cu128 for sm_120, CUDA 12.8": role_tasks(cache.CACHE / "venvs" / "torch-2.9.1", "12.8"),
        "2.7.1+cu126 for sm_120, CUDA 12.6": role_tasks(cache.CACHE / "venvs" / "torch-2.7.1", "12.6"),
    }
    accepted, refused = role.values()
    ok = ok and accepted["rc"] == 0 and refused["rc"] != 0 and not refused["traceback"]
    ok = ok and refused["msg"].startswith("torch 2.7.1+cu126 has no kernels for sm_120")
    return {
        "role_tasks": role,
        "sm120_probe_with_real_torch": sm120_real,
        "flash_attn_archs_86_fallback": fallback,
        "torch_2_9_1": {"download": new, "install": new_env},
        "torch_2_7_1": {"download": old, "install": old_env},
        "torch_cmake_turns_cuda_architectures_off": torch_cmake_step(new_env["python"]),
        "checks": checks,
        "ok": ok,
    }
