"""plugins/module_utils/bundle_wheels.py and the bundle_wheels module's refusals: the platform tags of a release's C
library, wheel file names, the build record checked against its wheel, and bad requests refused before the bundle
changes. The module against a served index is in tests/mirrors/test_bundle_playbook.py."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import bundle_manifest as M
from ansible_collections.llmops.sglang.plugins.module_utils import bundle_wheels as W

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _module_run import run_module


def test_the_platform_tags_are_every_manylinux_the_c_library_runs_newest_first():
    tags = W.platform_tags("2.35", "x86_64")
    assert tags[0] == "manylinux_2_35_x86_64" and "manylinux_2_28_x86_64" in tags and "manylinux_2_5_x86_64" in tags
    assert "manylinux_2_36_x86_64" not in tags
    assert tags[-3:] == ["manylinux2014_x86_64", "manylinux2010_x86_64", "manylinux1_x86_64"]


def test_pip_is_told_the_target_not_the_running_interpreter():
    argv = W.download_argv(["pip"], "/d", {"python": "3.12", "glibc": "2.39", "arch": "x86_64"}, ["torch==2.9.1+cu128"],
                           index_url="https://idx/whl/cu128")  # fmt: skip
    joined = " ".join(argv)
    assert "--only-binary=:all:" in argv and "--python-version 3.12" in joined and "--abi cp312" in joined
    assert "--platform manylinux_2_39_x86_64" in joined and argv[-2:] == ["--", "torch==2.9.1+cu128"]
    assert "--index-url https://idx/whl/cu128" in joined


@pytest.mark.parametrize(
    "name, want",
    [
        ("torch-2.9.1+cu128-cp312-cp312-manylinux_2_28_x86_64.whl", ("torch", "2.9.1+cu128")),
        ("flash_attn-2.8.3-py3-none-any.whl", ("flash-attn", "2.8.3")),
        ("sgl_kernel-0.3.21-1-cp310-abi3-manylinux2014_x86_64.whl", ("sgl-kernel", "0.3.21")),
        ("charset_normalizer-3.5.3-cp311-cp311-manylinux1_x86_64.manylinux_2_28_x86_64.manylinux_2_5_x86_64.whl",
         ("charset-normalizer", "3.5.3")),
    ],
)  # fmt: skip
def test_a_wheels_name_and_version_come_from_its_file_name(name, want):
    parsed = W.parse_wheel(name)
    assert (parsed["name"], parsed["version"]) == want
    M.check_source("wheels/" + name, W.wheel_source(name))


def test_a_file_that_is_not_a_wheel_is_not_read_as_one():
    assert W.parse_wheel("torch-2.9.1.tar.gz") is None
    assert W.parse_wheel("../x-1-py3-none-any.whl") is None


def build(top: Path, data: bytes = b"wheel bytes") -> Path:
    d = top / "sglang" / "ab12"
    d.mkdir(parents=True)
    (d / "sglang-0.5.9-py3-none-any.whl").write_bytes(data)
    record = {"name": "sglang", "version": "0.5.9", "wheel": "sglang-0.5.9-py3-none-any.whl",
              "sha256": hashlib.sha256(b"wheel bytes").hexdigest(),
              "inputs": {"python": "3.11", "commit": "c0ffee"}}  # fmt: skip
    (d / "build.json").write_text(json.dumps(record))
    return d


def test_a_build_record_is_read_with_its_wheel(tmp_path):
    got = W.read_record(str(build(tmp_path)))
    assert got == {"name": "sglang", "version": "0.5.9", "wheel": "sglang-0.5.9-py3-none-any.whl", "python": "3.11",
                   "fingerprint": "ab12", "commit": "c0ffee"}  # fmt: skip


def test_a_wheel_changed_after_its_build_is_refused(tmp_path):
    with pytest.raises(W.WheelBundleError) as e:
        W.read_record(str(build(tmp_path, b"tampered")))
    assert "the wheelhouse was changed after the build" in str(e.value)


def test_a_record_naming_a_path_is_refused(tmp_path):
    d = build(tmp_path)
    record = json.loads((d / "build.json").read_text()) | {"wheel": "../../evil-1-py3-none-any.whl"}
    (d / "build.json").write_text(json.dumps(record))
    with pytest.raises(W.WheelBundleError, match="to name its wheel file"):
        W.read_record(str(d))


@pytest.mark.parametrize(
    "change, says",
    [
        ({"targets": []}, "expected at least one Python"),
        ({"targets": [{"python": "3", "glibc": "2.39"}]}, "expected each target as {python: 3.X, glibc: 2.Y}"),
        ({"torch": ["torch>=2"]}, "expected each pinned requirement as NAME==VERSION"),
        ({"torch": ["torch==2.9.1+cu128"]}, "expected the PyTorch index"),
        ({"tamper": True}, "the wheelhouse was changed after the build"),
    ],
)
def test_a_bad_request_is_refused_and_the_bundle_is_unchanged(tmp_path, change, says):
    root = tmp_path / "bundle"
    root.mkdir()
    (root / "keep.txt").write_text("x")
    wheelhouse = tmp_path / "wheelhouse"
    build(wheelhouse, b"tampered" if change.pop("tamper", False) else b"wheel bytes")
    args = {"root": str(root), "wheelhouse": str(wheelhouse), "targets": [{"python": "3.11", "glibc": "2.36"}],
            "cache_dir": str(tmp_path / "cache")} | change  # fmt: skip
    got = run_module("bundle_wheels", args)
    assert got.get("failed") and says in got["msg"] and "\n" not in got["msg"], got
    assert sorted(p.name for p in root.iterdir()) == ["keep.txt"]


@pytest.fixture(autouse=True)
def pip_without_this_hosts_configuration(monkeypatch):
    """pip reads only the indexes a test names: not this host's pip.conf (its indexes, find-links, constraints) nor
    its PIP_* variables, so no resolution leaves the machine."""
    import os

    for name in [n for n in os.environ if n.upper().startswith("PIP_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)


def flashinfer_case(tmp_path, cubin_version="0.6.16"):
    """Local indexes as the real ones are laid out: torch's variant index, the package index, FlashInfer's own index
    (kernels at its root, the JIT cache under /cu128), and a wheelhouse build of SGLang that needs flashinfer-python."""
    from wheel_util import make_index, make_wheel

    files = tmp_path / "files"
    torch = make_wheel(files, "torch", "2.9.1+cu128")
    pypi = [make_wheel(files, "flashinfer-python", "0.6.16", ["tqdm"]), make_wheel(files, "tqdm", "4.67.1")]
    fi = tmp_path / "flashinfer"
    make_index(fi, [make_wheel(files / "fi", "flashinfer-cubin", cubin_version)], subdir="")
    make_index(fi, [make_wheel(files / "fi-cu128", "flashinfer-jit-cache", "0.6.16+cu128",
                               tag="cp39-abi3-manylinux_2_28_x86_64")], subdir="cu128")  # fmt: skip
    wheelhouse = tmp_path / "wheelhouse"
    build = wheelhouse / "sglang" / "ab12"
    wheel = make_wheel(build, "sglang", "0.5.9", ["torch", "flashinfer-python==0.6.16"])
    record = {"name": "sglang", "version": "0.5.9", "wheel": wheel.name, "inputs": {"python": "3.11"},
              "sha256": hashlib.sha256(wheel.read_bytes()).hexdigest()}  # fmt: skip
    (build / "build.json").write_text(json.dumps(record))
    root = tmp_path / "bundle"
    root.mkdir()
    return root, {"root": str(root), "wheelhouse": str(wheelhouse), "targets": [{"python": "3.11", "glibc": "2.36"}],
                  "torch": ["torch==2.9.1+cu128"], "torch_index_url": make_index(tmp_path / "torch", [torch]),
                  "index_url": make_index(tmp_path / "pypi", pypi), "flashinfer_index_url": fi.resolve().as_uri(),
                  "cache_dir": str(tmp_path / "cache")}  # fmt: skip


def test_flashinfers_kernel_packages_are_bundled_at_exactly_its_version(tmp_path):
    root, args = flashinfer_case(tmp_path)
    got = run_module("bundle_wheels", args)
    assert not got.get("failed"), got
    assert {"flashinfer_python-0.6.16-py3-none-any.whl", "flashinfer_cubin-0.6.16-py3-none-any.whl",
            "flashinfer_jit_cache-0.6.16+cu128-cp39-abi3-manylinux_2_28_x86_64.whl", "tqdm-4.67.1-py3-none-any.whl",
            "torch-2.9.1+cu128-py3-none-any.whl"} == set(got["wheels"])  # fmt: skip
    assert got["sources"]["wheels/flashinfer_jit_cache-0.6.16+cu128-cp39-abi3-manylinux_2_28_x86_64.whl"] == {
        "kind": "wheel", "name": "flashinfer-jit-cache", "version": "0.6.16+cu128"}  # fmt: skip
    assert sorted(p.name for p in (root / "wheels").iterdir()) == sorted(got["wheels"])
    assert run_module("bundle_wheels", args)["changed"] is False


def test_a_kernel_package_at_another_version_is_refused(tmp_path):
    root, args = flashinfer_case(tmp_path, cubin_version="0.6.15")
    got = run_module("bundle_wheels", args)
    assert got.get("failed") and "flashinfer-cubin==0.6.16" in got["msg"] and "\n" not in got["msg"], got
    assert list(root.iterdir()) == []


def test_flashinfer_without_its_index_is_refused(tmp_path):
    root, args = flashinfer_case(tmp_path)
    got = run_module("bundle_wheels", args | {"flashinfer_index_url": ""})
    assert got.get("failed") and got["msg"].startswith("expected FlashInfer's index"), got
    assert list(root.iterdir()) == []


def test_the_kernels_must_match_flashinfers_version():
    names = ["flashinfer_python-0.6.16-py3-none-any.whl", "flashinfer_cubin-0.6.16-py3-none-any.whl",
             "flashinfer_jit_cache-0.6.15+cu128-cp39-abi3-manylinux_2_28_x86_64.whl"]  # fmt: skip
    (problem,) = W.flashinfer_problems(names, "0.6.16")
    assert problem.startswith("expected flashinfer-jit-cache 0.6.16 (") and problem.endswith("; found 0.6.15")
    assert W.variant_of(["torchvision==0.24.1+cu128", "torch==2.9.1+cu129"]) == "cu129"


def test_check_mode_resolves_and_says_what_would_change_in_the_bundle_without_changing_it(tmp_path):
    root, args = flashinfer_case(tmp_path)
    dry = run_module("bundle_wheels", args, check_mode=True)
    assert dry["changed"] is True and "wheels/flashinfer_cubin-0.6.16-py3-none-any.whl" in dry["added"], dry
    assert list(root.iterdir()) == []
    real = run_module("bundle_wheels", args)
    assert sorted(real["added"]) == sorted(dry["added"])
    assert run_module("bundle_wheels", args, check_mode=True)["changed"] is False
