"""Installing from an offline bundle (llmops_bundle_dir): the inventory's settings are checked before anything changes,
preflight verifies the bundle on the host (signature, that it is made for this host, every file's sha256) with the
real ssh-keygen, and the driver stage's repository entry and index check point at the bundle's own packages."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.filter import bundle as F
from ansible_collections.llmops.sglang.plugins.module_utils import bundle_manifest as M

ROOT = Path(__file__).resolve().parents[2]
PASSED = "PASSED-THE-CHECKS"
# preflight asks for a bundle that is root's alone, and the bundles here are made by the account running the tests
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the bundle on a host is root's: run as root, as CI does")


def this_release() -> str:
    """This machine's OS release as a bundle names it, read from os-release (not from the code under test)."""
    info = platform.freedesktop_os_release()
    version = info["VERSION_ID"] if info["ID"] == "ubuntu" else info["VERSION_ID"].split(".")[0]
    return f"{info['ID']}-{version}"


ARCH = platform.machine()


def bundle_files(release: str) -> dict:
    """{relative path: (bytes, manifest source)}: a package index, a wheel and a model shard."""
    return {
        f"apt/{release}/Packages": (b"Package: nvidia-smi\n", {"kind": "index", "name": f"apt-packages-{release}",
                                                               "of": f"apt/{release}"}),
        "wheels/torch-2.9.1-cp311-cp311-manylinux_2_28_x86_64.whl": (b"a wheel " * 128, {
            "kind": "wheel", "name": "torch", "version": "2.9.1", "url": "https://pypi.example.internal/simple/torch/"}),
        "model/sim-org/GLM-5-NVFP4/%s/model-00001-of-00002.safetensors" % ("5f3c" * 10): (b"\x00weights" * 256, {
            "kind": "model", "repo_id": "sim-org/GLM-5-NVFP4", "commit": "5f3c" * 10}),
    }  # fmt: skip


def keypair(tmp: Path, name: str) -> tuple[Path, str]:
    key = tmp / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{name}@test", "-f", str(key)], check=True)
    return key, (tmp / f"{name}.pub").read_text().strip()


def signed_bundle(tmp: Path, key: Path, *, os_releases=None, gpu_archs=("sm_120",)) -> Path:
    root = tmp / "bundle"
    root.mkdir()
    sources = {}
    for rel, (data, source) in bundle_files(this_release()).items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
        sources[rel] = source
    target = {"os": list(os_releases or [this_release()]), "arch": ARCH, "gpu_archs": list(gpu_archs),
              "driver_branch": "580", "cuda": ["12.8"]}  # fmt: skip
    manifest = M.build(root, sources, "glm5-fleet", target)
    (root / M.MANIFEST).write_text(M.dumps(manifest))
    subprocess.run(M.sign_argv(str(key), str(root / M.MANIFEST)), check=True, capture_output=True)
    return root


HEAD = """
- hosts: localhost
  connection: local
  gather_facts: {facts}
  gather_subset: [min]
  roles:
    - role: llmops.sglang.llmops_defaults
  tasks:
"""


def playbook(tmp_path: Path, tasks: str, variables: dict, *, facts: bool = True) -> subprocess.CompletedProcess:
    """ansible-playbook on localhost (this checkout's collection and ansible.cfg) of a play with llmops_defaults first
    and ``tasks`` (YAML, indented as a play's tasks), with ``variables`` as extra vars."""
    play = tmp_path / "play.yml"
    play.write_text(HEAD.format(facts=str(facts).lower()) + textwrap.indent(textwrap.dedent(tasks), "    "))
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(play),
           "-e", json.dumps({"ansible_python_interpreter": sys.executable, **variables})]  # fmt: skip
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(ROOT))
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, check=False, timeout=300)


OFFLINE_CHECK = """
- name: Run preflight's offline bundle check alone
  ansible.builtin.include_role:
    name: llmops.sglang.preflight
    tasks_from: offline
- name: Say that the checks let the run through
  ansible.builtin.debug:
    msg: "{passed} {{{{ preflight_bundle.target | llmops.sglang.bundle_host_problems({{'gpu_archs': gpus}}) }}}}"
  vars:
    gpus: {gpus}
"""


def run_offline(tmp_path: Path, variables: dict, gpus=("sm_120",)) -> tuple[int, str]:
    p = playbook(tmp_path, OFFLINE_CHECK.format(passed=PASSED, gpus=json.dumps(list(gpus))), variables)
    return p.returncode, " ".join((p.stdout + p.stderr).split())


@pytest.fixture
def bundle(tmp_path):
    key, public = keypair(tmp_path, "ops")
    return signed_bundle(tmp_path, key), public


