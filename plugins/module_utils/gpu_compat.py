# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The GPU stack's compatibility rules: GPU architecture x driver branch x kernel-module flavour x CUDA toolkit x
torch wheel variant x fabric manager package name. The one home of this knowledge: the data below and one evaluating
function, ``evaluate``, which preflight's gate and the nvidia_driver and cuda_toolkit roles call through the filter
llmops.sglang.gpu_compat (plugins/filter/gpu_compat.py), each for the part it acts on (its ``scope``).

Sources: NVIDIA's CUDA release notes (table "CUDA Toolkit and Corresponding Driver Versions", Linux, the toolkit's
own branch, not the minor-version-compatibility floor), NVIDIA's driver installation guide (open kernel modules:
default from R560, supported from Turing, the only flavour for Blackwell and Grace Hopper), the PyTorch wheel variants
per architecture (cu128 is the first with sm_100/sm_120 kernels), NVIDIA's CUDA features archive (CUDA 12.9 adds
compiler targets sm_103 and sm_121; CUDA 13.0 drops offline compilation for Volta and older, hence max_cuda).
NCCL's floor for Blackwell (``min_nccl``). NCCL's own release notes: 2.25.1-1 adds Blackwell (the first release
compiled for sm_100 and sm_120); 2.26.2-1 fixes "shared memory usage on recent Blackwell GPUs" (NVIDIA/nccl-tests#291,
all-to-all errors on RTX 5090); NVIDIA/TensorRT-LLM#4238 reports all-reduce failing on Blackwell with 2.25.1 and
working with 2.26.2. For sm_120 2.26.2 is still reported failing with more than one GPU: sgl-project/sglang#7227
(RTX 5090, `--tp` > 1, fixed by upgrading nvidia-nccl-cu12 to its newest release, a 2.27 then), Nerogar/OneTrainer
pull 1020 (RTX 5090, fixed by the NCCL torch 2.8 requires, 2.27.3) and NVIDIA/nccl#2418 (two RTX PRO 6000, illegal
memory access from 512 KiB collectives with 2.26.2, not with 2.31.2); hence 2.27.3 there. The NCCL a virtualenv
carries is its ``nvidia-nccl-cuXX`` wheel, the one torch's wheel requires (PyPI metadata: torch 2.5.1 and 2.6.0
require 2.21.5, 2.7.0 and 2.7.1 2.26.2, 2.8.0 2.27.3, 2.9.0 and 2.9.1 2.27.5).
Architecture names and families live in gpu_arch.py; the gate takes the family from gpu_facts.

Every problem is one sentence: what is wrong, and what would work.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

