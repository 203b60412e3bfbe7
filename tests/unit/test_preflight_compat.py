"""The preflight gate: the compatibility rules (plugins/module_utils/gpu_compat.py, scope preflight) and the room the
later stages need (roles/preflight/templates/room.json.j2).

The gate is a pure function of the request, the GPUs found, the mounts and the RAM, so these tests call the rules'
one evaluating function and render the role's own template with Ansible's own templating engine, without a host, and
combine them as roles/preflight/tasks/gate.yml does. tests/integration/test_preflight_refusals.py runs the same gate
on a simulated node and proves that a refusal changes nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

from ansible_collections.llmops.sglang.plugins.module_utils import gpu_arch, gpu_compat

ROOT = Path(__file__).resolve().parents[2]
PREFLIGHT = ROOT / "roles" / "preflight"
COMPAT = {"arch": gpu_compat.ARCH, "cuda": {k: {"min_driver_branch": v} for k, v in gpu_compat.CUDA.items()}}
ROOM = (PREFLIGHT / "templates" / "room.json.j2").read_text()
RTX = {"name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "sm": "sm_120", "architecture": "Blackwell"}
H100 = {"name": "NVIDIA H100 80GB HBM3", "sm": "sm_90", "architecture": "Hopper"}
GIB = 1 << 30
BIG_ROOT = [{"mount": "/", "size_total": 1000 * GIB, "size_available": 900 * GIB}]


def gate(
    *,
    gpus=(RTX,),
    branch="580",
    version="580.95.05-1",
    flavor="open",
    cuda=("12.8",),
    mounts=BIG_ROOT,
    ram_mb=512 * 1024,
    model_gib=100,
    build_gib=50,
    ram_gib=32,
):
    request = {"driver_branch": branch, "driver_version": version, "driver_flavor": flavor, "cuda_versions": list(cuda)}
    compat = gpu_compat.evaluate(request, list(gpus), "preflight")
    variables = {
        "preflight_disk_checks": [
            {"purpose": "model weights", "path": "/opt/models", "min_free_gib": model_gib},
            {"purpose": "source builds", "path": "/var/tmp", "min_free_gib": build_gib},
        ],
        "preflight_mounts": mounts,
        "preflight_memtotal_mb": ram_mb,
        "preflight_build_min_ram_gib": ram_gib,
    }
    room = json.loads(Templar(loader=DataLoader(), variables=variables).template(trust_as_template(ROOM)))
    return dict(compat, problems=compat["problems"] + room["problems"])


def test_the_defaults_pass_on_blackwell():
    result = gate()
    assert result["problems"] == []
    assert result["sm_list"] == ["sm_120"]
    assert result["torch_cuda"] == ["cu128"]


def test_cuda_12_4_on_sm120_is_refused_with_what_would_work():
    (problem,) = gate(cuda=["12.4"])["problems"]
    assert problem.startswith("NVIDIA RTX PRO 6000 Blackwell Workstation Edition (sm_120) needs CUDA >= 12.8")
    assert "open kernel modules" in problem
    assert "you asked for CUDA 12.4" in problem
    assert "llmops_cuda_versions: ['12.8']" in problem


def test_proprietary_modules_on_blackwell_are_refused():
    (problem,) = gate(flavor="proprietary")["problems"]
    assert "(sm_120)" in problem
    assert "you asked for llmops_driver_flavor: proprietary" in problem
    assert "Blackwell GPUs work only with the open kernel modules: set llmops_driver_flavor: open" in problem


def test_proprietary_modules_on_hopper_are_allowed():
    assert gate(gpus=[H100], flavor="proprietary")["problems"] == []


def test_a_driver_branch_older_than_the_toolkit_needs_is_refused():
    problems = gate(gpus=[], branch="575", version="575.57.08-1", cuda=["13.0"])["problems"]
    assert problems == [
        "CUDA 13.0 needs driver branch >= 580; you asked for llmops_driver_branch 575. Raise llmops_driver_branch "
        "and llmops_driver_version to branch 580 or newer, or keep branch 575 with CUDA 12.9 or older."
    ]


def test_every_problem_is_reported_at_once():
    problems = gate(branch="575", version="575.57.08-1", flavor="proprietary", cuda=["12.4", "13.0"])["problems"]
    assert len(problems) == 3
    assert any("CUDA 13.0 needs driver branch >= 580" in p for p in problems)
    assert any("you asked for CUDA 12.4" in p for p in problems)
    assert any("llmops_driver_flavor: proprietary" in p for p in problems)


def test_version_off_the_branch_and_unknown_toolkits_are_refused():
    problems = gate(version="575.57.08-1", cuda=["12.7"])["problems"]
    assert any("575.57.08-1 is not on the requested branch 580" in p for p in problems)
    assert any("CUDA 12.7 (llmops_cuda_versions) is not in the compatibility matrix" in p for p in problems)


def test_unknown_architecture_is_refused():
    (problem,) = gate(gpus=[{"name": "NVIDIA Jetson AGX Orin", "sm": "sm_87"}])["problems"]
    assert problem.startswith("NVIDIA Jetson AGX Orin (sm_87) is not in the compatibility matrix")


def test_volta_with_a_toolkit_that_dropped_it_is_refused_with_the_last_one_that_works():
    v100 = {"name": "Tesla V100-SXM2-16GB", "sm": "sm_70", "architecture": "Volta"}
    (problem,) = gate(gpus=[v100], cuda=["13.0"])["problems"]
    assert problem == (
        "Tesla V100-SXM2-16GB (sm_70) is not supported by CUDA 13.0 (llmops_cuda_versions): the last toolkit "
        "that compiles for it is CUDA 12.9. Ask for CUDA 12.9 or older, e.g. llmops_cuda_versions: ['12.9']."
    )
    assert gate(gpus=[v100], cuda=["12.8"])["problems"] == []


def test_without_gpus_only_the_versions_are_checked_and_a_note_says_so():
    result = gate(gpus=[])
    assert result["problems"] == []
    assert "No GPU architecture is known yet" in result["notes"][0]


def test_torch_variants_are_what_every_gpu_accepts_for_the_requested_toolkits():
    assert gate(gpus=[H100], cuda=["12.4", "12.8"], branch="580")["torch_cuda"] == ["cu124", "cu128"]
    assert gate(gpus=[H100, RTX], cuda=["12.8", "13.0"])["torch_cuda"] == ["cu128", "cu130"]


def test_disk_on_one_file_system_must_hold_model_and_builds_together():
    mounts = [{"mount": "/", "size_total": 200 * GIB, "size_available": 120 * GIB}]
    (problem,) = gate(mounts=mounts)["problems"]
    assert problem.startswith("The file system at / has 120.0 GiB free;")
    assert "need 150.0 GiB" in problem


def test_disk_uses_the_longest_mount_prefix():
    mounts = [
        {"mount": "/", "size_total": 50 * GIB, "size_available": 10 * GIB},
        {"mount": "/opt", "size_total": 500 * GIB, "size_available": 400 * GIB},
        {"mount": "/var", "size_total": 100 * GIB, "size_available": 60 * GIB},
    ]
    assert gate(mounts=mounts)["problems"] == []
    assert gate(mounts=mounts, build_gib=0, model_gib=0)["problems"] == []


def test_too_little_ram_for_builds_is_refused():
    (problem,) = gate(ram_mb=16 * 1024)["problems"]
    assert problem.startswith("The host has 16.0 GiB of RAM; source builds")
    assert gate(ram_mb=16 * 1024, ram_gib=0)["problems"] == []


@pytest.mark.parametrize("sm", sorted(COMPAT["arch"]))
def test_matrix_entries_are_complete_and_consistent(sm):
    entry = COMPAT["arch"][sm]
    assert set(entry) >= {"min_driver_branch", "open_modules_required", "min_cuda", "torch_cuda"}
    assert "family" not in entry, "architecture families live in plugins/module_utils/gpu_arch.py"
    assert gpu_arch.is_known(sm)
    assert entry["min_cuda"] in COMPAT["cuda"] or gpu_arch.parse(entry["min_cuda"]) < (11, 8)
    if entry["min_cuda"] in COMPAT["cuda"]:
        # An architecture cannot need an older driver than its oldest toolkit does.
        assert entry["min_driver_branch"] >= COMPAT["cuda"][entry["min_cuda"]]["min_driver_branch"]
    for variant in entry["torch_cuda"]:
        assert variant.startswith("cu") and variant[2:].isdigit()


def test_the_requirements_of_sglang_reference_hold():
    # sglang.md section e: Blackwell needs the open modules, R570+ for CUDA 12.8, R580+ for CUDA 13.0.
    for sm in ("sm_100", "sm_120"):
        assert COMPAT["arch"][sm]["open_modules_required"] is True
        assert COMPAT["arch"][sm]["min_driver_branch"] == 570
        assert COMPAT["arch"][sm]["min_cuda"] == "12.8"
    assert COMPAT["cuda"]["12.8"]["min_driver_branch"] == 570
    assert COMPAT["cuda"]["13.0"]["min_driver_branch"] == 580


def test_the_gpu_stack_defaults_pass_the_gate():
    """The shared defaults (roles/llmops_defaults) preflight checks and the GPU roles install: a combination the gate
    accepts."""
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    shared = yaml.safe_load((ROOT / "roles/llmops_defaults/defaults/main.yml").read_text())
    for distribution in ("Debian", "Ubuntu"):  # the version's default follows the operating system
        variables = {"ansible_facts": {"distribution": distribution}}
        version = Templar(loader=DataLoader(), variables=variables).template(
            trust_as_template(shared["llmops_driver_version"])
        )
        result = gate(
            branch=shared["llmops_driver_branch"],
            version=version,
            flavor=shared["llmops_driver_flavor"],
            cuda=shared["llmops_cuda_versions"],
        )
        assert result["problems"] == [], distribution
