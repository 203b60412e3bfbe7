"""playbooks/bundle.yml on the control node against the stand-in mirrors (NVIDIA's Ubuntu 24.04 repository, the hub):
the driver's and the toolkit's packages with their closure, the model snapshot at its commit and the PCI id database
land in one directory with a manifest, an SBOM and a signature that the hosts' own check accepts; a second run changes
nothing; a second bundle of the same inputs has the same manifest, byte for byte; bad settings are refused before
anything is collected; the fleet's host is never contacted."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from _module_util import ROOT
from wheel_util import make_wheel

from ansible_collections.llmops.sglang.plugins.module_utils import bundle_manifest as M
from ansible_collections.llmops.sglang.plugins.module_utils import bundle_sbom as S

PINNED = "580.95.05-0ubuntu1"
FLEET_RECAP = re.compile(r"^fleet1\s*:.*changed=(\d+).*unreachable=(\d+).*failed=(\d+)", re.M)


def wheelhouse_with_a_build(top: Path) -> Path:
    """A wheelhouse holding one finished build as the build roles leave it: NAME/FINGERPRINT/ with the wheel and its
    record (build.json, written last). The wheel is a minimal one of our own whose requirements the stand-in index
    serves as pure-Python wheels, so every Python of the target resolves them."""
    build = top / "sglang" / "31508332409d86fa"
    wheel = make_wheel(build, "sglang", "0.5.9", ["torch", "tqdm"])
    sha = hashlib.sha256(wheel.read_bytes()).hexdigest()
    record = {"name": "sglang", "version": "0.5.9", "wheel": wheel.name, "sha256": sha,
              "inputs": {"python": "3.11", "torch": "2.9.1+cu128"}}  # fmt: skip
    (build / "build.json").write_text(json.dumps(record))
    (top / "sgl-kernel" / "0000000000000000").mkdir(parents=True)  # a build that never finished: no record
    return top


@pytest.fixture
def bundle_run(built, server, tmp_path):
    key = tmp_path / "ops"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ops@test", "-f", str(key)], check=True)
    pci_ids = tmp_path / "pci.ids"
    pci_ids.write_text("# pci.ids stand-in\n10de  NVIDIA Corporation\n\t2bb1  GB202GL [RTX PRO 6000 Blackwell]\n")
    settings = {
        # the fleet's host: never contacted (a connection would fail: nothing listens on port 9)
        "ansible_host": "127.0.0.1",
        "ansible_port": 9,
        "ansible_connection": "ssh",
        "bundle_os": ["ubuntu-24.04", "debian-12"],
        "bundle_gpu_archs": ["sm_120"],
        "bundle_nvidia_keyring": str(built["out"] / "keys" / "cuda-archive-keyring.gpg"),
        "bundle_signing_key": str(key),
        "nvidia_repo_base_url": server["apt"].split("/debian12/")[0],
        "llmops_model_repo_id": "sim-org/GLM-5-NVFP4",
        "model_hf_endpoint": server["hf_root"],
        "preflight_pci_ids_url": pci_ids.as_uri(),
        "preflight_pci_ids_sha256": hashlib.sha256(pci_ids.read_bytes()).hexdigest(),
        "python_env_wheelhouse": str(wheelhouse_with_a_build(tmp_path / "wheelhouse")),
        "python_env_pip_index_url": server["pypi"],
        "python_env_torch_index_base_url": server["torch_index"].rstrip("/"),
        "python_env_torch_companions": {},
        "sglang_repo_url": server["git"] + "sgl-project/sglang.git",
        "sglang_version": "v0.5.9",
        "flash_attn_repo_url": server["git"] + "Dao-AILab/flash-attention.git",
        "flash_attn_version": "v2.8.3",
    }
    # pip and the hub read only the stand-ins: not this host's pip.conf, PIP_* or HF_* settings
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith(("ANSIBLE_", "HF_", "PIP_"))}
    env["PIP_CONFIG_FILE"] = os.devnull
    env.update(ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(ROOT),
               ANSIBLE_PYTHON_INTERPRETER=sys.executable)  # fmt: skip

    def run(bundle_dir, check=False, **extra):
        inventory = {"all": {"children": {"gpu_servers": {"hosts": {"fleet1": settings | extra}}}}}
        inv = tmp_path / "inventory.yml"
        inv.write_text(yaml.safe_dump(inventory))
        argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inv),
                str(ROOT / "playbooks" / "bundle.yml"), "-e", json.dumps({"bundle_dir": str(bundle_dir)}),
                *(["--check"] if check else [])]  # fmt: skip
        p = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600, check=False)
        return p.returncode, p.stdout + p.stderr

    return run, key


def test_the_bundle_holds_the_closure_the_model_and_pci_ids_signed_and_reproducible(bundle_run, server, tmp_path):
    run, key = bundle_run
    first = tmp_path / "bundle"
    rc, out = run(first)
    assert rc == 0, out[-4000:]
    # every task ran on the control node: a connection to the fleet's host would have been unreachable
    assert FLEET_RECAP.search(out).groups()[1:] == ("0", "0"), out[-2000:]

    manifest = json.loads((first / M.MANIFEST).read_text())
    files = {e["path"]: e["source"] for e in manifest["files"]}
    assert manifest["target"] == {"os": ["debian-12", "ubuntu-24.04"], "arch": "x86_64", "gpu_archs": ["sm_120"],
                                  "driver_branch": "580", "cuda": ["12.8"]}  # fmt: skip
    apt = {s["package"]: s["version"] for p, s in files.items() if s["kind"] == "apt" and "ubuntu-24.04" in p}
    debian = {s["package"]: s["version"] for p, s in files.items() if s["kind"] == "apt" and "debian-12" in p}
    assert debian["nvidia-kernel-open-dkms"] == "580.95.05-1"  # each release at its own version form
    assert apt["nvidia-headless-580-open"] == PINNED and apt["nvidia-utils-580"] == PINNED
    assert apt["libnvidia-compute-580"] == PINNED  # the closure, at the pin
    assert "cuda-toolkit-12-8" in apt
    assert apt["nvidia-fabricmanager"] == "580.95.05-1"  # auto: a bundle holds what an NVSwitch host installs
    model = [p for p, s in files.items() if s["kind"] == "model"]
    commit = {files[p]["commit"] for p in model}
    assert len(commit) == 1 and re.fullmatch(r"[0-9a-f]{40}", commit.pop())
    assert {Path(p).name for p in model} >= {"config.json", "model-00008-of-00008.safetensors"}
    assert all(p.startswith("model/sim-org/GLM-5-NVFP4/") for p in model)
    assert files["pci.ids"]["kind"] == "pci_ids"
    # the build with its record, in the wheelhouse layout; the unfinished one left out; torch at its pin and the
    # build's requirements beside it
    build = "wheelhouse/sglang/31508332409d86fa/"
    assert files[build + "sglang-0.5.9-py3-none-any.whl"]["version"] == "0.5.9" and build + "build.json" in files
    assert not [p for p in files if p.startswith("wheelhouse/sgl-kernel")]
    wheels = {s["name"]: s["version"] for p, s in files.items() if p.startswith("wheels/")}
    assert wheels["torch"] == "2.9.1+cu128" and "tqdm" in wheels and "sglang" not in wheels
    # the sources of what a host may build on site, each a git bundle at the ref's commit that builds as that release
    git = {s["url"].rsplit("/", 1)[-1]: (p, s) for p, s in files.items() if s["kind"] == "git"}
    assert set(git) == {"sglang.git", "flash-attention.git"}
    path, source = git["sglang.git"]
    assert path == f"git/sglang-{source['commit']}.bundle" and source["ref"] == "v0.5.9"
    clone = tmp_path / "sglang-from-bundle"
    subprocess.run(
        ["git", "clone", "-q", "-b", "v0.5.9", str(first / path), str(clone)], check=True, capture_output=True
    )
    described = subprocess.run(
        ["git", "-C", str(clone), "describe", "--tags"], capture_output=True, text=True, check=True
    )
    assert described.stdout.strip() == "v0.5.9"
    # the commit each build's ref named, as the hosts resolve it (git ls-remote), for hosts without a route
    assert files["git/refs.json"] == {"kind": "index", "name": "git-refs", "of": "git"}
    refs = json.loads((first / "git" / "refs.json").read_text())
    assert set(refs) == {"sglang", "flash-attn"}
    assert refs["sglang"]["url"] == server["git"] + "sgl-project/sglang.git" and refs["sglang"]["ref"] == "v0.5.9"
    listed = dict(reversed(line.split("\t")) for line in refs["sglang"]["ls_remote"].splitlines())
    assert source["commit"] in (listed.get("refs/tags/v0.5.9^{}"), listed.get("refs/tags/v0.5.9")), refs
    assert not [p for p in first.rglob("*") if ".partial" in p.name or p.name.startswith(".bundle-")]

    # the hosts' own check accepts it: the signature by the operator's key, every file's hash, the host in the target
    public = Path(str(key) + ".pub").read_text().strip()
    verify = subprocess.run(
        [sys.executable, "-m", "ansible_collections.llmops.sglang.plugins.modules.bundle_verify"],
        input=json.dumps({"ANSIBLE_MODULE_ARGS": {"root": str(first), "public_key": public,
                                                   "host": {"os": "ubuntu-24.04", "gpu_archs": ["sm_120"]}}}),
        capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT, check=False,
    )  # fmt: skip
    assert json.loads(verify.stdout).get("failed") is None, verify.stdout
    sbom = (first / M.SBOM).read_text()
    assert S.problems(sbom) == []

    before = {p: p.stat().st_mtime_ns for p in first.rglob("*")}
    rc, out = run(first)
    assert rc == 0 and FLEET_RECAP.search(out).groups() == ("0", "0", "0"), out[-4000:]
    assert {p: p.stat().st_mtime_ns for p in first.rglob("*")} == before

    second = tmp_path / "bundle2"
    rc, out = run(second)
    assert rc == 0, out[-4000:]
    assert (second / M.MANIFEST).read_bytes() == (first / M.MANIFEST).read_bytes()
    assert (second / M.SBOM).read_bytes() == (first / M.SBOM).read_bytes()


@pytest.mark.parametrize(
    "extra, expected",
    [
        ({"bundle_os": []}, "expected the bundle's target os as OS releases"),
        ({"bundle_gpu_archs": ["hopper"]}, "expected the bundle's target gpu_archs as GPU architectures"),
        ({"bundle_os": ["rhel-9"]}, "Expected each OS release of bundle_os to be a ubuntu or debian release"),
        ({"bundle_apt_sources": {"ubuntu-24.04": "deb http://x/ /"}}, "Expected bundle_apt_sources to map"),
        ({"llmops_driver_version": "580.95.05-1"}, "llmops_driver_version"),
        ({"bundle_kernels": {"ubuntu-24.04": ["6.8.0-60-generic; rm -rf /"]}}, "Expected bundle_kernels to map"),
        ({"bundle_kernels": {"ubuntu-22.04": ["6.8.0-60-generic"]}}, "Expected bundle_kernels to map"),
    ],
)
def test_bad_settings_are_refused_before_anything_is_collected(bundle_run, tmp_path, extra, expected):
    run, _ = bundle_run
    rc, out = run(tmp_path / "bundle", **extra)
    assert rc != 0
    assert expected in out, out[-3000:]
    assert "Traceback" not in out
    assert not (tmp_path / "bundle").exists() and not (tmp_path / "bundle.work").exists()


def test_a_fleet_without_nvswitch_gets_no_fabric_manager_and_only_the_pieces_asked_for(bundle_run, tmp_path):
    run, _ = bundle_run
    bundle = tmp_path / "bundle"
    only_apt = {
        "bundle_model": False,
        "bundle_pci_ids": False,
        "bundle_wheels": False,
        "bundle_git": False,
        "bundle_signing_key": "",
    }
    rc, out = run(bundle, nvidia_driver_fabricmanager=False, **only_apt)
    assert rc == 0, out[-4000:]
    manifest = json.loads((bundle / M.MANIFEST).read_text())
    kinds = {e["source"]["kind"] for e in manifest["files"]}
    packages = {e["source"].get("package") for e in manifest["files"]}
    assert kinds == {"apt", "index"} and "nvidia-fabricmanager" not in packages and "nvidia-utils-580" in packages
    assert not (bundle / M.SIGNATURE).exists() and "not signed yet" in out


def test_a_dry_run_checks_the_settings_and_collects_nothing(bundle_run, tmp_path):
    run, _ = bundle_run
    rc, out = run(tmp_path / "bundle", check=True)
    assert rc == 0, out[-3000:]
    assert "Check mode: the bundle's settings are valid for ubuntu-24.04, debian-12" in out
    assert not (tmp_path / "bundle").exists() and not (tmp_path / "bundle.work").exists()
    rc, out = run(tmp_path / "bundle", check=True, bundle_os=["rhel-9"])
    assert rc != 0 and "Expected each OS release of bundle_os" in out


def test_a_release_with_its_own_sources_also_asks_for_the_roles_other_packages(bundle_run, built, server, tmp_path):
    """With the release's own sources the closure includes the virtualenv's packages and the fleet's kernel headers:
    NVIDIA's repository stand-in, given as the release's only source, has neither, and apt names the first it lacks.
    (Without the release's own sources, the test above bundles NVIDIA's packages alone.)"""
    run, _ = bundle_run
    keyring = built["out"] / "keys" / "cuda-archive-keyring.gpg"
    nvidia = f"deb [signed-by={keyring}] {server['apt']} /"
    only_apt = {"bundle_model": False, "bundle_pci_ids": False, "bundle_wheels": False, "bundle_git": False}
    rc, out = run(tmp_path / "bundle", bundle_os=["debian-12"], bundle_apt_sources={"debian-12": [nvidia]},
                  bundle_kernels={"debian-12": ["6.1.0-28-amd64"]}, **only_apt)  # fmt: skip
    assert rc != 0 and "Traceback" not in out
    assert "apt could not resolve the packages for debian-12: Unable to locate package python3-venv" in out, out[-3000:]
    assert '"python3-venv", "nftables", "logrotate", "linux-headers-6.1.0-28-amd64"]' in out, out[-3000:]
    assert '"git"' not in out  # the build tools only where the bundle holds git sources to build from