ARCH = {
    "sm_70": {
        "examples": "V100, Quadro GV100",
        "min_driver_branch": 384,
        "open_modules_required": False,
        "min_cuda": "9.0",
        "max_cuda": "12.9",
        "torch_cuda": ["cu118", "cu121", "cu124", "cu126", "cu128"],
    },
    "sm_75": {
        "examples": "T4, Quadro RTX, RTX 20xx",
        "min_driver_branch": 410,
        "open_modules_required": False,
        "min_cuda": "10.0",
        "torch_cuda": ["cu118", "cu121", "cu124", "cu126", "cu128", "cu129", "cu130"],
    },
    "sm_80": {
        "examples": "A100, A30",
        "min_driver_branch": 450,
        "open_modules_required": False,
        "min_cuda": "11.0",
        "torch_cuda": ["cu118", "cu121", "cu124", "cu126", "cu128", "cu129", "cu130"],
    },
    "sm_86": {
        "examples": "A10, A40, RTX A6000, RTX 30xx",
        "min_driver_branch": 455,
        "open_modules_required": False,
        "min_cuda": "11.1",
        "torch_cuda": ["cu118", "cu121", "cu124", "cu126", "cu128", "cu129", "cu130"],
    },
    "sm_89": {
        "examples": "L4, L40S, RTX 6000 Ada, RTX 40xx",
        "min_driver_branch": 520,
        "open_modules_required": False,
        "min_cuda": "11.8",
        "torch_cuda": ["cu118", "cu121", "cu124", "cu126", "cu128", "cu129", "cu130"],
    },
    # Grace Hopper (GH200) is sm_90 too and needs the open modules; the default flavour is open anyway.
    "sm_90": {
        "examples": "H100, H200, GH200",
        "min_driver_branch": 525,
        "open_modules_required": False,
        "min_cuda": "11.8",
        "torch_cuda": ["cu118", "cu121", "cu124", "cu126", "cu128", "cu129", "cu130"],
    },
    "sm_100": {
        "examples": "B200, GB200",
        "min_driver_branch": 570,
        "open_modules_required": True,
        "min_cuda": "12.8",
        "torch_cuda": ["cu128", "cu129", "cu130"],
        "min_nccl": "2.26.2",
    },
    "sm_103": {
        "examples": "B300, GB300",
        "min_driver_branch": 575,
        "open_modules_required": True,
        "min_cuda": "12.9",
        "torch_cuda": ["cu129", "cu130"],
        "min_nccl": "2.26.2",
    },
    "sm_120": {
        "examples": "RTX PRO 6000 Blackwell, RTX 50xx",
        "min_driver_branch": 570,
        "open_modules_required": True,
        "min_cuda": "12.8",
        "torch_cuda": ["cu128", "cu129", "cu130"],
        "min_nccl": "2.27.3",
    },
    # Unified memory (nvidia-smi reports memory as [N/A]); binary-compatible with sm_120 code, nvcc 12.9+ targets it.
    "sm_121": {
        "examples": "GB10 (DGX Spark)",
        "min_driver_branch": 575,
        "open_modules_required": True,
        "min_cuda": "12.9",
        "torch_cuda": ["cu128", "cu129", "cu130"],
        "min_nccl": "2.27.3",
    },
}

# Minimum driver branch of each CUDA toolkit (its cuda-drivers dependency).
CUDA = {
    "11.8": 520,
    "12.0": 525,
    "12.1": 530,
    "12.2": 535,
    "12.3": 545,
    "12.4": 550,
    "12.5": 555,
    "12.6": 560,
    "12.8": 570,
    "12.9": 575,
    "13.0": 580,
}

# Every torch wheel variant PyTorch publishes that the rules know, oldest first.
TORCH_VARIANTS = ["cu118", "cu121", "cu124", "cu126", "cu128", "cu129", "cu130"]

# The fabric manager in NVIDIA's repositories, per operating system and driver branch: branches up to 575 carry the
# branch in the package name (nvidia-fabricmanager-575), 580 and newer do not. Its version is the driver's upstream
# version plus the revision below: -1 on Debian and on Ubuntu too, where the driver's own packages end in -0ubuntu1.
# A branch missing here is refused; the role's nvidia_driver_fabricmanager_package overrides the name.
_FM_NVIDIA_REPO = {
    "revision": "-1",
    "packages": {
        "535": "nvidia-fabricmanager-535",
        "550": "nvidia-fabricmanager-550",
        "555": "nvidia-fabricmanager-555",
        "560": "nvidia-fabricmanager-560",
        "565": "nvidia-fabricmanager-565",
        "570": "nvidia-fabricmanager-570",
        "575": "nvidia-fabricmanager-575",
        "580": "nvidia-fabricmanager",
    },
}
FABRICMANAGER = {"Debian-12": _FM_NVIDIA_REPO, "Ubuntu-22": _FM_NVIDIA_REPO, "Ubuntu-24": _FM_NVIDIA_REPO}

SCOPES = ("preflight", "driver", "cuda", "venv")
_MAJOR_MINOR = re.compile(r"^[0-9]+[.][0-9]+$")


def _version(text):
    return tuple(int(p) for p in re.findall(r"[0-9]+", str(text)))


