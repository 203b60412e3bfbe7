"""A flat repository's package index read without apt (plugins/module_utils/apt_index.py), on Debian 12's real
NVIDIA driver metadata (tests/unit/fixtures/debian12_nvidia_packages.yml); version order against dpkg itself; the
proxy apt would use, from apt-config's own output."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from ansible_collections.llmops.sglang.plugins.module_utils import apt_index

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = yaml.safe_load((ROOT / "tests/unit/fixtures/debian12_nvidia_packages.yml").read_text())
V = "535.261.03-1"


@pytest.fixture()
def index():
    return apt_index.parse(FIXTURE["packages"])


def test_the_index_is_read_stanza_by_stanza(index):
    assert len(index) == 17
    driver = index["nvidia-driver"][0]
    assert driver["Version"] == V and driver["Source"] == "nvidia-graphics-drivers"
    assert ("nvidia-driver-libs", "=", V) in [g[0] for g in apt_index.relations(driver["Depends"])]


def test_relations_keep_alternatives_and_drop_qualifiers():
    groups = apt_index.relations(
        "nvidia-kernel-dkms (= 1.0-1) | nvidia-kernel-1.0, libc6:any (>= 2.34) [amd64], foo <!nocheck>"
    )
    assert groups == [
        [("nvidia-kernel-dkms", "=", "1.0-1"), ("nvidia-kernel-1.0", "", "")],
        [("libc6", ">=", "2.34")],
        [("foo", "", "")],
    ]


def test_packages_at_their_version_are_found_with_their_exact_dependencies(index):
    result = apt_index.check(index, ["nvidia-driver=" + V, "nvidia-smi=" + V])
    assert result["missing"] == []
    found = {f.split("=")[0] for f in result["found"]}
    # reached only through `Depends: ... (= 535.261.03-1)`: nvidia-smi -> libnvidia-ml1, nvidia-driver -> libs -> GL
    assert {"libnvidia-ml1", "nvidia-driver-libs", "libgl1-nvidia-glvnd-glx", "nvidia-alternative"} <= found
    assert all(f.endswith("=" + V) for f in result["found"])


def test_a_version_the_repository_lacks_is_named_with_the_versions_it_has(index):
    result = apt_index.check(index, ["nvidia-driver=535.247.01-1~deb12u1"])
    assert result["missing"] == ["nvidia-driver 535.247.01-1~deb12u1 (it has 535.261.03-1)"]


def test_a_package_the_repository_lacks_is_named(index):
    assert apt_index.check(index, ["nvidia-headless-590-open"])["missing"] == [
        "nvidia-headless-590-open (no such package)"
    ]
    assert apt_index.check(index, ["nvidia-smi"])["missing"] == []


def test_an_exact_dependency_at_another_version_is_refused(index):
    # the repository carries libnvidia-ml1 only at an older version: nvidia-smi 535.261.03-1 cannot be installed
    head = "Package: libnvidia-ml1\nSource: nvidia-graphics-drivers\nVersion: "
    text = FIXTURE["packages"].replace(head + V, head + "535.247.01-1")
    assert text != FIXTURE["packages"]
    result = apt_index.check(apt_index.parse(text), ["nvidia-smi=" + V])
    assert result["missing"] == [
        "libnvidia-ml1 535.261.03-1 (it has 535.247.01-1), which nvidia-smi 535.261.03-1 depends on,"
    ]


def test_a_ranged_dependency_no_version_satisfies_is_refused(index):
    text = FIXTURE["packages"].replace("nvidia-legacy-check (>= 495)", "nvidia-legacy-check (>= 999)")
    assert text != FIXTURE["packages"]
    missing = apt_index.check(apt_index.parse(text), ["nvidia-driver=" + V])["missing"]
    # nvidia-driver and three of the packages it needs pre-depend on it
    assert (
        missing[0] == "nvidia-legacy-check (>= 999), which nvidia-driver 535.261.03-1 depends on (it has 535.261.03-1)"
    )
    assert len(missing) == 4 and all(m.startswith("nvidia-legacy-check (>= 999), which ") for m in missing)


def test_many_versions_are_shown_newest_last_and_counted(index):
    text = "\n\n".join(f"Package: cuda-toolkit-12-8\nVersion: 12.8.{n}-1" for n in (10, 2, 1, 0, 9, 3, 4, 5))
    missing = apt_index.check(apt_index.parse(text), ["cuda-toolkit-12-8=12.8.7-1"])["missing"]
    assert missing == ["cuda-toolkit-12-8 12.8.7-1 (it has 12.8.2-1, 12.8.3-1, 12.8.4-1, 12.8.5-1, 12.8.9-1, "
                       "12.8.10-1 and 2 older)"]  # fmt: skip


PAIRS = [
    ("580.95.05-1", "580.105.08-1"),
    ("580.95.05-0ubuntu1", "580.95.05-1"),
    ("580.95.05-0ubuntu0.24.04.3", "580.95.05-0ubuntu1"),
    ("1.0~rc1-1", "1.0-1"),
    ("1:0.9-1", "2.0-1"),
    ("535.247.01-1~deb12u1", "535.247.01-1"),
    ("1.0a-1", "1.0-1"),
    ("1.0+b1", "1.0"),
    ("12.8.93-1", "12.8.93-1"),
]


@pytest.mark.skipif(shutil.which("dpkg") is None, reason="needs dpkg")
@pytest.mark.parametrize("a,b", PAIRS)
def test_version_order_is_dpkgs(a, b):
    for x, y in ((a, b), (b, a)):
        ours = apt_index.compare_versions(x, y)
        for op, want in (("lt", ours < 0), ("eq", ours == 0), ("gt", ours > 0)):
            real = subprocess.run(["dpkg", "--compare-versions", x, op, y], check=False).returncode == 0
            assert real == want, (x, op, y)


@pytest.mark.skipif(shutil.which("apt-config") is None, reason="needs apt-config")
def test_the_proxy_is_the_one_apt_would_use():
    dump = subprocess.run(
        ["apt-config", "-o", "Acquire::http::Proxy=http://proxy.example.internal:3128/",
         "-o", "Acquire::http::Proxy::mirror.example.internal=DIRECT",
         "-o", "Acquire::https::Proxy=http://tls-proxy.example.internal:3128/", "dump"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert apt_index.apt_proxy(dump, "http://repo.example.internal/x/") == "http://proxy.example.internal:3128/"
    assert apt_index.apt_proxy(dump, "http://mirror.example.internal/x/") == "DIRECT"
    assert apt_index.apt_proxy(dump, "https://repo.example.internal/x/") == "http://tls-proxy.example.internal:3128/"
    assert apt_index.apt_proxy(dump, "file:///srv/repo/") == ""
    assert apt_index.apt_proxy("", "http://repo.example.internal/x/") == ""
