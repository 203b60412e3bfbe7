# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The NVIDIA driver's package names and version format per operating system and driver branch, and the check of a
driver request against them before anything on the host changes (roles/nvidia_driver, tasks/validate.yml).

Debian 12: NVIDIA's Debian repository names the driver's packages without the branch (``nvidia-driver-cuda``,
``nvidia-kernel-open-dkms``) and versions them ``580.95.05-1``.

Ubuntu 22.04 and 24.04: up to branch 580 every package carries the branch in its name (Ubuntu's source package
``nvidia-graphics-drivers-580`` builds ``nvidia-headless-580-open``, ``nvidia-dkms-580-open``, ``nvidia-utils-580``,
``nvidia-compute-utils-580``, ``libnvidia-compute-580``, ...), and NVIDIA's Ubuntu repositories use the same names;
versions end in ``-0ubuntu`` plus a number (NVIDIA's ``580.95.05-0ubuntu1``, Ubuntu's own
``580.95.05-0ubuntu0.24.04.3``). From branch 590 NVIDIA renames them without the branch; that rename table was
read only in part (docs/gpu-stack.md), so 590 and newer are not known here: the role refuses them on Ubuntu unless
the inventory names the packages (``nvidia_driver_packages``).

Every name below was read on packages.ubuntu.com or in NVIDIA's documentation; the pages, and the few names that
follow the scheme without having been seen on a page, are in tests/unit/fixtures/ubuntu_nvidia_packages.yml (which
tests/unit/test_driver_packages.py compares with this table).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

PACKAGE_SETS = ("compute", "desktop")
FLAVORS = ("open", "proprietary")


def _ubuntu(branch):
    """Ubuntu's names for one branch: compute = the headless metapackage (kernel module through DKMS, libraries,
    nvidia-persistenced) + nvidia-utils (nvidia-smi, which the headless set does not carry); desktop = the driver
    metapackage (X, GL, Vulkan as well)."""
    b = str(branch)
    return {
        "compute": {
            "open": ["nvidia-headless-%s-open" % b, "nvidia-utils-%s" % b],
            "proprietary": ["nvidia-headless-%s" % b, "nvidia-utils-%s" % b],
        },
        "desktop": {
            "open": ["nvidia-driver-%s-open" % b],
            "proprietary": ["nvidia-driver-%s" % b],
        },
    }


_DEBIAN = {
    "compute": {
        "open": ["nvidia-driver-cuda", "nvidia-kernel-open-dkms"],
        "proprietary": ["nvidia-driver-cuda", "nvidia-kernel-dkms"],
    },
    "desktop": {"open": ["nvidia-open"], "proprietary": ["nvidia-driver", "nvidia-kernel-dkms"]},
}

_UBUNTU_BRANCHES = ("570", "575", "580")

# Per distribution and major version (ansible_facts distribution + '-' + distribution_major_version):
#   style: the package revision's form; example: a version of that form for the messages;
#   branches: {branch: package sets} (None: the names do not depend on the branch);
#   persistenced: the package that carries nvidia-persistenced ({branch} is replaced).
OS = {
    "Debian-12": {
        "name": "Debian 12",
        "style": "debian",
        "example": "580.95.05-1",
        "branches": None,
        "sets": _DEBIAN,
        "persistenced": "nvidia-persistenced",
    },
    "Ubuntu-22": {
        "name": "Ubuntu 22.04",
        "style": "ubuntu",
        "example": "580.95.05-0ubuntu1",
        "branches": dict((b, _ubuntu(b)) for b in _UBUNTU_BRANCHES),
        "persistenced": "nvidia-compute-utils-{branch}",
    },
    "Ubuntu-24": {
        "name": "Ubuntu 24.04",
        "style": "ubuntu",
        "example": "580.95.05-0ubuntu1",
        "branches": dict((b, _ubuntu(b)) for b in _UBUNTU_BRANCHES),
        "persistenced": "nvidia-compute-utils-{branch}",
    },
}

_FULL_VERSION = re.compile(r"^[0-9]+[.][0-9]+([.][0-9]+)?-[0-9A-Za-z.+~]+$")
_UBUNTU_REVISION = re.compile(r"-0ubuntu[0-9][0-9A-Za-z.+~]*$")
_BRANCH = re.compile(r"^[0-9]{3,}$")
_NOTHING = "; nothing was changed."


def version_style(version):
    """'ubuntu' for a revision of Ubuntu's form (-0ubuntu1, -0ubuntu0.24.04.3), else 'debian'."""
    return "ubuntu" if _UBUNTU_REVISION.search(str(version)) else "debian"


