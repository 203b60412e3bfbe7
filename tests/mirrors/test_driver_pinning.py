"""The stand-in driver packages carry Debian's real package graph, and the role's pin holds on it.

apt-get resolves in a sandbox (no node) against the stand-in repository, which serves two versions per branch
(575.57.08/575.64.05, 580.95.05/580.105.08) of every package Debian builds from the NVIDIA driver's source packages.
The role's own preference template (source-package pins) keeps every package at the pinned version; the
name-pattern pin the role used before fails exactly as on a real server (issue report: nvidia-driver-libs depends on
libgl1-nvidia-glvnd-glx (= 580.95.05-1) but 580.105.08-1 is to be installed).
"""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from test_mirror_apt import SUBDIR, _apt, packages

from ansible_collections.llmops.sglang.plugins.module_utils import apt_index, driver_packages, gpu_compat

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "nvidia_driver"
PINNED = "580.95.05-1"
NEWER = "580.105.08-1"
# The pin the role wrote before (roles/nvidia_driver/templates/nvidia-driver.pref.j2 until this change).
NAME_PATTERN_PIN = (
    "Package: nvidia-* libnvidia-* libcuda* libnvcuvid* libnvoptix* firmware-nvidia-* xserver-xorg-video-nvidia*\n"
    f"Pin: version {PINNED}\nPin-Priority: 1001\n"
)

pytestmark = pytest.mark.skipif(shutil.which("apt-get") is None, reason="needs apt-get")


def role_pin(version=PINNED, fabricmanager=None):
    variables = {
        "ansible_managed": "test",
        "llmops_driver_version": version,
        "nvidia_driver_pin_sources": yaml.safe_load((ROLE / "vars/main.yml").read_text())["nvidia_driver_pin_sources"],
        "nvidia_driver_fabricmanager_wanted": fabricmanager is not None,
        "nvidia_driver_fm_package": fabricmanager,
        "nvidia_driver_fm_version": version,
    }
    template = (ROLE / "templates/nvidia-driver.pref.j2").read_text()
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(template))


def role_packages(package_set, flavor="open"):
    request = {"os_key": "Debian-12", "branch": "580", "version": PINNED, "flavor": flavor,
               "package_set": package_set, "packages": {}, "persistenced": True}  # fmt: skip
    planned = driver_packages.plan(request)
    assert planned["problem"] == ""
    return planned["packages"]


def simulate(built, server, tmp_path, pin, names, *, version=PINNED):
    keyring = built["out"] / "keys" / "cuda-archive-keyring.gpg"
    root = tmp_path / "apt"
    (root / "etc/preferences.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/preferences.d/llmops-nvidia-driver.pref").write_text(pin)
    up = _apt(root, keyring, server["apt"], "update")
    assert up.returncode == 0, up.stdout + up.stderr
    return _apt(root, keyring, server["apt"], "-s", "install", *[f"{n}={version}" for n in names])


def installs(result):
    """{package: version} of the `Inst` lines of an `apt-get -s install`."""
    return dict(re.findall(r"^Inst (\S+) \((\S+) ", result.stdout, re.M))


def debian_sources(built):
    """{package: Source} of the stand-in's driver packages."""
    out = {}
    for stanza in (built["out"] / SUBDIR / "Packages").read_text().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line.startswith(" "))
        if fields.get("Source"):
            out[fields["Package"]] = fields["Source"]
    return out


def test_the_stand_in_serves_debians_driver_packages_in_two_versions_per_branch(built):
    pkgs = packages(built)
    sources = debian_sources(built)
    # Names that only exist because Debian's packaging has them (the failing chain among them).
    for name in [
        "nvidia-driver-libs",
        "libgl1-nvidia-glvnd-glx",
        "libegl-nvidia0",
        "libglx-nvidia0",
        "nvidia-egl-icd",
        "nvidia-vdpau-driver",
        "nvidia-alternative",
        "firmware-nvidia-gsp",
        "nvidia-open-kernel-dkms",
    ]:
        assert pkgs[name] == {"575.57.08-1", "575.64.05-1", PINNED, NEWER}, name
        assert "nvidia" in sources[name]
    assert sources["libgl1-nvidia-glvnd-glx"] == "nvidia-graphics-drivers"
    assert sources["nvidia-open-kernel-dkms"] == "nvidia-open-gpu-kernel-modules"
    text = (built["out"] / SUBDIR / "Packages").read_text()
    assert f"Depends: libgl1-nvidia-glvnd-glx (= {PINNED}), nvidia-egl-icd (= {PINNED})" in text
    assert "nvidia-fabricmanager-575" in pkgs and "nvidia-fabricmanager" in pkgs
    assert pkgs["nvidia-fabricmanager-575"] == {"575.57.08-1", "575.64.05-1"}
    assert pkgs["nvidia-fabricmanager"] == {PINNED, NEWER}


