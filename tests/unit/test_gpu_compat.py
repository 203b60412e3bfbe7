"""The GPU stack's compatibility rules (plugins/module_utils/gpu_compat.py): one data set and one evaluating function
that preflight's gate and the nvidia_driver and cuda_toolkit roles call through the filter llmops.sglang.gpu_compat.

The preflight scope is covered line by line in test_preflight_compat.py; here: the driver and cuda scopes with the
exact sentences the roles print (the same ones tests/unit/test_bad_input_gpu_stack.py sees from a real run), the
fabric manager's names, and that no role states a rule of its own any more.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.filter.gpu_compat import FilterModule
from ansible_collections.llmops.sglang.plugins.module_utils import gpu_compat

ROOT = Path(__file__).resolve().parents[2]
RTX = {"name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "sm": "sm_120"}
V100 = {"name": "Tesla V100-SXM2-16GB", "sm": "sm_70"}
WHO = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition (sm_120)"


def request(branch="580", version="580.95.05-1", flavor="open", cuda=("12.8",)):
    return {"driver_branch": branch, "driver_version": version, "driver_flavor": flavor, "cuda_versions": list(cuda)}


def facts(*gpus, driver=None, pci=False):
    """What llmops.sglang.gpu_facts returns: GPUs from nvidia-smi (or the PCI bus), their sm list, the driver."""
    gpus = [dict(g) for g in gpus]
    return {
        "gpus": [] if pci else gpus,
        "pci_gpus": gpus if pci else [],
        "sm_list": sorted({g["sm"] for g in gpus}),
        "driver_version": driver,
        "driver_branch": int(driver.split(".")[0]) if driver else None,
    }


def test_the_defaults_pass_every_scope_on_blackwell():
    assert gpu_compat.evaluate(request(), [RTX], "preflight")["problems"] == []
    assert gpu_compat.evaluate(request(), facts(RTX, driver="580.95.05"), "driver") == {"problems": []}
    assert gpu_compat.evaluate(request(), facts(RTX, driver="580.95.05"), "cuda") == {"problems": []}


def test_driver_scope_refuses_an_old_branch_then_the_proprietary_modules():
    (problem,) = gpu_compat.evaluate(request(branch="550", version="550.163.01-1"), facts(RTX), "driver")["problems"]
    assert problem == (
        f"{WHO} needs driver branch 570 or newer; llmops_driver_branch is 550. Set llmops_driver_branch and "
        "llmops_driver_version to branch 570 or newer; nothing was changed."
    )
    (problem,) = gpu_compat.evaluate(request(flavor="proprietary"), facts(RTX), "driver")["problems"]
    assert problem == (
        f"{WHO} works only with the open kernel modules; llmops_driver_flavor is proprietary. Set "
        "llmops_driver_flavor: open; nothing was changed."
    )
    assert gpu_compat.evaluate(request(flavor="proprietary"), facts(V100), "driver") == {"problems": []}


def test_driver_scope_refuses_an_architecture_the_rules_do_not_know():
    orin = {"name": "NVIDIA Jetson AGX Orin", "sm": "sm_87"}
    (problem,) = gpu_compat.evaluate(request(), facts(orin), "driver")["problems"]
    assert problem.startswith("NVIDIA Jetson AGX Orin (sm_87) is not in the compatibility matrix")


def test_cuda_scope_uses_the_installed_driver_before_the_requested_branch():
    (problem,) = gpu_compat.evaluate(request(cuda=["13.0"]), facts(RTX, driver="575.57.08"), "cuda")["problems"]
    assert problem == (
        "CUDA 13.0 needs driver branch 580 or newer; the driver installed on this host is 575.57.08. Install a newer "
        "driver (llmops_driver_branch) or ask for an older toolkit; nothing was changed."
    )
    (problem,) = gpu_compat.evaluate(request(branch="575", cuda=["13.0"]), facts(RTX), "cuda")["problems"]
    assert "llmops_driver_branch is 575" in problem


def test_cuda_scope_refuses_unknown_too_old_and_too_new_toolkits():
    (unknown,) = gpu_compat.evaluate(request(cuda=["12.7"]), facts(RTX, driver="580.95.05"), "cuda")["problems"]
    assert unknown.startswith(
        "CUDA 12.7 (llmops_cuda_versions) is not a toolkit NVIDIA publishes for Linux; known: 11.8"
    )
    (old,) = gpu_compat.evaluate(request(cuda=["12.4"]), facts(RTX, driver="580.95.05"), "cuda")["problems"]
    assert old == (
        f"{WHO} needs CUDA 12.8 or newer; llmops_cuda_versions asks for 12.4. Ask for CUDA 12.8 or newer; "
        "nothing was changed."
    )
    (new,) = gpu_compat.evaluate(request(cuda=["13.0"]), facts(V100, driver="580.95.05"), "cuda")["problems"]
    assert new == (
        "Tesla V100-SXM2-16GB (sm_70) is not supported by CUDA 13.0; the last toolkit for it is CUDA 12.9. Ask for "
        "CUDA 12.9 or older; nothing was changed."
    )


def test_pci_gpus_are_named_when_nvidia_smi_has_none():
    (problem,) = gpu_compat.evaluate(request(flavor="proprietary"), facts(RTX, pci=True), "driver")["problems"]
    assert problem.startswith(WHO)


def test_the_fabric_manager_is_named_per_branch_and_os():
    assert gpu_compat.fabricmanager("Debian-12", "580") == {
        "package": "nvidia-fabricmanager",
        "revision": "-1",
        "known_branches": ["535", "550", "555", "560", "565", "570", "575", "580"],
    }
    assert gpu_compat.fabricmanager("Ubuntu-24", 575)["package"] == "nvidia-fabricmanager-575"
    assert gpu_compat.fabricmanager("Debian-12", "590")["package"] == ""
    assert gpu_compat.fabricmanager("Rocky-9", "580") == {"package": "", "revision": "-1", "known_branches": []}


def test_the_filter_is_the_function_and_refuses_an_unknown_scope():
    filters = FilterModule().filters()
    assert filters["gpu_compat"](request(), [RTX]) == gpu_compat.evaluate(request(), [RTX])
    assert filters["fabricmanager_package"]("580", "Debian-12")["package"] == "nvidia-fabricmanager"
    from ansible.errors import AnsibleFilterError

    with pytest.raises(AnsibleFilterError, match="expected scope to be one of preflight, driver, cuda, venv"):
        filters["gpu_compat"](request(), [RTX], "gpu")


def test_every_torch_variant_maps_to_a_toolkit_the_rules_know():
    for variant in gpu_compat.TORCH_VARIANTS:
        assert gpu_compat.torch_variant_cuda(variant) in gpu_compat.CUDA


@pytest.mark.parametrize("word", ["min_driver_branch", "open_modules_required", "min_cuda", "max_cuda", "min_nccl"])
def test_no_role_states_a_rule_of_its_own(word):
    """The rules' data keys appear in no role file: every role asks gpu_compat."""
    hits = [str(p.relative_to(ROOT)) for p in (ROOT / "roles").rglob("*") if p.is_file() and word in p.read_text()]
    assert hits == []