def _branch_int(value):
    text = str(value).strip()
    return int(text) if text.isdigit() else 0


def _unique(items):
    out = []
    for item in items:
        if item not in out:
            out.append(item)
    return out


def _who(gpus, sm):
    names = _unique(g.get("name") for g in gpus if g.get("sm") == sm)
    return " + ".join(str(n) for n in names) + " (" + sm + ")"


def _versions(raw):
    """The requested toolkits as strings, or None when the value is not a list."""
    if isinstance(raw, (str, bytes, dict)) or not hasattr(raw, "__iter__"):
        return None
    return [str(v) for v in raw]


def torch_variant_cuda(variant):
    """cu128 -> '12.8'."""
    return variant[2:-1] + "." + variant[-1]


def fabricmanager(os_key, branch):
    """NVIDIA's fabric manager package for a driver branch on an OS (``Debian-12``): {package ('' when unknown),
    revision, known_branches}."""
    entry = FABRICMANAGER.get(os_key, {})
    packages = entry.get("packages", {})
    return {
        "package": packages.get(str(branch), ""),
        "revision": entry.get("revision", "-1"),
        "known_branches": list(packages),
    }


def _preflight(request, gpus):
    problems, notes = [], []
    branch_str = str(request.get("driver_branch", ""))
    branch = _branch_int(branch_str)
    flavor = str(request.get("driver_flavor", ""))
    raw = request.get("cuda_versions")
    versions = _versions(raw) or []
    if not re.match(r"^[0-9]{3,}$", branch_str):
        problems.append(
            "llmops_driver_branch must be a driver branch number such as 580; you asked for '%s'." % branch_str
        )
    elif not str(request.get("driver_version", "")).startswith(branch_str + "."):
        problems.append(
            "llmops_driver_version %s is not on the requested branch %s (llmops_driver_branch). Set both to the same "
            "branch, e.g. llmops_driver_branch: '580' with llmops_driver_version: '580.95.05-1'."
            % (request.get("driver_version"), branch_str)
        )
    if flavor not in ("open", "proprietary"):
        problems.append("llmops_driver_flavor must be open or proprietary; you asked for '%s'." % flavor)
    if _versions(raw) is None:
        problems.append(
            "llmops_cuda_versions must be a list such as ['12.8']; found the %s '%s'. Write llmops_cuda_versions: "
            "['%s']." % ("string" if isinstance(raw, str) else "value", raw, raw)
        )
    elif not versions:
        problems.append("llmops_cuda_versions is empty; ask for at least one CUDA toolkit, e.g. ['12.8'].")
    ok = [k for k in CUDA if branch > 0 and CUDA[k] <= branch]
    for v in versions:
        if v not in CUDA:
            problems.append(
                "CUDA %s (llmops_cuda_versions) is not in the compatibility matrix; known toolkits: %s."
                % (v, ", ".join(CUDA))
            )
        elif 0 < branch < CUDA[v]:
            problems.append(
                "CUDA %s needs driver branch >= %d; you asked for llmops_driver_branch %s. Raise llmops_driver_branch "
                "and llmops_driver_version to branch %d or newer%s."
                % (
                    v,
                    CUDA[v],
                    branch_str,
                    CUDA[v],
                    (", or keep branch %s with CUDA %s or older" % (branch_str, ok[-1])) if ok else "",
                )
            )
    sms = _unique(g.get("sm") for g in gpus)
    torch = None
    for sm in sms:
        who = _who(gpus, sm)
        if sm not in ARCH:
            problems.append(
                "%s is not in the compatibility matrix (known: %s), so this collection cannot tell which driver, CUDA "
                "and torch builds it needs." % (who, ", ".join(ARCH))
            )
            continue
        a = ARCH[sm]
        needs = "CUDA >= %s%s (driver branch >= %d)" % (
            a["min_cuda"],
            " and open kernel modules" if a["open_modules_required"] else "",
            a["min_driver_branch"],
        )
        for v in versions:
            if _MAJOR_MINOR.match(v) and _version(v) < _version(a["min_cuda"]):
                problems.append(
                    "%s needs %s; you asked for CUDA %s (llmops_cuda_versions). Ask for CUDA %s or newer, e.g. "
                    "llmops_cuda_versions: ['%s']." % (who, needs, v, a["min_cuda"], a["min_cuda"])
                )
        for v in versions:
            if "max_cuda" in a and _MAJOR_MINOR.match(v) and _version(v) > _version(a["max_cuda"]):
                problems.append(
                    "%s is not supported by CUDA %s (llmops_cuda_versions): the last toolkit that compiles for it is "
                    "CUDA %s. Ask for CUDA %s or older, e.g. llmops_cuda_versions: ['%s']."
                    % (who, v, a["max_cuda"], a["max_cuda"], a["max_cuda"])
                )
        if a["open_modules_required"] and flavor != "open":
            family = next((g["architecture"] for g in gpus if g.get("sm") == sm and g.get("architecture")), sm)
            problems.append(
                "%s needs %s; you asked for llmops_driver_flavor: %s. %s GPUs work only with the open kernel modules: "
                "set llmops_driver_flavor: open (the default)." % (who, needs, flavor, family)
            )
        if 0 < branch < a["min_driver_branch"]:
            problems.append(
                "%s needs %s; you asked for llmops_driver_branch %s. Use branch %d or newer."
                % (who, needs, branch_str, a["min_driver_branch"])
            )
        torch = list(a["torch_cuda"]) if torch is None else [t for t in torch if t in a["torch_cuda"]]
    if not sms:
        notes.append(
            "No GPU architecture is known yet (no driver answers), so only the driver and CUDA versions were checked "
            "against each other; the GPU checks run once the GPUs can be identified."
        )
    torch_ok = [t for t in (TORCH_VARIANTS if torch is None else torch) if torch_variant_cuda(t) in versions]
    return {"problems": problems, "notes": notes, "torch_cuda": torch_ok, "sm_list": sms}