@pytest.mark.parametrize("package_set", ["compute", "desktop"])
def test_the_source_package_pin_holds_every_driver_package_at_the_pinned_version(built, server, tmp_path, package_set):
    result = simulate(built, server, tmp_path, role_pin(), role_packages(package_set))
    assert result.returncode == 0, result.stdout + result.stderr
    got = installs(result)
    driver = {p: v for p, v in got.items() if v.startswith("580.")}
    assert len(driver) >= (14 if package_set == "compute" else 35), got
    assert set(driver.values()) == {PINNED}, {p: v for p, v in driver.items() if v != PINNED}
    if package_set == "desktop":
        assert got["libgl1-nvidia-glvnd-glx"] == PINNED  # outside the old name patterns
    else:
        assert "libgl1-nvidia-glvnd-glx" not in got and "nvidia-driver" not in got  # compute only: no GL, no X


def test_the_name_pattern_pin_fails_on_the_desktop_set_as_on_a_real_server(built, server, tmp_path):
    result = simulate(built, server, tmp_path, NAME_PATTERN_PIN, role_packages("desktop"))
    assert result.returncode != 0
    assert f"nvidia-driver-libs : Depends: libgl1-nvidia-glvnd-glx (= {PINNED})" in result.stdout


def test_the_roles_source_regex_matches_the_drivers_source_packages_and_nothing_else():
    # roles/nvidia_driver/vars/main.yml: the holds and the version move select packages with it. Written first in a
    # {{ }} expression it came out as ^(\\*nvidia\\*|cuda\\-compat)$ and matched nothing (no package was held; the
    # driver upgrade node test found it).
    data = yaml.safe_load((ROLE / "vars/main.yml").read_text())
    rx = Templar(loader=DataLoader(), variables=data).template(trust_as_template(data["nvidia_driver_pin_sources_re"]))
    assert rx == "^(.*nvidia.*|cuda\\-compat)$", rx
    for source in ["nvidia-graphics-drivers", "nvidia-modprobe", "nvidia-open-gpu-kernel-modules", "cuda-compat"]:
        assert re.match(rx, source), source
    for source in ["mesa", "cuda-toolkit-12-8", "linux"]:
        assert not re.match(rx, source), source


def _status(built, installed: dict, selection: str) -> str:
    """A dpkg status file with ``installed`` ({package: version}) at ``selection`` (hold or install), from the stand-in
    repository's own stanzas of those packages."""
    out = []
    for stanza in (built["out"] / SUBDIR / "Packages").read_text().split("\n\n"):
        fields = dict(line.split(": ", 1) for line in stanza.splitlines() if ": " in line and not line.startswith(" "))
        if fields.get("Package") in installed and installed[fields["Package"]] == fields.get("Version"):
            keep = [ln for ln in stanza.splitlines() if not ln.startswith(("Filename:", "Size:", "SHA256:", "MD5sum:"))]
            out.append("\n".join([keep[0], f"Status: {selection} ok installed", *keep[1:]]))
    assert len(out) == len(installed), sorted(installed)
    return "\n\n".join(out) + "\n"


@pytest.mark.parametrize("package_set", ["compute", "desktop", "compute+fabricmanager"])
def test_a_version_change_moves_every_driver_package_once_the_holds_are_released_and_all_are_named(
    built, server, tmp_path, package_set
):
    # Seen on a node (tests/integration/test_driver_upgrade_on_nodes.py): with the driver held at 580.95.05-1 and the
    # pin moved to 580.105.08-1, installing the driver's packages at the new version fails - the held packages cannot
    # move. roles/nvidia_driver/tasks/install.yml releases those holds first and names every installed package of the
    # driver's sources (naming only the role's packages left nvidia-modprobe behind at the old version).
    # the fabric manager moves in step: pinned in the same file, at the driver's version on branch 580
    fm = "nvidia-fabricmanager" if package_set.endswith("+fabricmanager") else None
    names = role_packages(package_set.split("+")[0]) + ([fm] if fm else [])
    first = simulate(built, server, tmp_path, role_pin(fabricmanager=fm), names)
    assert first.returncode == 0, first.stdout + first.stderr
    installed = installs(first)
    assert not fm or installed[fm] == PINNED, installed
    root, keyring = tmp_path / "apt", built["out"] / "keys" / "cuda-archive-keyring.gpg"
    (root / "etc/preferences.d/llmops-nvidia-driver.pref").write_text(role_pin(NEWER, fabricmanager=fm))
    (root / "status").write_text(_status(built, installed, "hold"))
    # the role's packages alone, over the held driver: what the role did before
    held = _apt(root, keyring, server["apt"], "-s", "install", "--allow-change-held-packages",
                *[f"{n}={NEWER}" for n in names])  # fmt: skip
    assert held.returncode != 0 and "you have held broken packages" in held.stdout + held.stderr, held.stdout
    # as the role does now: the holds released, its packages and every installed package of the driver named
    (root / "status").write_text(_status(built, installed, "install"))
    moving = sorted({*names, *(p for p, v in installed.items() if v == PINNED)})
    moved = _apt(root, keyring, server["apt"], "-s", "install", "--allow-change-held-packages",
                 *[f"{n}={NEWER}" for n in moving])  # fmt: skip
    assert moved.returncode == 0, moved.stdout + moved.stderr
    # every package of the driver moves to the new version ("Inst NAME [OLD] (NEW ..." lines), nothing else does
    upgrades = {p: (old, new) for p, old, new in re.findall(r"^Inst (\S+) \[(\S+)\] \((\S+) ", moved.stdout, re.M)}
    assert upgrades == {p: (PINNED, NEWER) for p, v in installed.items() if v == PINNED}, moved.stdout


