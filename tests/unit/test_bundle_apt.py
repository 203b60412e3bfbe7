"""plugins/module_utils/bundle_apt.py: the request's checks, the private apt's options, and the reading of apt's own
output (tests/unit/fixtures/apt: real apt-get runs, see its README). The module against a served repository is in
tests/mirrors/test_bundle_apt_closure.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import bundle_apt as A
from ansible_collections.llmops.sglang.plugins.module_utils import bundle_manifest as M

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "apt"


def test_the_pinned_plan_is_the_closure_at_the_pinned_version():
    plan = A.parse_plan((FIXTURES / "plan-pinned.txt").read_text())
    names = [p for p, _, _ in plan]
    assert names == sorted(names) and len(names) == 8
    assert {"nvidia-headless-580-open", "nvidia-utils-580", "libnvidia-compute-580"} <= set(names)
    assert {(v, a) for _, v, a in plan} == {("580.95.05-0ubuntu1", "amd64")}


def test_an_upgrade_line_is_read_with_the_new_version():
    line = "Inst libc6 [2.36-9] (2.36-9+deb12u13 Debian-Security:12/stable-security [amd64])\n"
    assert A.parse_plan(line) == [("libc6", "2.36-9+deb12u13", "amd64")]


def test_an_unmet_dependency_is_named_not_apts_generic_line():
    text = (FIXTURES / "plan-unmet.txt").read_text()
    assert A.parse_plan(text) == []
    assert A.first_error(text) == (
        "nvidia-headless-580-open Depends nvidia-dkms-580-open (= 580.95.05-0ubuntu1) but 580.105.08-0ubuntu1 is to "
        "be installed"
    )
    assert A.first_error("W: x\nE: Version '9' for 'a' was not found\n") == "Version '9' for 'a' was not found"
    assert A.first_error("") == "no output"


def test_a_file_name_is_apts_with_the_epoch_escaped():
    assert A.deb_name("cuda-compat", "1:12.8-1", "amd64") == "cuda-compat_1%3a12.8-1_amd64.deb"


def test_each_packages_source_is_a_manifest_source_with_its_package_url_fields():
    src = A.source("nvidia-utils-580", "580.95.05-0ubuntu1", "amd64", "ubuntu-24.04")
    M.check_source("apt/ubuntu-24.04/x.deb", src)
    assert src["vendor"] == "ubuntu" and src["distro"] == "ubuntu-24.04"


def test_the_control_fields_must_be_the_planned_package():
    fields = A.parse_control("Package: a\nVersion: 1-1\nArchitecture: amd64\n")
    assert A.check_control(fields, "a", "1-1", "amd64") is None
    assert (
        A.check_control(fields, "a", "1-2", "amd64")
        == "expected a 1-2 (amd64); found a 1-1 (amd64) in the downloaded file"
    )


def test_every_path_apt_reads_or_writes_is_private(tmp_path):
    paths = A.prepare(tmp_path / "s", ["deb [signed-by=/k.gpg] http://h/ /"], "Package: x\n")
    opts = A.options(paths, "x86_64", True)
    assert opts[:2] == ["-c", str(tmp_path / "s" / "etc" / "apt.conf")]
    pairs = dict(o.split("=", 1) for o in opts[3::2])
    for key in (
        "Dir::State",
        "Dir::State::status",
        "Dir::Cache",
        "Dir::Cache::archives",
        "Dir::Etc::sourcelist",
        "Dir::Etc::sourceparts",
        "Dir::Etc::preferences",
        "Dir::Etc::preferencesparts",
    ):
        assert pairs[key].startswith(str(tmp_path / "s")), key
    assert pairs["APT::Architectures"] == "amd64"
    assert (tmp_path / "s" / "status").read_text() == ""
    assert (tmp_path / "s" / "etc" / "preferences").read_text() == "Package: x\n"
    assert oct((tmp_path / "s").stat().st_mode & 0o777) == "0o700"
    assert A.update_argv(opts)[-2:] == ["update", "--error-on=any"]
    assert A.download_argv(opts, ["a=1"])[-3:] == ["install", "--", "a=1"]


def test_the_hosts_apt_hooks_do_not_run_for_the_private_apt(tmp_path):
    """The host's hooks (here: AppStream's refresh and PackageKit's notice on Debian 12) act on its own state."""
    import shutil
    import subprocess

    if not shutil.which("apt-config"):
        pytest.skip("needs apt-config")
    paths = A.prepare(tmp_path / "s", ["deb [signed-by=/k.gpg] http://h/ /"])
    dump = subprocess.run(["apt-config", *A.options(paths, "x86_64", True)[:2], "dump"], capture_output=True,
                          text=True, check=True).stdout  # fmt: skip
    for hook in A.HOOKS:
        assert not [line for line in dump.splitlines() if line.startswith(hook + "::")], hook


K = "deb [signed-by={k}] https://repo.example/x/ /"


@pytest.mark.parametrize(
    "release, packages, sources, arch, expected",
    [
        ("ubuntu 24.04", ["nvidia-open"], [K], "x86_64", "expected an OS release"),
        ("ubuntu-24.04", [], [K], "x86_64", "expected at least one package"),
        ("ubuntu-24.04", ["-o=APT::x"], [K], "x86_64", "expected each package as NAME or NAME=VERSION"),
        ("ubuntu-24.04", ["nvidia-open"], [], "x86_64", "expected at least one apt source"),
        (
            "ubuntu-24.04",
            ["nvidia-open"],
            ["deb https://repo.example/x/ /"],
            "x86_64",
            "expected each apt source as one line",
        ),
        (
            "ubuntu-24.04",
            ["nvidia-open"],
            [K + "\ndeb [trusted=yes] http://evil/ /"],
            "x86_64",
            "expected each apt source as one line",
        ),
        (
            "ubuntu-24.04",
            ["nvidia-open"],
            ["deb [trusted=yes] https://repo.example/x/ /"],
            "x86_64",
            "expected each apt source to name its keyring",
        ),
        (
            "ubuntu-24.04",
            ["nvidia-open"],
            ["deb [signed-by=/none.gpg] https://r/ /"],
            "x86_64",
            "expected the keyring /none.gpg",
        ),
        ("ubuntu-24.04", ["nvidia-open"], [K], "ppc64el", "expected a CPU architecture"),
    ],
)
def test_a_bad_request_is_one_sentence(tmp_path, release, packages, sources, arch, expected):  # noqa: PLR0917
    key = tmp_path / "k.gpg"
    key.write_bytes(b"k")
    sources = [s.replace("{k}", str(key)) for s in sources]
    with pytest.raises(A.AptBundleError) as e:
        A.check_request(release, packages, sources, arch)
    assert str(e.value).startswith(expected) and "\n" not in str(e.value)


def test_a_good_request_passes(tmp_path):
    key = tmp_path / "k.gpg"
    key.write_bytes(b"k")
    A.check_request(
        "debian-12", ["nvidia-open=580.95.05-1", "cuda-toolkit-12-8"], [K.replace("{k}", str(key))], "aarch64"
    )