def _found_gpus(facts):
    return facts.get("gpus") or facts.get("pci_gpus") or []


def _driver(request, facts):
    problems = []
    gpus = _found_gpus(facts)
    branch = str(request.get("driver_branch", ""))
    flavor = str(request.get("driver_flavor", ""))
    for sm in facts.get("sm_list") or []:
        who = _who(gpus, sm)
        a = ARCH.get(sm)
        if a is None:
            problems.append(
                "%s is not in the compatibility matrix (plugins/module_utils/gpu_compat.py), so no driver branch is "
                "known to drive it; nothing was changed." % who
            )
        elif _branch_int(branch) < a["min_driver_branch"]:
            problems.append(
                "%s needs driver branch %d or newer; llmops_driver_branch is %s. Set llmops_driver_branch and "
                "llmops_driver_version to branch %d or newer; nothing was changed."
                % (who, a["min_driver_branch"], branch, a["min_driver_branch"])
            )
        elif a["open_modules_required"] and flavor != "open":
            problems.append(
                "%s works only with the open kernel modules; llmops_driver_flavor is %s. Set llmops_driver_flavor: "
                "open; nothing was changed." % (who, flavor)
            )
    return {"problems": problems}


def _cuda(request, facts):
    problems = []
    gpus = _found_gpus(facts)
    installed = facts.get("driver_branch")
    branch = _branch_int(installed) if installed else _branch_int(request.get("driver_branch", 0))
    driver = (
        "the driver installed on this host is %s" % facts.get("driver_version")
        if installed
        else "llmops_driver_branch is %d" % branch
    )
    for v in _versions(request.get("cuda_versions")) or []:
        if v not in CUDA:
            problems.append(
                "CUDA %s (llmops_cuda_versions) is not a toolkit NVIDIA publishes for Linux; known: %s. Ask for one of "
                "those; nothing was changed." % (v, ", ".join(CUDA))
            )
            continue
        if 0 < branch < CUDA[v]:
            problems.append(
                "CUDA %s needs driver branch %d or newer; %s. Install a newer driver (llmops_driver_branch) or ask for "
                "an older toolkit; nothing was changed." % (v, CUDA[v], driver)
            )
        for sm in facts.get("sm_list") or []:
            a = ARCH.get(sm)
            if a is None:
                continue
            who = _who(gpus, sm)
            if _version(v) < _version(a["min_cuda"]):
                problems.append(
                    "%s needs CUDA %s or newer; llmops_cuda_versions asks for %s. Ask for CUDA %s or newer; nothing "
                    "was changed." % (who, a["min_cuda"], v, a["min_cuda"])
                )
            elif "max_cuda" in a and _version(v) > _version(a["max_cuda"]):
                problems.append(
                    "%s is not supported by CUDA %s; the last toolkit for it is CUDA %s. Ask for CUDA %s or older; "
                    "nothing was changed." % (who, v, a["max_cuda"], a["max_cuda"])
                )
    return {"problems": problems}