FABRICMANAGER = gpu_compat.FABRICMANAGER


@pytest.mark.parametrize("version", ["575.57.08-1", PINNED])
def test_the_fabric_manager_of_each_branch_installs_at_the_drivers_version(built, server, tmp_path, version):
    data = FABRICMANAGER["Debian-12"]
    fm = data["packages"][version.split(".")[0]]
    assert fm == ("nvidia-fabricmanager-575" if version.startswith("575") else "nvidia-fabricmanager")
    pin = role_pin(version, fabricmanager=fm)
    result = simulate(built, server, tmp_path, pin, [*role_packages("compute"), fm], version=version)
    assert result.returncode == 0, result.stdout + result.stderr
    assert installs(result)[fm] == version.rsplit("-", 1)[0] + data["revision"]


def test_the_pci_id_database_is_served_from_debians_package(built):
    served = built["out"] / "www" / "misc" / "pci.ids"
    local = subprocess.run(
        [sys.executable, str(ROOT / "sim/gpu/pci_ids.py")], capture_output=True, text=True, check=True
    )
    assert served.read_bytes() == Path(local.stdout.strip()).read_bytes()
    assert "\t2bb1  GB202GL [RTX PRO 6000 Blackwell Workstation Edition]" in served.read_text(errors="replace")


# ---- the index check the roles run before their first change (plugins/module_utils/apt_index.py) agrees with apt --


@pytest.mark.parametrize("package_set", ["compute", "desktop"])
def test_the_index_check_accepts_what_apt_installs_and_refuses_what_it_cannot(built, server, tmp_path, package_set):
    index = apt_index.parse((built["out"] / SUBDIR / "Packages").read_text())
    names = role_packages(package_set)
    served = simulate(built, server, tmp_path / "served", role_pin(), names)
    assert served.returncode == 0, served.stdout + served.stderr
    checked = apt_index.check(index, [f"{n}={PINNED}" for n in names])
    assert checked["missing"] == []
    # every package apt would install from the driver's sources is one the check reached or one the role names
    reached = {f.split("=")[0] for f in checked["found"]}
    assert reached <= set(installs(served)), reached - set(installs(served))
    absent = "580.95.06-1"
    refused = simulate(built, server, tmp_path / "absent", role_pin(absent), names, version=absent)
    assert refused.returncode != 0
    assert f"Version '{absent}' for '{names[0]}' was not found" in refused.stderr
    missing = apt_index.check(index, [f"{n}={absent}" for n in names])["missing"]
    assert missing == [f"{n} {absent} (it has 575.57.08-1, 575.64.05-1, {PINNED}, {NEWER})" for n in names]


@pytest.mark.parametrize("release,os_key", [("ubuntu2404", "Ubuntu-24"), ("ubuntu2204", "Ubuntu-22")])
@pytest.mark.parametrize("package_set,flavor", [("compute", "open"), ("compute", "proprietary"), ("desktop", "open")])
def test_the_ubuntu_stand_ins_carry_what_the_role_installs_there(built, release, os_key, package_set, flavor):
    repo = Path(built["out"] / SUBDIR.replace("debian12", release))
    index = apt_index.parse((repo / "Packages").read_text())
    for version in ("575.64.05-0ubuntu1", "580.95.05-0ubuntu1", "580.105.08-0ubuntu1"):
        request = {"os_key": os_key, "branch": version.split(".")[0], "version": version, "flavor": flavor,
                   "package_set": package_set, "packages": {}, "persistenced": True}  # fmt: skip
        planned = driver_packages.plan(request)
        assert planned["problem"] == ""
        checked = apt_index.check(index, [f"{n}={version}" for n in planned["packages"]])
        assert checked["missing"] == [], (release, version)
        # every package reached is Ubuntu's, of the branch's source package, at the same version
        sources = {index[f.split("=")[0]][0]["Source"] for f in checked["found"]}
        assert sources == {f"nvidia-graphics-drivers-{version.split('.')[0]}"}
    fm = gpu_compat.FABRICMANAGER[os_key]["packages"]["580"]
    assert apt_index.check(index, [f"{fm}=580.95.05" + gpu_compat.FABRICMANAGER[os_key]["revision"]])["missing"] == []