def test_a_bundle_signed_by_the_inventorys_key_and_made_for_the_host_passes(tmp_path, bundle):
    root, public = bundle
    rc, out = run_offline(tmp_path, {"llmops_bundle_dir": str(root), "llmops_bundle_public_key": public})
    assert rc == 0 and f"{PASSED} []" in out, out
    assert f"installing from the bundle glm5-fleet at {root} (3 files" in out and "sha256 verified" in out, out


def test_a_gpu_the_bundles_kernels_were_not_built_for_is_named(tmp_path, bundle):
    root, public = bundle
    rc, out = run_offline(tmp_path, {"llmops_bundle_dir": str(root), "llmops_bundle_public_key": public},
                          gpus=("sm_90", "sm_120"))  # fmt: skip
    assert rc == 0, out
    assert "its kernels were built for sm_120 and this host's GPUs need sm_90" in out, out


@pytest.mark.parametrize("damage", ["wheel", "model shard", "index"])
def test_a_tampered_file_is_refused_before_anything_is_installed(tmp_path, bundle, damage):
    root, public = bundle
    target = {"wheel": "wheels", "model shard": "model", "index": "apt"}[damage]
    path = next(p for p in root.joinpath(target).rglob("*") if p.is_file())
    data = bytearray(path.read_bytes())
    data[0] ^= 1
    path.write_bytes(bytes(data))
    rc, out = run_offline(tmp_path, {"llmops_bundle_dir": str(root), "llmops_bundle_public_key": public})
    assert rc != 0 and PASSED not in out, out
    assert f"{path.relative_to(root)}" in out and "nothing was installed" in out, out


def test_a_manifest_signed_by_another_key_is_refused(tmp_path, bundle):
    root, _ = bundle
    _, other = keypair(tmp_path, "someone-else")
    rc, out = run_offline(tmp_path, {"llmops_bundle_dir": str(root), "llmops_bundle_public_key": other})
    assert rc != 0 and PASSED not in out and "signed by the key given as public_key" in out, out


def test_a_bundle_for_another_release_is_refused_naming_both(tmp_path):
    key, public = keypair(tmp_path, "ops")
    root = signed_bundle(tmp_path, key, os_releases=["ubuntu-22.04"])
    rc, out = run_offline(tmp_path, {"llmops_bundle_dir": str(root), "llmops_bundle_public_key": public})
    assert rc != 0 and PASSED not in out, out
    assert f"it was made for ubuntu-22.04 and this host runs {this_release()}" in out, out


@pytest.mark.parametrize(
    "bundle_dir, key, says",
    [
        ("srv/bundle", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB8ovbFPNn3tRRW8Y9tCk1Tg0VpGBBCd1XnPrD2T7b4A ops",
         "Expected llmops_bundle_dir to be an absolute path"),
        ("/srv/bundle\nExecStartPre=+/bin/sh", "ssh-ed25519 AAAA ops", "Expected llmops_bundle_dir to be an absolute"),
        ("/srv/../etc", "ssh-ed25519 AAAA ops", "Expected llmops_bundle_dir to be a normal path"),
        ("/srv/bundle", "", "Expected llmops_bundle_public_key to be the one line"),
        ("/srv/bundle", "-----BEGIN OPENSSH PRIVATE KEY-----", "found another value"),
    ],
)  # fmt: skip
def test_bad_bundle_settings_are_one_sentence(bundle_dir, key, says):
    problems = F.bundle_problems(bundle_dir, key)
    assert len(problems) == 1 and says in problems[0] and "\n" not in problems[0], problems
    assert "PRIVATE" not in problems[0]  # never echoes what was put where the public key belongs


def test_no_bundle_asks_for_nothing():
    assert F.bundle_problems("", "") == []
    assert F.bundle_problems("/srv/llmops-bundle", "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB8 ops@site") == []


@pytest.mark.parametrize(
    "facts, release",
    [
        ({"distribution": "Ubuntu", "distribution_version": "24.04", "distribution_major_version": "24"},
         "ubuntu-24.04"),
        ({"distribution": "Ubuntu", "distribution_version": "22.04", "distribution_major_version": "22"},
         "ubuntu-22.04"),
        ({"distribution": "Debian", "distribution_version": "12.8", "distribution_major_version": "12"}, "debian-12"),
        ({"distribution": "Fedora", "distribution_version": "41", "distribution_major_version": "41"}, ""),
        ({"distribution": "Ubuntu", "distribution_version": "24.04 LTS/x", "distribution_major_version": "24"}, ""),
        ({}, ""),
    ],
)  # fmt: skip
def test_a_hosts_release_is_named_as_the_bundle_names_it(facts, release):
    assert F.bundle_release(facts) == release


SHOW = """
- name: Read the roles' values
  ansible.builtin.include_vars: "{{{{ item }}}}"
  loop: {files}
- name: Show them
  ansible.builtin.debug:
    msg: "SHOW {{{{ {names} }}}} END"
"""


