"""plugins/module_utils/bundle_sbom.py and the SBOM the llmops.sglang.bundle_manifest module writes: the manifest as a
CycloneDX 1.6 document made with CycloneDX's own library, valid against the JSON schema that library ships, every
file of the manifest in it with its sha256, byte-identical for the same manifest, and each source named by the
package URL its purl-spec type gives it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from packageurl import PackageURL

from ansible_collections.llmops.sglang.plugins.module_utils import bundle_manifest as M
from ansible_collections.llmops.sglang.plugins.module_utils import bundle_sbom as S

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _module_run import run_module
from test_bundle_manifest import FILES, make_bundle

SHARD = {"kind": "model", "repo_id": "sim-org/GLM-5-NVFP4", "commit": "5f3c" * 10}


def manifest_of(tmp_path):
    root = tmp_path / "bundle"
    root.mkdir()
    sources = make_bundle(root)
    (root / "model" / "config.json").write_text("{}")  # a second file of the same snapshot
    sources["model/config.json"] = SHARD
    return root, M.loads(M.dumps(M.build(root, sources, "glm5-fleet")))


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ({"kind": "apt", "package": "nvidia-driver-580-open", "version": "580.95.05-0ubuntu1", "vendor": "ubuntu",
          "arch": "amd64", "distro": "noble"},
         "pkg:deb/ubuntu/nvidia-driver-580-open@580.95.05-0ubuntu1?arch=amd64&distro=noble"),
        ({"kind": "apt", "package": "cuda-toolkit-12-8", "version": "12.8.1-1"},
         "pkg:deb/debian/cuda-toolkit-12-8@12.8.1-1"),
        ({"kind": "wheel", "name": "flashinfer_python", "version": "0.5.3"}, "pkg:pypi/flashinfer-python@0.5.3"),
        (SHARD, "pkg:huggingface/sim-org/GLM-5-NVFP4@" + "5f3c" * 10),
        ({"kind": "git", "url": "https://github.com/sgl-project/sglang.git", "commit": "ab" * 20},
         "pkg:generic/sglang@" + "ab" * 20 + "?vcs_url=git%2Bhttps://github.com/sgl-project/sglang.git%40" + "ab" * 20),
        ({"kind": "pci_ids", "url": "https://pci-ids.ucw.cz/v2.2/pci.ids"},
         "pkg:generic/pci.ids?download_url=https://pci-ids.ucw.cz/v2.2/pci.ids"),
        ({"kind": "patch", "name": "sm120-smem"}, "pkg:generic/sm120-smem"),
        ({"kind": "index", "name": "apt-packages-ubuntu-24.04", "of": "apt/ubuntu-24.04"},
         "pkg:generic/apt-packages-ubuntu-24.04"),
    ],
)  # fmt: skip
def test_each_source_kind_is_named_by_its_package_url(source, expected):
    got = S.purl(source)
    assert got == expected
    parsed = PackageURL.from_string(got)  # the purl library reads back what it wrote
    assert parsed.type in ("deb", "pypi", "huggingface", "generic")


def test_the_sbom_is_valid_cyclonedx_and_lists_every_file_with_its_hash(tmp_path):
    _, manifest = manifest_of(tmp_path)
    text = S.document(manifest)
    assert S.problems(text) == []
    doc = json.loads(text)
    assert (doc["bomFormat"], doc["specVersion"]) == ("CycloneDX", "1.6")
    files = {f["name"]: f["hashes"][0] for c in doc["components"] for f in c["components"]}
    assert files == {e["path"]: {"alg": "SHA-256", "content": e["sha256"]} for e in manifest["files"]}
    # one component per source: the snapshot's two files are one model at its commit
    model = [c for c in doc["components"] if c["type"] == "machine-learning-model"]
    assert len(model) == 1 and len(model[0]["components"]) == 2 and model[0]["version"] == "5f3c" * 10
    assert len(doc["components"]) == len(FILES)
    for c in doc["components"]:  # each named as its package URL names it (the model as ORG/NAME)
        p = PackageURL.from_string(c["purl"])
        assert c["name"] == (f"{p.namespace}/{p.name}" if p.type == "huggingface" else p.name), c
    root = [d for d in doc["dependencies"] if d["ref"] == "bundle"]
    assert len(root) == 1 and len(root[0]["dependsOn"]) == len(FILES)


def test_a_git_tree_and_pci_ids_are_named_by_their_package_urls():
    git = {"kind": "git", "url": "https://github.com/sgl-project/sglang.git", "commit": "ab" * 20}
    assert S._name(git) == "sglang" and S._name({"kind": "pci_ids", "url": "https://x/pci.ids"}) == "pci.ids"
    assert S._name({"kind": "wheel", "name": "flashinfer_python", "version": "0.5.3"}) == "flashinfer-python"


def test_two_sboms_of_one_manifest_are_byte_identical_and_another_manifest_has_another_serial(tmp_path):
    _, manifest = manifest_of(tmp_path)
    first, second = S.document(manifest), S.document(json.loads(M.dumps(manifest)))
    assert first == second
    other = dict(manifest, bundle="another-fleet")
    assert json.loads(S.document(other))["serialNumber"] != json.loads(first)["serialNumber"]


@pytest.mark.parametrize(
    ("edit", "says"),
    [
        (lambda d: d["components"][0]["components"][0]["hashes"][0].update(alg="SHA-999"), "'SHA-999' is not one of"),
        (lambda d: d.pop("bomFormat"), "'bomFormat' is a required property"),
        (lambda d: d["components"][0].update(type="spaceship"), "spaceship"),
    ],
)
def test_an_sbom_the_schema_refuses_is_named_in_one_line(tmp_path, edit, says):
    _, manifest = manifest_of(tmp_path)
    doc = json.loads(S.document(manifest))
    edit(doc)
    found = S.problems(json.dumps(doc))
    assert len(found) == 1 and says in found[0] and "\n" not in found[0], found


def test_the_module_writes_the_sbom_beside_the_manifest_and_leaves_it_out_of_the_files(tmp_path):
    root, manifest = manifest_of(tmp_path)
    sources = {e["path"]: e["source"] for e in manifest["files"]}
    got = run_module("bundle_manifest", {"root": str(root), "bundle": "glm5-fleet", "sources": sources})
    assert got["changed"] and got["files"] == len(manifest["files"]), got
    text = (root / M.SBOM).read_text()
    assert S.problems(text) == [] and text == S.document(manifest)
    assert oct((root / M.SBOM).stat().st_mode & 0o777) == "0o644"
    assert M.SBOM not in M.bundle_files(root) and M.problems(root, manifest) == []
    again = run_module("bundle_manifest", {"root": str(root), "bundle": "glm5-fleet", "sources": sources})
    assert again["changed"] is False and again["sbom_sha256"] == got["sbom_sha256"]
    (root / M.SBOM).unlink()
    without = run_module("bundle_manifest", {"root": str(root), "bundle": "glm5-fleet", "sources": sources,
                                             "sbom": False})  # fmt: skip
    assert without["changed"] is False and "sbom_sha256" not in without and not (root / M.SBOM).exists()


def test_the_check_by_hand_in_the_docs_says_valid_and_refuses_a_broken_sbom(tmp_path):
    """docs/air-gapped.md's one-line check, run as written (python is this venv's) in a directory holding bundle/."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "air-gapped.md").read_text()
    line = next(x for x in docs.splitlines() if x.startswith("python -c ") and "sbom.cdx.json" in x)
    root, manifest = manifest_of(tmp_path)
    (root / M.SBOM).write_text(S.document(manifest))
    run = subprocess.run(["bash", "-c", line], check=False, cwd=tmp_path, capture_output=True, text=True,
                         env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"})  # fmt: skip
    assert run.returncode == 0 and run.stdout.strip() == "valid", (run.stdout, run.stderr)
    doc = json.loads((root / M.SBOM).read_text())
    doc.pop("bomFormat")
    (root / M.SBOM).write_text(json.dumps(doc))
    run = subprocess.run(["bash", "-c", line], check=False, cwd=tmp_path, capture_output=True, text=True,
                         env={"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"})  # fmt: skip
    assert run.returncode == 1 and "bomFormat" in run.stdout, (run.stdout, run.stderr)
