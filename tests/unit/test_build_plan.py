"""build_plan: fingerprints, RAM-sized parallelism, arch spellings, ref resolution, and the module end to end."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.build_plan import (
    arch_number,
    cuda_major_minor,
    fingerprint,
    flash_attn_archs,
    flash_attn_version_ok,
    kernel_archs,
    parallelism,
    parse_nvcc_version,
    resolve_ref,
    torch_variant,
)

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "plugins" / "modules" / "build_plan.py"
PATCH = ROOT / "roles" / "sglang" / "files" / "patches" / "0001-sm120-extend-attention-block-size.patch"
MARKER = re.compile(r"^[ \t]*(?:el)?if\b[^#\n]*CUDA_CAPABILITY\[0\]\s*==\s*12\b", re.M)

LS_REMOTE = (
    "f1bbf6d3531e3aa153d6b80c75eb2edd87329889\tHEAD\n"
    "f1bbf6d3531e3aa153d6b80c75eb2edd87329889\trefs/heads/main\n"
    "1111111111111111111111111111111111111111\trefs/heads/feature/main\n"
    "2222222222222222222222222222222222222222\trefs/tags/v2.8.3\n"
    "09beb4898ebe03280be3f01c76500bb675b72cc7\trefs/tags/v2.8.3^{}\n"
    "fd0d8d68bcc173dabf015ff2b3c96c8f9fef3adf\trefs/tags/v0.5.8\n"
)


def test_fingerprint_is_stable_and_order_independent():
    a = {"package": "flash-attn", "commit": "abc", "archs": "120", "torch": "2.9.1+cu128", "env": {"X": "1", "Y": "2"}}
    b = {"env": {"Y": "2", "X": "1"}, "torch": "2.9.1+cu128", "archs": "120", "commit": "abc", "package": "flash-attn"}
    assert fingerprint(a) == fingerprint(b)
    assert re.fullmatch(r"[0-9a-f]{16}", fingerprint(a))


@pytest.mark.parametrize("key", ["commit", "archs", "torch", "cuda", "python"])
def test_fingerprint_changes_with_every_input(key):
    base = {"package": "p", "commit": "c", "archs": "120", "torch": "2.9.1+cu128", "cuda": "12.8", "python": "3.11"}
    assert fingerprint(base) != fingerprint({**base, key: base[key] + "x"})


@pytest.mark.parametrize(
    ("cuda", "variant"),
    [("12.8.1", "cu128"), ("12.9", "cu129"), ("13.0.2", "cu130"), ("V12.8.93", "cu128"), ("12.4", "cu124")],
)
def test_torch_variant_follows_the_toolkit(cuda, variant):
    assert torch_variant(cuda) == variant


def test_cuda_and_nvcc_versions():
    assert cuda_major_minor("12.8.1") == "12.8"
    banner = "Cuda compilation tools, release 13.0, V13.0.88\nBuild cuda_13.0.r13.0/compiler.0"
    assert parse_nvcc_version(banner) == "13.0"
    with pytest.raises(ValueError):
        cuda_major_minor("none")
    with pytest.raises(ValueError):
        parse_nvcc_version("command not found")


@pytest.mark.parametrize(("arch", "num"), [("sm_120", 120), ("120", 120), ("12.0", 120), ("12.0a", 120), ("90a", 90)])
def test_arch_number(arch, num):
    assert arch_number(arch) == num


def test_flash_attn_archs():
    assert flash_attn_archs(["120"]) == "120"
    assert flash_attn_archs(["sm_120", "90", "120"]) == "90;120"
    with pytest.raises(ValueError):
        flash_attn_archs([])


@pytest.mark.parametrize(
    ("gpus", "token"),
    [
        (["sm_80"], "80"),
        (["sm_86"], "80"),
        (["sm_89"], "80"),
        (["sm_90"], "90"),
        (["sm_100"], "100"),
        (["sm_103"], "100"),
        (["sm_120"], "120"),
        (["sm_121"], "120"),
        (["sm_86", "sm_90"], "80;90"),
    ],
)
def test_flash_attn_archs_use_only_the_tokens_flash_attention_accepts(gpus, token):
    assert flash_attn_archs(gpus) == token
    assert set(token.split(";")) <= {"80", "90", "100", "120"}


@pytest.mark.parametrize("gpu", ["sm_75", "sm_70", "sm_110"])
def test_flash_attn_archs_refuse_gpus_without_flash_attention_kernels(gpu):
    with pytest.raises(ValueError, match="flash-attention 2 has no kernels for"):
        flash_attn_archs([gpu])


@pytest.mark.parametrize(
    ("version", "ok"), [("v2.8.3", True), ("2.7.3", True), ("v2.7.2", False), ("v2.6.3", False), ("v3.0.0", True)]
)
def test_flash_attn_version_reads_the_arch_variable_from_273(version, ok):
    assert flash_attn_version_ok(version) is ok


def test_kernel_archs_use_the_arch_specific_variant_from_sm90():
    assert kernel_archs(["120"]) == {
        "torch_cuda_arch_list": "12.0a",
        "cmake_cuda_architectures": "120a",
        "below_sm90": False,
        "gencodes": ["-gencode=arch=compute_120a,code=sm_120a"],
        "cmake_arch_args": "-DENABLE_BELOW_SM90=OFF",
    }
    mixed = kernel_archs(["86", "89", "90", "120"])
    assert mixed["torch_cuda_arch_list"] == "8.6;8.9;9.0a;12.0a"
    assert mixed["below_sm90"] is True
    assert mixed["cmake_arch_args"] == ""
    assert [g.split(",code=")[1] for g in mixed["gencodes"]] == ["sm_80", "sm_89", "sm_90a", "sm_120a"]


def test_parallelism_formula_on_a_small_host():
    # 2 cores, 24105 MiB: threads = min(4, 2) = 2; jobs = min(2, floor(24105*0.75/(2*2048))) = min(2, 4) = 2
    p = parallelism(24105, 2, 2)
    assert (p["threads"], p["jobs"], p["peak_mib"]) == (2, 2, 8192)
    assert p["fits"] is True
    assert "jobs = max(1, min(cores" in p["formula"]


def test_parallelism_is_bounded_by_ram_on_a_big_host():
    # 128 cores, 64 GiB: threads 4, jobs = floor(48 GiB / (4 x 2 GiB)) = 6, not 128
    p = parallelism(65536, 128, 2)
    assert (p["threads"], p["jobs"]) == (4, 6)
    assert p["peak_mib"] <= 65536 * 0.75
    # sgl-kernel at 1 GiB per thread gets twice the jobs
    assert parallelism(65536, 128, 1)["jobs"] == 12


def test_parallelism_never_below_one_job():
    assert parallelism(1024, 8, 2)["jobs"] == 1


def test_parallelism_overrides_are_kept_and_flagged():
    p = parallelism(24105, 2, 2, jobs=64)
    assert p["jobs"] == 64
    assert p["derived_jobs"] == 2
    assert p["fits"] is False
    assert p["peak_mib"] == 64 * 2 * 2048


def test_parallelism_rejects_nonsense():
    with pytest.raises(ValueError):
        parallelism(0, 2, 2)


@pytest.mark.parametrize(
    ("ref", "commit"),
    [
        ("main", "f1bbf6d3531e3aa153d6b80c75eb2edd87329889"),
        ("v2.8.3", "09beb4898ebe03280be3f01c76500bb675b72cc7"),  # the peeled tag, not the tag object
        ("v0.5.8", "fd0d8d68bcc173dabf015ff2b3c96c8f9fef3adf"),
        ("a" * 40, "a" * 40),
        ("nope", None),
    ],
)
def test_resolve_ref(ref, commit):
    assert resolve_ref(LS_REMOTE, ref) == commit


def run_module(tmp_path, args):
    argfile = tmp_path / "args.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run(
        [sys.executable, str(MODULE), str(argfile)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    return proc.returncode, json.loads(proc.stdout)


def test_module_plans_a_flash_attn_build(tmp_path):
    rc, res = run_module(
        tmp_path,
        {
            "package": "flash-attn",
            "ref": "v2.8.3",
            "ls_remote": LS_REMOTE,
            "arch_list": ["120"],
            "arch_style": "flash_attn",
            "inputs": {"torch": "2.9.1+cu128", "cuda": "12.8", "python": "3.11"},
            "ram_mib": 24105,
            "cpus": 2,
            "gib_per_thread": 2,
        },
    )
    assert rc == 0, res
    assert res["changed"] is False
    assert res["commit"] == "09beb4898ebe03280be3f01c76500bb675b72cc7"
    assert res["inputs"]["archs"] == "120"
    assert res["archs"]["torch_cuda_arch_list"] == "12.0a"
    assert res["parallelism"]["jobs"] == 2
    assert res["fingerprint"] == fingerprint(res["inputs"])


def test_module_jobs_do_not_change_the_fingerprint(tmp_path):
    args = {"package": "sgl-kernel", "ref": "a" * 40, "arch_list": ["120"], "arch_style": "sgl_kernel", "ram_mib": 8192}
    _, a = run_module(tmp_path, args)
    _, b = run_module(tmp_path, {**args, "jobs": 7, "threads": 3})
    assert a["fingerprint"] == b["fingerprint"]
    assert a["inputs"]["archs"] == "12.0a"


def test_module_fails_on_an_unknown_ref(tmp_path):
    rc, res = run_module(tmp_path, {"package": "sglang", "ref": "nope", "ls_remote": LS_REMOTE})
    assert rc != 0
    assert "neither a commit nor a branch or tag" in res["msg"]


def test_module_fails_without_gpus(tmp_path):
    rc, res = run_module(tmp_path, {"package": "flash-attn", "arch_list": [], "arch_style": "flash_attn"})
    assert rc != 0
    assert "expected at least one GPU architecture" in res["msg"]


def test_sm120_patch_adds_the_marker_branch_only():
    text = PATCH.read_text()
    added = [ln[1:] for ln in text.splitlines() if ln.startswith("+") and not ln.startswith("+++")]
    removed = [ln[1:] for ln in text.splitlines() if ln.startswith("-") and not ln.startswith("---")]
    assert any(MARKER.match(ln) for ln in added)
    assert removed == ["        if _is_cuda and CUDA_CAPABILITY[0] >= 9:"]
    assert "        elif _is_cuda and CUDA_CAPABILITY[0] >= 9:" in added
    assert "BLOCK_M, BLOCK_N = (64, 128)" in text and "BLOCK_M, BLOCK_N = (32, 32)" in text