def show(tmp_path: Path, files: list[str], names: list[str], variables: dict) -> dict:
    """The values of ``names`` as the roles' own defaults and vars files (``files``) render them on this host."""
    tasks = SHOW.format(files=json.dumps([str(ROOT / f) for f in files]),
                        names="{" + ", ".join(f"'{n}': {n}" for n in names) + "} | to_json")  # fmt: skip
    p = playbook(tmp_path, tasks, variables)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    text = " ".join(p.stdout.split()).replace('\\"', '"')
    return json.loads(text[text.index("SHOW ") + 5 : text.index(" END")])


def test_the_driver_stage_installs_from_the_bundles_packages_without_a_keyring(tmp_path, bundle):
    root, public = bundle
    files = ["roles/nvidia_repo/defaults/main.yml", "roles/nvidia_repo/vars/main.yml"]
    names = ["nvidia_repo_source_line", "nvidia_repo_index_url", "nvidia_repo_offline"]
    offline = show(tmp_path, files, names, {"llmops_bundle_dir": str(root), "llmops_bundle_public_key": public})
    release = this_release()
    assert offline == {
        "nvidia_repo_source_line": f"deb [trusted=yes] file:{root}/apt/{release} ./",
        "nvidia_repo_index_url": f"file://{root}/apt/{release}/",
        "nvidia_repo_offline": True,
    }
    online = show(tmp_path, files, names, {})
    assert online["nvidia_repo_source_line"].startswith("deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] ")
    assert "/compute/cuda/repos/" in online["nvidia_repo_index_url"] and online["nvidia_repo_offline"] is False


def test_every_wheel_comes_from_the_bundle_and_no_index_is_asked(tmp_path, bundle):
    root, _ = bundle
    files = ["roles/python_env/defaults/main.yml", "roles/python_env/vars/main.yml"]
    names = ["python_env_pip_index_args", "python_env_torch_index_args"]
    given = {
        "python_env_torch_variant_resolved": "cu128",
        "python_env_pip_index_url": "https://pypi.example.internal/simple",
    }
    offline = show(tmp_path, files, names, {"llmops_bundle_dir": str(root), **given})
    assert offline == dict.fromkeys(names, f"--no-index --find-links {root}/wheels")
    online = show(tmp_path, files, names, given)
    assert online == {
        "python_env_pip_index_args": "--index-url https://pypi.example.internal/simple",
        "python_env_torch_index_args": "--index-url https://download.pytorch.org/whl/cu128",
    }


def test_the_server_runs_with_the_hubs_offline_switches_only_from_a_bundle(tmp_path, bundle):
    root, _ = bundle
    files = ["roles/server/defaults/main.yml", "roles/server/vars/main.yml"]
    names = ["server_unit_environment"]
    given = {"server_nccl_socket_ifname": "", "server_nccl_ib_hca": ""}
    offline = show(tmp_path, files, names, {"llmops_bundle_dir": str(root), **given})
    assert offline["server_unit_environment"] == {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    mine = show(tmp_path, files, names, {"llmops_bundle_dir": str(root), "server_environment": {"HF_HUB_OFFLINE": "0"},
                                         **given})  # fmt: skip
    assert mine["server_unit_environment"]["HF_HUB_OFFLINE"] == "0"  # the operator's own setting wins
    assert show(tmp_path, files, names, given)["server_unit_environment"] == {}


@pytest.mark.parametrize("loosen", ["group-writable file", "foreign owner"])
def test_a_bundle_another_account_could_change_is_refused_before_its_signature(tmp_path, bundle, loosen):
    root, public = bundle
    shard = next(p for p in root.joinpath("model").rglob("*.safetensors"))
    if loosen == "group-writable file":
        shard.chmod(0o664)
        says = f"{shard} is writable by its group or others (mode 0664)"
    else:
        os.chown(shard, 65534, -1)
        says = f"{shard} is owned by uid 65534"
    rc, out = run_offline(tmp_path, {"llmops_bundle_dir": str(root), "llmops_bundle_public_key": public})
    assert rc != 0 and PASSED not in out, out
    assert says in out and "to be root's alone" in out and "chown -R root:root" in out, out


@pytest.mark.parametrize(
    "settings, says",
    [
        ({"llmops_bundle_dir": "srv/bundle"}, "Expected llmops_bundle_dir to be an absolute path"),
        ({"llmops_bundle_dir": "/srv/bundle"}, "Expected llmops_bundle_public_key to be the one line"),
    ],
)
def test_preflight_refuses_bad_bundle_settings_before_any_change(tmp_path, settings, says):
    tasks = """
    - name: Run preflight's inventory checks alone
      ansible.builtin.include_role:
        name: llmops.sglang.preflight
        tasks_from: inventory
    """
    p = playbook(tmp_path, tasks, settings, facts=False)
    out = " ".join((p.stdout + p.stderr).split())
    assert p.returncode != 0 and f"localhost: nothing was changed. {says}" in out, out[-2000:]
    assert "Traceback" not in out
