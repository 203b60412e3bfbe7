"""The stand-in NVIDIA driver packages of NVIDIA's Ubuntu repositories (ubuntu2204, ubuntu2404), for simulated nodes
with an Ubuntu identity (sim/os/README.md).

Names, sources and the relations that were read come from packages.ubuntu.com, as recorded (page by page) in
tests/unit/fixtures/ubuntu_nvidia_packages.yml, which this module reads: every driver package of branch B is built
from the source package ``nvidia-graphics-drivers-B`` and carries the branch in its name; ``nvidia-headless-B``
depends on ``nvidia-dkms-B`` and ``nvidia-headless-no-dkms-B``; ``nvidia-dkms-B(-open)`` on
``nvidia-kernel-common-B`` and ``nvidia-kernel-source-B(-open)`` (and ``nvidia-firmware-B-<version>`` for the
proprietary modules); ``nvidia-utils-B`` on ``libnvidia-compute-B`` and ``nvidia-kernel-common-B-<version>``.
Versions have Ubuntu's form, ``<upstream>-0ubuntu1`` (NVIDIA's Ubuntu repositories), every relation inside the
driver at exactly that version.

Not read on any page, and so a stand-in's assumption (docs/gpu-stack.md, "Support matrix"): what
``nvidia-headless-no-dkms-B(-open)`` and the desktop ``nvidia-driver-B(-open)`` depend on (here: the compute
libraries, nvidia-compute-utils-B and the kernel common files; the desktop set adds nvidia-utils-B and
libnvidia-gl-B), that the relations are exact-version ones, and NVIDIA's own Ubuntu index (its fabric manager is
served as on Debian: ``nvidia-fabricmanager`` from 580, ``nvidia-fabricmanager-575`` before, at ``<upstream>-1``).
Relations to the distribution's packages (dkms, libc6) are left out, as on the Debian stand-in.
"""

from __future__ import annotations

from pathlib import Path

import yaml

FIXTURE = Path(__file__).resolve().parents[2] / "tests" / "unit" / "fixtures" / "ubuntu_nvidia_packages.yml"
# NVIDIA's repository name per Ubuntu release, and the release's key in the fixture's per-release table.
RELEASES = {"ubuntu2204": "Ubuntu-22", "ubuntu2404": "Ubuntu-24"}


def _page(name):
    return yaml.safe_load(FIXTURE.read_text())["pages"][name]


def read_relations():
    """The relations read on packages.ubuntu.com, for branch 580 (the stand-in applies them to every branch)."""
    headless = _page("questing_headless_580")["depends"]
    dkms_open = _page("dkms_580_open")["depends"]
    dkms = _page("dkms_580")["depends"]
    utils = _page("utils_580")["depends"]
    return {"headless": headless, "dkms_open": dkms_open, "dkms": dkms, "utils": utils}


def _branchless(names):
    """The branch-580 names of a page as templates: nvidia-dkms-580 -> nvidia-dkms-{b}; versions -> {u}."""
    out = []
    for n in names:
        if n in ("dkms", "libc6"):
            continue  # the distribution's packages: left out, as on the Debian stand-in
        head, sep, _ = n.partition("-580-5")
        if sep:  # nvidia-firmware-580-580.159.03 / nvidia-kernel-common-580-580.159.03: the version in the name
            out.append(head + "-{b}-{u}")
        else:
            out.append(n.replace("-580", "-{b}"))
    return out


def driver_packages(upstream: str):
    """The stand-in packages of one driver version (``580.95.05``) on Ubuntu."""
    b = upstream.split(".", 1)[0]
    ver = f"{upstream}-0ubuntu1"
    src = f"nvidia-graphics-drivers-{b}"
    rel = {k: _branchless(v) for k, v in read_relations().items()}

    def eq(templates):
        return ", ".join(f"{t.format(b=b, u=upstream)} (= {ver})" for t in templates)

    def pkg(name, depends="", description="", **extra):
        p = {"Package": name, "Source": src, "Version": ver, "Architecture": "amd64", "Section": "restricted/libs",
             "Description": description or f"NVIDIA driver {b} ({name}; stand-in)"}  # fmt: skip
        if depends:
            p["Depends"] = depends
        p.update(extra)
        return p

    compute = [f"libnvidia-compute-{b}", f"nvidia-compute-utils-{b}", f"nvidia-kernel-common-{b}"]
    pkgs = [
        pkg(f"nvidia-kernel-common-{b}", Provides=f"nvidia-kernel-common-{b}-{upstream} (= {ver})"),
        pkg(f"nvidia-firmware-{b}-{upstream}"),
        pkg(f"nvidia-kernel-source-{b}-open"),
        pkg(f"nvidia-kernel-source-{b}"),
        pkg(f"nvidia-dkms-{b}-open", eq(rel["dkms_open"])),
        pkg(f"nvidia-dkms-{b}", eq(rel["dkms"])),
        pkg(f"libnvidia-compute-{b}"),
        pkg(f"libnvidia-gl-{b}"),
        pkg(f"nvidia-compute-utils-{b}", eq([f"libnvidia-compute-{b}"])),
        pkg(f"nvidia-utils-{b}", eq(rel["utils"])),
        pkg(f"nvidia-headless-no-dkms-{b}", eq(compute)),
        pkg(f"nvidia-headless-no-dkms-{b}-open", eq(compute)),
        pkg(f"nvidia-headless-{b}", eq(rel["headless"])),
        pkg(f"nvidia-headless-{b}-open", eq([t.replace("-{b}", "-{b}-open") for t in rel["headless"]])),
        pkg(f"nvidia-driver-{b}", eq([f"nvidia-dkms-{b}", f"nvidia-utils-{b}", f"libnvidia-gl-{b}", *compute])),
        pkg(
            f"nvidia-driver-{b}-open", eq([f"nvidia-dkms-{b}-open", f"nvidia-utils-{b}", f"libnvidia-gl-{b}", *compute])
        ),
    ]
    fm = "nvidia-fabricmanager" if int(b) >= 580 else f"nvidia-fabricmanager-{b}"
    pkgs.append({"Package": fm, "Source": "nvidia-fabricmanager", "Version": f"{upstream}-1", "Architecture": "amd64",
                 "Section": "multiverse/utils",
                 "Description": "NVIDIA Fabric Manager for NVSwitch systems (stand-in)"})  # fmt: skip
    return pkgs


def payload_role(name: str):
    """What a package of this graph carries on a simulated node (apt_repo.sim_payloads): 'nvml' (the driver's
    version, which the simulated nvidia-smi reports), 'open'/'proprietary' (the kernel module's flavour),
    'persistenced', 'fabricmanager', or None."""
    if name.startswith("libnvidia-compute-"):
        return "nvml"
    if name.startswith("nvidia-kernel-source-"):
        return "open" if name.endswith("-open") else "proprietary"
    if name.startswith("nvidia-compute-utils-"):
        return "persistenced"
    if name.startswith("nvidia-fabricmanager"):
        return "fabricmanager"
    return None