def _venv(request, gpus):
    """The service virtualenv against the GPUs: the NCCL it carries (``request['nccl']``: {dist, version} as
    roles/python_env/files/nccl_wheel.py reads it, or None when no NCCL wheel is installed: torch then uses the
    host's own libnccl, which is not checked here)."""
    nccl = request.get("nccl")
    if not isinstance(nccl, dict) or not nccl.get("version"):
        return {"problems": []}
    have = str(nccl["version"])
    dist = str(nccl.get("dist") or "nvidia-nccl")
    problems = []
    for sm in _unique(g.get("sm") for g in gpus):
        floor = ARCH.get(sm, {}).get("min_nccl")
        if floor and _version(have) < _version(floor):
            problems.append(
                "%s needs NCCL %s or newer (older ones fail in collectives on it); the virtualenv has %s %s. Use a "
                "torch whose wheel requires a newer NCCL (python_env_torch_version: torch 2.8.0 requires 2.27.3) or "
                "install %s>=%s into it; nothing was started." % (_who(gpus, sm), floor, dist, have, dist, floor)
            )
    return {"problems": problems}


def evaluate(request, gpus, scope="preflight"):
    """Check a request against the rules and the GPUs.

    ``request``: {driver_branch, driver_version, driver_flavor, cuda_versions} (the llmops_* settings).
    ``gpus``: for ``preflight``, the GPUs to check (a list of {name, sm, architecture}); for ``driver`` and ``cuda``,
    the result of llmops.sglang.gpu_facts (its gpus or pci_gpus, sm_list and the installed driver's branch).
    ``scope``: preflight (every rule, before anything changes; also the torch variants every GPU accepts for the
    requested toolkits), driver (what the driver role acts on: branch and flavour for the GPUs found), cuda (the
    toolkits against NVIDIA's releases, the installed or requested driver, the GPUs), venv (the virtualenv's NCCL,
    ``request`` {nccl: {dist, version} or None}, against the GPUs' floor; ``gpus`` as for preflight).
    Returns {problems: [one sentence each]} and, for preflight, notes, torch_cuda and sm_list.
    """
    if scope not in SCOPES:
        raise ValueError("gpu_compat: expected scope to be one of %s; found %r" % (", ".join(SCOPES), scope))
    if not isinstance(request, dict):
        raise ValueError("gpu_compat: expected the request to be a mapping; found %r" % (request,))
    if scope == "preflight":
        return _preflight(request, [g for g in (gpus or []) if isinstance(g, dict)])
    if scope == "venv":
        return _venv(request, [g for g in (gpus or []) if isinstance(g, dict)])
    facts = gpus if isinstance(gpus, dict) else {}
    return _driver(request, facts) if scope == "driver" else _cuda(request, facts)