def package_sets(os_key, branch):
    """{compute: {open, proprietary}, desktop: {...}} for the OS and branch, or None when not known."""
    entry = OS.get(str(os_key))
    if entry is None:
        return None
    if entry["branches"] is None:
        return entry["sets"]
    return entry["branches"].get(str(branch))


def _valid_override(packages):
    if not isinstance(packages, dict):
        return False
    for pset, flavors in packages.items():
        if pset not in PACKAGE_SETS or not isinstance(flavors, dict):
            return False
        for flavor, names in flavors.items():
            if flavor not in FLAVORS or isinstance(names, (str, bytes)) or not isinstance(names, (list, tuple)):
                return False
            if not names or not all(isinstance(n, str) and n.strip() for n in names):
                return False
    return True


def plan(request):
    """Check a driver request and name what the role installs.

    ``request``: os_key (``Ubuntu-24``), os_name (``Ubuntu 24.04``, for messages), branch, version, flavor,
    package_set, packages (the inventory's nvidia_driver_packages; {} = this table), persistenced_package ('' =
    this table), persistenced (bool).

    Returns {problem: '' or one line (expected, found, what to do), packages: [...], persistenced_package,
    known_branches}."""
    os_key = str(request.get("os_key", ""))
    os_name = str(request.get("os_name", "") or os_key)
    branch = str(request.get("branch", "")).strip()
    version = str(request.get("version", "")).strip()
    flavor = str(request.get("flavor", ""))
    pset = str(request.get("package_set", ""))
    override = request.get("packages") or {}
    entry = OS.get(os_key)
    known = sorted(entry["branches"]) if entry and entry["branches"] is not None else []
    out = {"problem": "", "packages": [], "persistenced_package": "", "known_branches": known}
    example = entry["example"] if entry else "580.95.05-1"

    def refuse(text):
        out["problem"] = text + _NOTHING
        return out

    if not _BRANCH.match(branch):
        return refuse("llmops_driver_branch must be a driver branch number such as '580'; found '%s'" % branch)
    if not version.startswith(branch + "."):
        return refuse(
            "llmops_driver_version %s is not on llmops_driver_branch %s; set both to one branch, e.g. '580' and '%s'"
            % (version, branch, example)
        )
    if not _FULL_VERSION.match(version):
        return refuse(
            "llmops_driver_version must be a full package version such as '580.95.05-1' (Ubuntu "
            "'580.95.05-0ubuntu1'); found '%s'" % version
        )
    if flavor not in FLAVORS:
        return refuse("llmops_driver_flavor must be open or proprietary; found '%s'" % flavor)
    if pset not in PACKAGE_SETS:
        return refuse("nvidia_driver_package_set must be compute or desktop; found '%s'" % pset)
    if entry is not None and version_style(version) != entry["style"]:
        found = "an Ubuntu" if version_style(version) == "ubuntu" else "a Debian"
        return refuse(
            "llmops_driver_version %s is %s package version, but %s's NVIDIA packages are versioned like '%s'; set "
            "llmops_driver_version to the %s version of the driver" % (version, found, os_name, example, os_name)
        )
    if override:
        if not _valid_override(override):
            return refuse(
                "nvidia_driver_packages must map compute/desktop to open/proprietary lists of package names, e.g. "
                "{compute: {open: [nvidia-headless-580-open, nvidia-utils-580]}}; found %r" % (override,)
            )
        names = (override.get(pset) or {}).get(flavor)
        if not names:
            return refuse(
                "nvidia_driver_packages names no packages for package set %s and flavour %s; add %s.%s, or leave "
                "nvidia_driver_packages unset for the collection's names" % (pset, flavor, pset, flavor)
            )
        out["packages"] = list(names)
    else:
        if entry is None:
            return refuse(
                "%s has no NVIDIA package names in this collection (known: Debian 12, Ubuntu 22.04, Ubuntu 24.04); "
                "set nvidia_driver_packages to the driver's packages for this system" % os_name
            )
        sets = package_sets(os_key, branch)
        if sets is None:
            return refuse(
                "Driver branch %s has no known package names on %s (known branches: %s; from 590 NVIDIA renames "
                "the Ubuntu packages); set llmops_driver_branch to a known branch, or set nvidia_driver_packages"
                % (branch, os_name, ", ".join(known))
            )
        out["packages"] = list(sets[pset][flavor])
    persistenced = str(request.get("persistenced_package", "") or "")
    if not persistenced and entry is not None:
        persistenced = entry["persistenced"].replace("{branch}", branch)
    if not persistenced:
        persistenced = "nvidia-persistenced"
    out["persistenced_package"] = persistenced
    if request.get("persistenced") and persistenced not in out["packages"]:
        out["packages"].append(persistenced)
    return out
