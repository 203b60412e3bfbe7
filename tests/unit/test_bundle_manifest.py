"""plugins/module_utils/bundle_manifest.py and the llmops.sglang.bundle_verify module: the manifest is canonical (two
manifests of the same bundle are the same bytes), a bundle is checked file by file against it, and the signature is
OpenSSH's own (real ssh-keygen, keys made here): a tampered wheel, model shard or driver package, a file added or
missing, and a manifest signed by another key are each refused in one line, before anything would be installed."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import bundle_manifest as M

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _module_run import run_module

FILES = {
    "apt/nvidia-driver-580-open_580.95.05-0ubuntu1_amd64.deb": (b"driver package " * 64, {
        "kind": "apt", "package": "nvidia-driver-580-open", "version": "580.95.05-0ubuntu1",
        "url": "https://apt.example.internal/pool/n/nvidia-driver-580-open_580.95.05-0ubuntu1_amd64.deb"}),
    "wheels/torch-2.9.1-cp311-cp311-manylinux_2_28_x86_64.whl": (b"a wheel " * 128, {
        "kind": "wheel", "name": "torch", "version": "2.9.1", "url": "https://pypi.example.internal/simple/torch/"}),
    "model/model-00001-of-00002.safetensors": (b"\x00weights" * 256, {
        "kind": "model", "repo_id": "sim-org/GLM-5-NVFP4", "commit": "5f3c" * 10}),
    "pci.ids": (b"10de  NVIDIA Corporation\n", {"kind": "pci_ids", "url": "https://pci-ids.ucw.cz/v2.2/pci.ids"}),
}  # fmt: skip


def make_bundle(root: Path) -> dict:
    for rel, (data, _) in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return {rel: source for rel, (_, source) in FILES.items()}


def keypair(tmp: Path, name: str) -> tuple[Path, str]:
    key = tmp / name
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"{name}@test", "-f", str(key)], check=True)
    return key, (tmp / f"{name}.pub").read_text().strip()


def signed_bundle(tmp: Path, key: Path) -> Path:
    root = tmp / "bundle"
    root.mkdir()
    manifest = M.build(root, make_bundle(root), "glm5-fleet")
    (root / M.MANIFEST).write_text(M.dumps(manifest))
    subprocess.run(M.sign_argv(str(key), str(root / M.MANIFEST)), check=True, capture_output=True)
    return root


def test_two_manifests_of_the_same_bundle_are_byte_identical(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    first = M.dumps(M.build(a, make_bundle(a), "glm5-fleet"))
    # the same files written in another order, at another time
    for rel in reversed(list(FILES)):
        (b / rel).parent.mkdir(parents=True, exist_ok=True)
        (b / rel).write_bytes(FILES[rel][0])
    second = M.dumps(M.build(b, {rel: dict(reversed(list(s.items()))) for rel, (_, s) in FILES.items()}, "glm5-fleet"))
    assert first == second
    doc = json.loads(first)
    assert [e["path"] for e in doc["files"]] == sorted(FILES)
    assert all(len(e["sha256"]) == 64 and e["size"] == len(FILES[e["path"]][0]) for e in doc["files"])


@pytest.mark.parametrize(
    "change, says",
    [
        ({"pci.ids": None}, "expected a source for every file of the bundle; found none for pci.ids"),
        ({"pci.ids": {"kind": "ftp", "url": "x"}}, "kind one of apt, git, index, model, patch, pci_ids, wheel"),
        ({"pci.ids": {"kind": "wheel", "name": "torch"}}, "to name name, version; found none for version"),
        ({"extra.whl": {"kind": "wheel", "name": "x", "version": "1"}}, "found none for extra.whl"),
    ],
)
def test_every_file_has_a_source_and_every_source_a_file(tmp_path, change, says):
    sources = make_bundle(tmp_path)
    for rel, source in change.items():
        if source is None:
            sources.pop(rel)
        else:
            sources[rel] = source
    with pytest.raises(M.ManifestError) as e:
        M.build(tmp_path, sources, "b")
    assert says in str(e.value) and "\n" not in str(e.value)


def test_a_link_in_the_bundle_is_refused(tmp_path):
    sources = make_bundle(tmp_path)
    (tmp_path / "wheels" / "latest.whl").symlink_to("/etc/passwd")
    with pytest.raises(M.ManifestError) as e:
        M.build(tmp_path, sources, "b")
    assert "the link wheels/latest.whl" in str(e.value)


@pytest.mark.parametrize(
    "text, says",
    [
        ("{", "to be JSON"),
        ('{"schema": 2, "files": []}', "schema 1"),
        ('{"schema": 1, "files": [{"path": "../etc/shadow", "sha256": "' + "0" * 64 + '", "size": 1, "source": {}}]}',
         "relative paths inside the bundle"),
        ('{"schema": 1, "files": [{"path": "a", "sha256": "xyz", "size": 1, "source": {}}]}', "a sha256 and a size"),
    ],
)  # fmt: skip
def test_a_manifest_not_made_here_is_refused(text, says):
    with pytest.raises(M.ManifestError) as e:
        M.loads(text)
    assert says in str(e.value)


@pytest.mark.parametrize(
    "identity, key, says",
    [
        ("ops site", "ssh-ed25519 AAAA", "signer identity"),
        ("ops", "-----BEGIN OPENSSH PRIVATE KEY-----", "one OpenSSH public key line"),
        ("ops", "ssh-ed25519 AAAA x\ncert-authority ssh-ed25519 BBBB", "one OpenSSH public key line"),
    ],
)
def test_the_public_key_is_one_line_of_a_known_type(identity, key, says):
    with pytest.raises(M.ManifestError) as e:
        M.allowed_signers(identity, key)
    assert says in str(e.value)


def verify(root: Path, public: str) -> dict:
    return run_module("bundle_verify", {"root": str(root), "public_key": public})


def test_a_bundle_signed_by_the_inventorys_key_verifies(tmp_path):
    key, public = keypair(tmp_path, "ops")
    root = signed_bundle(tmp_path, key)
    got = verify(root, public)
    assert not got.get("failed") and got["files"] == len(FILES) and got["bundle"] == "glm5-fleet", got
    assert got["bytes"] == sum(len(d) for d, _ in FILES.values()) and got["changed"] is False


def test_a_manifest_signed_by_another_key_is_refused(tmp_path):
    key, _ = keypair(tmp_path, "ops")
    _, other = keypair(tmp_path, "intruder")
    got = verify(signed_bundle(tmp_path, key), other)
    assert got.get("failed") and "signed by the key given as public_key" in got["msg"], got
    assert "nothing was installed" in got["msg"] and "\n" not in got["msg"]


@pytest.mark.parametrize(
    "rel",
    [
        "wheels/torch-2.9.1-cp311-cp311-manylinux_2_28_x86_64.whl",
        "model/model-00001-of-00002.safetensors",
        "apt/nvidia-driver-580-open_580.95.05-0ubuntu1_amd64.deb",
    ],
)
def test_a_tampered_file_is_refused_naming_it(tmp_path, rel):
    key, public = keypair(tmp_path, "ops")
    root = signed_bundle(tmp_path, key)
    data = bytearray((root / rel).read_bytes())
    data[7] ^= 0xFF  # one byte, the same size: only the hash can tell
    (root / rel).write_bytes(bytes(data))
    got = verify(root, public)
    assert got.get("failed") and f"{rel} has sha256" in got["msg"] and "the manifest says" in got["msg"], got


def test_a_file_added_missing_or_cut_short_is_refused(tmp_path):
    key, public = keypair(tmp_path, "ops")
    root = signed_bundle(tmp_path, key)
    (root / "wheels" / "evil-1.0-py3-none-any.whl").write_bytes(b"x")
    (root / "pci.ids").unlink()
    model = root / "model" / "model-00001-of-00002.safetensors"
    model.write_bytes(model.read_bytes()[:100])
    got = verify(root, public)
    assert got.get("failed"), got
    assert got["problems"] == [
        "wheels/evil-1.0-py3-none-any.whl is in the bundle but not in its manifest",
        "model/model-00001-of-00002.safetensors has 100 bytes; the manifest says 2048",
        "pci.ids is in the manifest but missing from the bundle",
    ], got["problems"]


def test_a_manifest_edited_after_signing_is_refused(tmp_path):
    key, public = keypair(tmp_path, "ops")
    root = signed_bundle(tmp_path, key)
    doc = json.loads((root / M.MANIFEST).read_text())
    (root / "wheels" / "evil-1.0-py3-none-any.whl").write_bytes(b"x")
    doc["files"].append({"path": "wheels/evil-1.0-py3-none-any.whl", "sha256": M.sha256_file(
        root / "wheels" / "evil-1.0-py3-none-any.whl"), "size": 1, "source": {"kind": "wheel", "name": "evil",
        "version": "1.0"}})  # fmt: skip
    (root / M.MANIFEST).write_text(M.dumps(doc))
    got = verify(root, public)
    assert got.get("failed") and "signed by the key" in got["msg"], got


def test_a_bundle_without_its_signature_is_refused(tmp_path):
    key, public = keypair(tmp_path, "ops")
    root = signed_bundle(tmp_path, key)
    (root / M.SIGNATURE).unlink()
    got = verify(root, public)
    assert got.get("failed") and "manifest.json.sig" in got["msg"], got
    shutil.rmtree(root)


def write_manifest(root: Path, sources: dict, check_mode: bool = False) -> dict:
    return run_module("bundle_manifest", {"root": str(root), "bundle": "glm5-fleet", "sources": sources}, check_mode)


def test_the_manifest_module_writes_the_same_bytes_for_the_same_inputs_and_then_nothing(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir(), b.mkdir()
    first, second = write_manifest(a, make_bundle(a)), write_manifest(b, make_bundle(b))
    assert first["changed"] and second["changed"] and first["sha256"] == second["sha256"], (first, second)
    assert (a / M.MANIFEST).read_bytes() == (b / M.MANIFEST).read_bytes()
    assert oct((a / M.MANIFEST).stat().st_mode & 0o777) == "0o644"
    again = write_manifest(a, make_bundle(a))
    assert again["changed"] is False and again["files"] == len(FILES)


def test_a_changed_file_rewrites_the_manifest_and_drops_the_stale_signature(tmp_path):
    key, public = keypair(tmp_path, "ops")
    root = signed_bundle(tmp_path, key)
    assert verify(root, public).get("failed") is None
    (root / "pci.ids").write_bytes(b"10de  NVIDIA Corporation\n2bb1  RTX PRO 6000\n")
    sources = {rel: source for rel, (_, source) in FILES.items()}
    dry = write_manifest(root, sources, check_mode=True)
    assert dry["changed"] and (root / M.SIGNATURE).exists()  # check mode: nothing written or removed
    got = write_manifest(root, sources)
    assert got["changed"] and not (root / M.SIGNATURE).exists()
    assert verify(root, public).get("failed")  # unsigned until the operator signs it again
    subprocess.run(M.sign_argv(str(key), str(root / M.MANIFEST)), check=True, capture_output=True)
    assert verify(root, public).get("failed") is None


def test_the_module_signs_with_the_operators_key_once_and_again_only_after_a_change(tmp_path):
    key, public = keypair(tmp_path, "ops")
    root = tmp_path / "bundle"
    root.mkdir()
    sources = make_bundle(root)
    args = {"root": str(root), "bundle": "glm5-fleet", "sources": sources, "signing_key": str(key)}
    first = run_module("bundle_manifest", args)
    assert first["changed"] and first["signed"] is True, first
    assert verify(root, public).get("failed") is None
    signature = (root / M.SIGNATURE).read_bytes()
    again = run_module("bundle_manifest", args)
    assert again["changed"] is False and again["signed"] is True
    assert (root / M.SIGNATURE).read_bytes() == signature
    (root / "pci.ids").write_bytes(b"10de  NVIDIA Corporation\n2bb1  RTX PRO 6000\n")
    changed = run_module("bundle_manifest", args)
    assert changed["changed"] and changed["signed"] is True
    assert verify(root, public).get("failed") is None


def test_a_missing_signing_key_is_refused_before_anything_is_written(tmp_path):
    sources = make_bundle(tmp_path)
    got = run_module("bundle_manifest", {"root": str(tmp_path), "bundle": "glm5-fleet", "sources": sources,
                                         "signing_key": str(tmp_path / "nokey")})  # fmt: skip
    assert got.get("failed") and got["msg"].startswith("expected the signing key") and "\n" not in got["msg"]
    assert not (tmp_path / M.MANIFEST).exists() and not (tmp_path / M.SBOM).exists()


def test_a_file_without_a_source_writes_nothing(tmp_path):
    sources = make_bundle(tmp_path)
    sources.pop("pci.ids")
    got = write_manifest(tmp_path, sources)
    assert got.get("failed") and "found none for pci.ids" in got["msg"] and "nothing was written" in got["msg"]
    assert not (tmp_path / M.MANIFEST).exists()


TARGET = {"os": ["ubuntu-24.04", "ubuntu-22.04"], "arch": "x86_64", "gpu_archs": ["sm_120", "sm_90"],
          "driver_branch": "580", "cuda": ["12.8"]}  # fmt: skip
HOST = {"os": "ubuntu-24.04", "arch": "x86_64", "gpu_archs": ["sm_120"], "driver_branch": "580", "cuda": ["12.8"]}


def test_the_target_is_canonical_and_a_malformed_one_is_refused():
    assert M.check_target(dict(TARGET, os=["ubuntu-24.04", "ubuntu-22.04", "ubuntu-24.04"]))["os"] == [
        "ubuntu-22.04", "ubuntu-24.04"]  # fmt: skip
    rows = [
        ({k: v for k, v in TARGET.items() if k != "cuda"}, "expected the bundle's target to name exactly arch, cuda"),
        (dict(TARGET, os="ubuntu-24.04"), "expected the bundle's target os as OS releases such as ubuntu-24.04"),
        (dict(TARGET, arch="amd64"), "expected the bundle's target arch as a CPU architecture"),
        (dict(TARGET, gpu_archs=["blackwell"]), "expected the bundle's target gpu_archs as GPU architectures"),
        (dict(TARGET, driver_branch=580), "expected the bundle's target driver_branch as a driver branch"),
        (dict(TARGET, cuda=[]), "expected the bundle's target cuda as CUDA toolkit versions"),
    ]
    for target, says in rows:
        with pytest.raises(M.ManifestError) as e:
            M.check_target(target)
        assert str(e.value).startswith(says) and "\n" not in str(e.value), (target, str(e.value))


@pytest.mark.parametrize(
    ("host", "says"),
    [
        (dict(HOST, os="debian-12"), "it was made for ubuntu-22.04, ubuntu-24.04 and this host runs debian-12"),
        (dict(HOST, arch="aarch64"), "it holds x86_64 packages and wheels and this host is aarch64"),
        (dict(HOST, gpu_archs=["sm_100", "sm_120"]),
         "its kernels were built for sm_120, sm_90 and this host's GPUs need sm_100"),
        (dict(HOST, driver_branch="590"), "it holds the 580 driver branch and this host is to run 590"),
        (dict(HOST, cuda=["12.8", "13.0"]), "it holds the CUDA toolkits 12.8 and this host is to install 13.0"),
    ],
)  # fmt: skip
def test_a_host_outside_the_target_is_named_for_what_differs(host, says):
    target = M.check_target(TARGET)
    assert M.target_problems(target, HOST) == [] and M.target_problems(target, {}) == []
    assert M.target_problems(target, host) == [says]


def test_a_bundle_for_another_fleet_is_refused_after_its_signature_and_before_any_file_is_hashed(tmp_path):
    key, public = keypair(tmp_path, "ops")
    root = tmp_path / "bundle"
    root.mkdir()
    sources = make_bundle(root)
    got = run_module("bundle_manifest", {"root": str(root), "bundle": "glm5-fleet", "sources": sources,
                                         "target": TARGET, "sbom": False})  # fmt: skip
    assert got["changed"] and json.loads((root / M.MANIFEST).read_text())["target"]["os"] == sorted(TARGET["os"])
    subprocess.run(M.sign_argv(str(key), str(root / M.MANIFEST)), check=True, capture_output=True)
    ok = run_module("bundle_verify", {"root": str(root), "public_key": public, "host": HOST})
    assert not ok.get("failed"), ok
    shard = root / "model" / "model-00001-of-00002.safetensors"
    shard.write_bytes(b"\x01" + shard.read_bytes()[1:])  # tampered too: the target is what is named first
    got = run_module("bundle_verify", {"root": str(root), "public_key": public,
                                       "host": dict(HOST, os="debian-12", gpu_archs=["sm_100"])})  # fmt: skip
    says = (
        "expected the bundle glm5-fleet to be made for this host's fleet; it was made for ubuntu-22.04, "
        "ubuntu-24.04 and this host runs debian-12; its kernels were built for"
    )
    assert got.get("failed") and got["msg"].startswith(says), got["msg"]
    assert "safetensors" not in got["msg"]
    tampered = run_module("bundle_verify", {"root": str(root), "public_key": public, "host": HOST})
    assert tampered.get("failed") and "model-00001-of-00002.safetensors has sha256" in tampered["msg"], tampered


def test_sync_makes_the_directories_hold_exactly_the_wanted_files(tmp_path):
    """M.sync, the one way bundle_apt and bundle_wheels put files into a bundle's directories."""
    src = tmp_path / "src"
    src.mkdir()
    (src / "a.whl").write_bytes(b"a")
    (src / "b.deb").write_bytes(b"b")
    root = tmp_path / "bundle"
    (root / "wheels" / "old").mkdir(parents=True)
    (root / "wheels" / "old" / "gone.whl").write_bytes(b"old")
    (root / "keep.txt").write_text("outside the synced directories")
    want = {"wheels/a.whl": str(src / "a.whl"), "apt/x/b.deb": str(src / "b.deb")}
    dry = M.sync(str(root), ["wheels", "apt/x"], want, dry_run=True)
    assert dry == (["apt/x/b.deb", "wheels/a.whl"], ["wheels/old/gone.whl"])
    assert (root / "wheels" / "old" / "gone.whl").exists() and not (root / "apt").exists()
    assert M.sync(str(root), ["wheels", "apt/x"], want) == dry
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()) == [
        "apt/x/b.deb", "keep.txt", "wheels/a.whl"]  # fmt: skip
    assert not (root / "wheels" / "old").exists()
    assert M.sync(str(root), ["wheels", "apt/x"], want) == ([], [])
    (src / "a.whl").write_bytes(b"changed")
    assert M.sync(str(root), ["wheels", "apt/x"], want) == (["wheels/a.whl"], [])
    assert (root / "wheels" / "a.whl").read_bytes() == b"changed"


def test_sync_refuses_a_link_in_the_bundle_before_anything_changes(tmp_path):
    root = tmp_path / "bundle"
    (root / "wheels").mkdir(parents=True)
    (root / "wheels" / "x.whl").symlink_to("/etc/passwd")
    (root / "wheels" / "stale.whl").write_bytes(b"s")
    with pytest.raises(M.ManifestError, match=r"found \S*x\.whl, which is not one"):
        M.sync(str(root), ["wheels"], {})
    assert (root / "wheels" / "stale.whl").exists()
