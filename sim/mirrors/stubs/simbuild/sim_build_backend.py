"""PEP 517 build backend of the stand-in CUDA extension packages (flash-attn, sgl-kernel) used on simulated nodes.

Pure Python, stdlib only: nothing is compiled. The build behaves like the real one where roles can get it wrong:
- it needs torch importable (so pip must run with --no-build-isolation) and an nvcc whose CUDA major matches
  torch.version.cuda;
- it reads the parallelism and architecture knobs of the real build and records them in <pkg>/_build_info.json;
- it takes time proportional to archs x units / (jobs x nvcc threads) (scaled by SIM_BUILD_TIME_SCALE);
- it dies like the OOM killer ("Killed", exit status 137) when jobs x nvcc threads x MiB-per-thread exceeds the RAM
  (MemTotal, or SIM_BUILD_RAM_MIB);
- the built module raises ImportError ("no kernel image is available for execution on the device") on a node whose
  GPU architecture was not built.
Configuration comes from [tool.simbuild] in pyproject.toml.
"""

import base64
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
import zipfile
from pathlib import Path

ROOT = Path.cwd()
RUNTIME = Path(__file__).with_name("sim_runtime.py")
ENV_KEYS = [
    "MAX_JOBS",
    "NVCC_THREADS",
    "FLASH_ATTN_CUDA_ARCHS",
    "FLASH_ATTENTION_FORCE_BUILD",
    "TORCH_CUDA_ARCH_LIST",
    "SGL_KERNEL_COMPILE_THREADS",
    "CMAKE_BUILD_PARALLEL_LEVEL",
    "CMAKE_ARGS",
    "CUDA_HOME",
    "SIM_BUILD_TIME_SCALE",
    "SIM_BUILD_RAM_MIB",
    "SIM_BUILD_MIB_PER_THREAD",
]


def _config():
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return data["project"], data["tool"]["simbuild"]


def _die_oom(done, total, unit):
    sys.stdout.flush()
    sys.stderr.write(f"[{done}/{total}] {unit}\nKilled\nninja: build stopped: subcommand failed.\n")
    sys.stderr.flush()
    os._exit(137)


def _nvcc():
    candidates = []
    if os.environ.get("CUDA_HOME"):
        candidates.append(Path(os.environ["CUDA_HOME"]) / "bin" / "nvcc")
    candidates.append(Path("/usr/local/cuda/bin/nvcc"))
    found = shutil.which("nvcc")
    if found:
        candidates.append(Path(found))
    for c in candidates:
        if c.exists():
            out = subprocess.run([str(c), "--version"], capture_output=True, text=True, check=False).stdout
            m = re.search(r"release (\d+)\.(\d+)", out)
            if m:
                return str(c), (int(m.group(1)), int(m.group(2)))
    raise OSError("CUDA_HOME environment variable is not set. Please set it to your CUDA install root.")


def _ram_mib():
    if os.environ.get("SIM_BUILD_RAM_MIB"):
        return int(os.environ["SIM_BUILD_RAM_MIB"])
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    return 0


def _cmake_define(name):
    m = re.search(rf"-D{name}(?::\w+)?=(\S+)", os.environ.get("CMAKE_ARGS", ""))
    return m.group(1) if m else None


def _int_env(*names, default):
    for n in names:
        v = os.environ.get(n)
        if v:
            return int(v)
    return default


_GENCODE = re.compile(r'"-gencode=arch=compute_(\w+),code=sm_(\w+)"')
_IF = re.compile(r"^\s*if\s*\((.*)\)\s*$")


def _cmake_condition(cond, cuda, options):
    m = re.fullmatch(r'\s*"\$\{CUDA_VERSION\}"\s+VERSION_GREATER_EQUAL\s+"(\d+)\.(\d+)"\s*', cond)
    if m:
        return cuda >= (int(m.group(1)), int(m.group(2)))
    name = cond.strip()
    value = _cmake_define(name) or options.get(name, "OFF")
    return value.upper() not in ("OFF", "0", "FALSE", "NO", "")


def _cmake_gencodes(text, cuda):
    """The -gencode flags a CMakeLists.txt compiles, evaluating its if()/else()/endif() on CUDA version and options
    (-D in CMAKE_ARGS, else the option() default). TORCH_CUDA_ARCH_LIST plays no part, as in upstream's file."""
    options = {m.group(1): m.group(2) for m in re.finditer(r'option\((\w+)\s+"[^"]*"\s+(\w+)\)', text)}
    stack, out = [], []
    for line in text.splitlines():
        code = line.split("#", 1)[0]
        m = _IF.match(code)
        if m:
            stack.append(_cmake_condition(m.group(1), cuda, options))
        elif re.match(r"^\s*else\s*\(\s*\)", code):
            stack[-1] = not stack[-1]
        elif re.match(r"^\s*endif\s*\(", code):
            stack.pop()
        elif all(stack):
            out += [f"{a}" for a, _ in _GENCODE.findall(code)]
    return out