def test_the_roles_call_the_filter_in_their_scope():
    calls = {
        str(p.relative_to(ROOT)): re.findall(r"llmops\.sglang\.gpu_compat\(([^)]*)\)", p.read_text())
        for p in (ROOT / "roles").rglob("*.yml")
        if "llmops.sglang.gpu_compat" in p.read_text()
    }
    assert calls == {
        "roles/preflight/tasks/gate.yml": ["preflight_detected_gpus"],
        "roles/nvidia_driver/tasks/validate.yml": ["preflight_gpu, 'driver'"],
        "roles/cuda_toolkit/tasks/main.yml": ["preflight_gpu, 'cuda'"],
        "roles/python_env/tasks/nccl.yml": ["preflight_gpu.gpus, 'venv'"],
    }


# The NCCL each torch release on PyPI requires (its Requires-Dist, Linux x86_64, read with `pip install --dry-run
# --no-deps --report`): the wheel a virtualenv gets with that torch.
TORCH_NCCL = {"2.5.1": "2.21.5", "2.6.0": "2.21.5", "2.7.0": "2.26.2", "2.7.1": "2.26.2", "2.8.0": "2.27.3",
              "2.9.0": "2.27.5", "2.9.1": "2.27.5"}  # fmt: skip
H100 = {"name": "NVIDIA H100 80GB HBM3", "sm": "sm_90"}
B200 = {"name": "NVIDIA B200", "sm": "sm_100"}


def venv(version, dist="nvidia-nccl-cu12"):
    return {"nccl": {"dist": dist, "version": version} if version else None}


@pytest.mark.parametrize(("torch", "nccl"), sorted(TORCH_NCCL.items()))
def test_the_nccl_of_each_torch_release_against_blackwell_and_hopper(torch, nccl):
    refused = gpu_compat.evaluate(venv(nccl), [RTX, RTX], "venv")["problems"]
    assert len(refused) == (1 if torch in ("2.5.1", "2.6.0", "2.7.0", "2.7.1") else 0), refused
    on_b200 = gpu_compat.evaluate(venv(nccl), [B200], "venv")["problems"]
    assert len(on_b200) == (1 if torch in ("2.5.1", "2.6.0") else 0), on_b200
    assert gpu_compat.evaluate(venv(nccl), [H100], "venv")["problems"] == []  # no floor before Blackwell


def test_an_old_nccl_is_refused_in_one_sentence_per_architecture_naming_what_to_do():
    problems = gpu_compat.evaluate(venv("2.25.1"), [RTX, B200, H100], "venv")["problems"]
    assert problems == [
        WHO + " needs NCCL 2.27.3 or newer (older ones fail in collectives on it); the virtualenv has "
        "nvidia-nccl-cu12 2.25.1. Use a torch whose wheel requires a newer NCCL (python_env_torch_version: torch 2.8.0 "
        "requires 2.27.3) or install nvidia-nccl-cu12>=2.27.3 into it; nothing was started.",
        "NVIDIA B200 (sm_100) needs NCCL 2.26.2 or newer (older ones fail in collectives on it); the virtualenv has "
        "nvidia-nccl-cu12 2.25.1. Use a torch whose wheel requires a newer NCCL (python_env_torch_version: torch 2.8.0 "
        "requires 2.27.3) or install nvidia-nccl-cu12>=2.26.2 into it; nothing was started.",
    ]
    assert all("\n" not in p for p in problems)


def test_no_nccl_wheel_is_not_a_verdict_and_the_floor_compares_as_versions():
    assert gpu_compat.evaluate(venv(None), [RTX], "venv")["problems"] == []  # the host's libnccl: not checked here
    assert gpu_compat.evaluate({}, [RTX], "venv")["problems"] == []
    assert gpu_compat.evaluate(venv("2.26.10"), [B200], "venv")["problems"] == []  # 26.10 > 26.2, not a string order
    assert gpu_compat.evaluate(venv("2.26.2.post1"), [RTX], "venv")["problems"] != []  # PyPI's post release of 2.26.2
    assert gpu_compat.evaluate(venv("2.28.9", "nvidia-nccl-cu13"), [RTX], "venv")["problems"] == []