def _cmake_fetch(text):
    """Clone what FetchContent_Declare names (here: ask the server for the tag) unless FETCHCONTENT_SOURCE_DIR_<NAME>
    points at a local copy; fail like CMake's configure step when a repository cannot be reached."""
    fetched = {}
    for name, url, tag in re.findall(
        r"FetchContent_Declare\(\s*(\S+)\s+GIT_REPOSITORY\s+(\S+)\s+GIT_TAG\s+(\S+)", text
    ):
        local = _cmake_define(f"FETCHCONTENT_SOURCE_DIR_{name.upper()}")
        if local and Path(local).is_dir():
            fetched[name] = local
            continue
        proc = subprocess.run(
            ["git", "ls-remote", "--exit-code", url, f"refs/tags/{tag}"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
        )
        if proc.returncode != 0:
            raise RuntimeError(
                f"CMake Error at CMakeLists.txt (FetchContent_Populate):\n  Failed to clone repository: '{url}' "
                f"(tag {tag}): {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'no such tag'}"
            )
        fetched[name] = url
    return fetched


def _archs(kind, cuda):
    ge128 = cuda >= (12, 8)
    if kind == "flash-attn":
        # Like flash-attention's setup.py (v2.7.3 on): only the tokens 80, 90, 100, 120 add a -gencode; any other
        # token is ignored, and with none left the build falls back to torch's default arch list.
        default = ["80", "90"] + (["100", "120"] if ge128 else [])
        raw = os.environ.get("FLASH_ATTN_CUDA_ARCHS")
        if raw:
            asked = [a.strip() for a in raw.replace(",", ";").split(";") if a.strip()]
            archs = [a for a in asked if a in ("80", "90", "100", "120")] or default
        else:
            archs = default
    else:
        raw = os.environ.get("TORCH_CUDA_ARCH_LIST")
        if raw:
            archs = [a.replace("+PTX", "").replace(".", "") for a in re.split(r"[;\s]+", raw.strip()) if a]
        else:
            below = (_cmake_define("ENABLE_BELOW_SM90") or "ON").upper() not in ("OFF", "0", "FALSE")
            archs = (["80", "89"] if below else []) + ["90"] + (["100a", "120a"] if ge128 else [])
    for a in archs:
        num = int(re.sub(r"\D", "", a) or 0)
        if num >= 100 and not ge128:
            raise RuntimeError(f"nvcc fatal   : Unsupported gpu architecture 'compute_{a}'")
    return archs


def _build(kind_cfg):
    project, cfg = kind_cfg
    kind = cfg["kind"]
    import torch

    nvcc, cuda = _nvcc()
    torch_cuda = getattr(torch.version, "cuda", None)
    if not torch_cuda:
        raise RuntimeError("torch.version.cuda is None: this build needs a CUDA build of torch")
    if int(torch_cuda.split(".")[0]) != cuda[0]:
        raise RuntimeError(
            f"The detected CUDA version ({cuda[0]}.{cuda[1]}) mismatches the version that was used to compile "
            f"PyTorch ({torch_cuda}). Please make sure to use the same CUDA versions."
        )
    cmake = ROOT / "CMakeLists.txt"
    fetched, targets = None, 1
    if kind == "sgl-kernel" and cmake.exists():
        text = cmake.read_text()
        fetched = _cmake_fetch(text)
        archs = _cmake_gencodes(text, cuda)
        if not archs:
            raise RuntimeError("CMakeLists.txt compiles no -gencode target")
        for a in archs:
            if int(re.sub(r"\D", "", a)) >= 100 and cuda < (12, 8):
                raise RuntimeError(f"nvcc fatal   : Unsupported gpu architecture 'compute_{a}'")
        targets = len(re.findall(r"^\s*Python_add_library\(", text, re.M)) or 1
    else:
        archs = _archs(kind, cuda)
    cpus = os.cpu_count() or 1
    if kind == "flash-attn":
        jobs = _int_env("MAX_JOBS", default=cpus)
        threads = _int_env("NVCC_THREADS", default=4)
    else:
        jobs = _int_env("CMAKE_BUILD_PARALLEL_LEVEL", "MAX_JOBS", default=cpus)
        threads = int(os.environ.get("SGL_KERNEL_COMPILE_THREADS") or _cmake_define("SGL_KERNEL_COMPILE_THREADS") or 32)
    mib_per_thread = _int_env("SIM_BUILD_MIB_PER_THREAD", default=int(cfg["mib_per_thread"]))
    ram = _ram_mib()
    peak = jobs * threads * mib_per_thread
    units = int(cfg["units"]) * targets
    total = units
    nominal = len(archs) * units * float(cfg["seconds_per_unit"]) / (jobs * min(threads, len(archs)))
    scale = float(os.environ.get("SIM_BUILD_TIME_SCALE", "0.001"))
    print(
        f"sim-build {project['name']} {project['version']}: CUDA {cuda[0]}.{cuda[1]} ({nvcc}),"
        f" torch {torch.__version__},"
        f" archs {';'.join(archs)}, {jobs} jobs x {threads} nvcc threads x {mib_per_thread} MiB = {peak} MiB"
        f" (RAM {ram} MiB), nominal {nominal:.0f} s",
        flush=True,
    )
    start = time.monotonic()
    step = nominal * scale / units
    for i in range(1, units + 1):
        unit = f"Building CUDA object {cfg['ext_module']} unit {i:03d} ({';'.join(archs)})"
        if ram and peak > ram and i > min(jobs, units):
            _die_oom(i, total, unit)
        if step > 0:
            time.sleep(step)
        if i in (1, units) or i % max(1, units // 8) == 0:
            print(f"[{i}/{total}] {unit}", flush=True)
    return {
        "package": project["name"],
        "version": project["version"],
        "kind": kind,
        "env": {k: os.environ.get(k) for k in ENV_KEYS},
        "jobs": jobs,
        "nvcc_threads": threads,
        "archs": archs,
        "cuda": f"{cuda[0]}.{cuda[1]}",
        "nvcc": nvcc,
        "torch_version": torch.__version__,
        "torch_cuda": torch_cuda,
        "ram_mib": ram,
        "peak_mib": peak,
        "mib_per_thread": mib_per_thread,
        "units": units,
        "nominal_seconds": round(nominal, 1),
        "elapsed_seconds": round(time.monotonic() - start, 3),
        "ext_module": cfg["ext_module"],
        "gencodes": [f"-gencode=arch=compute_{a},code=sm_{a}" for a in archs] if fetched is not None else None,
        "cmake_targets": targets,
        "fetched": fetched,
    }


def _record_hash(data):
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _wheel(wheel_directory, info):
    project, cfg = _config()
    name, version = project["name"], project["version"]
    dist = re.sub(r"[-_.]+", "_", name)
    files = {}
    pkg_root = ROOT / cfg.get("package_root", ".")
    pkg = cfg["package"]
    for src in sorted((pkg_root / pkg).rglob("*")):
        if src.is_file() and "__pycache__" not in src.parts:
            files[str(src.relative_to(pkg_root))] = src.read_bytes()
    init = f"{pkg}/__init__.py"
    if b"_sim_runtime" not in files.get(init, b"_sim_runtime"):
        # Whatever the package's own __init__ does, loading it first runs the simulated kernel-image check.
        files[init] = b"from ._sim_runtime import check as _sim_check\n\n_sim_check()\n" + files[init]
    files[f"{pkg}/_build_info.json"] = (json.dumps(info, indent=2, sort_keys=True) + "\n").encode()
    files[f"{pkg}/_sim_runtime.py"] = RUNTIME.read_bytes()
    di = f"{dist}-{version}.dist-info"
    files[f"{di}/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nSummary: {project.get('description', '')}\n"
        + "".join(f"Requires-Dist: {r}\n" for r in project.get("dependencies", []))
    ).encode()
    files[f"{di}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: sim-build\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    record = "".join(f"{p},{_record_hash(d)},{len(d)}\n" for p, d in sorted(files.items())) + f"{di}/RECORD,,\n"
    files[f"{di}/RECORD"] = record.encode()
    path = Path(wheel_directory) / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(files):
            zf.writestr(zipfile.ZipInfo(p, (2025, 1, 1, 0, 0, 0)), files[p])
    return path.name


def get_requires_for_build_wheel(config_settings=None):
    return []


get_requires_for_build_editable = get_requires_for_build_sdist = get_requires_for_build_wheel


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    return _wheel(wheel_directory, _build(_config()))


build_editable = build_wheel


def build_sdist(sdist_directory, config_settings=None):
    project, _ = _config()
    base = f"{re.sub(r'[-_.]+', '_', project['name'])}-{project['version']}"
    path = Path(sdist_directory) / f"{base}.tar.gz"
    with tarfile.open(path, "w:gz") as tf:
        for src in sorted(ROOT.rglob("*")):
            if src.is_file() and ".git" not in src.parts and "__pycache__" not in src.parts:
                tf.add(src, f"{base}/{src.relative_to(ROOT)}")
    return path.name
