"""The stand-in NVIDIA driver packages, derived from Debian's own packaging of the NVIDIA driver.

At mirror-build time the non-free, contrib and non-free-firmware ``Packages`` indexes of Debian 12 are read from
the Debian mirror this host's apt sources name (debian_meta). Every binary package built from the NVIDIA driver's
source packages keeps its real name, ``Source:``, Depends / Pre-Depends / Recommends / Provides / Conflicts /
Breaks / Replaces, exact-version constraints and architecture; only the versions are relabelled to the branches
served (Debian packages 535.261.03, NVIDIA's repository carries 575/580), and relations to packages outside this
set (libc6, libgl1, xserver-xorg-core, dkms, ...) are dropped so the stand-in installs without the X stack.

Packages NVIDIA's repository has and Debian has not (nvidia-open, nvidia-kernel-open-dkms, nvidia-driver-cuda, the
fabric manager, cuda-drivers) are defined from NVIDIA's driver installation guide: docs/gpu-stack.md says which
facts come from where. Bodies stay trivial, except the few files the simulated node reads (sim_payloads).
"""

from __future__ import annotations

import re

import debian_meta

SUITE = "bookworm"
COMPONENTS = ("non-free", "contrib", "non-free-firmware")
# Source packages whose binaries NVIDIA's repository ships at the driver's own version.
DRIVER_SOURCES = (
    "nvidia-graphics-drivers",
    "nvidia-open-gpu-kernel-modules",
    "nvidia-persistenced",
    "nvidia-settings",
    "nvidia-modprobe",
)
# Helper sources the driver packages depend on, served at Debian's own versions.
SUPPORT_SOURCES = ("nvidia-support", "glx-alternatives")
RELATION_FIELDS = ("Pre-Depends", "Depends", "Recommends", "Suggests", "Conflicts", "Breaks", "Replaces")
CONTROL_FIELDS = ("Source", "Provides", *RELATION_FIELDS, "Section", "Multi-Arch", "Description")
SIM_NOTE = "Stand-in package for simulated test nodes: no kernel module, no library, no GPU code."


def source_of(stanza):
    return stanza.get("Source", stanza["Package"]).split()[0]


def debian_stanzas(mirror=None):
    """The Debian 12 stanzas of the driver's and the helper sources (amd64 and all), one per package."""
    wanted = set(DRIVER_SOURCES) | set(SUPPORT_SOURCES)
    picked = {}
    for component in COMPONENTS:
        for stanza in debian_meta.packages_index(SUITE, component, "amd64", mirror):
            if source_of(stanza) in wanted and stanza["Package"] not in picked:
                picked[stanza["Package"]] = stanza
    if not any(source_of(s) == "nvidia-graphics-drivers" for s in picked.values()):
        raise SystemExit(f"Debian {SUITE} lists no nvidia-graphics-drivers packages: cannot derive the stand-in")
    return picked


def _relabeller(stanzas, version):
    """A function that rewrites Debian's version strings of the driver sources to ``version`` (upstream)."""
    branch = version.split(".")[0]
    pairs = {}
    for s in stanzas.values():
        if source_of(s) in DRIVER_SOURCES:
            debver = s["Version"]
            upstream = debver.rsplit("-", 1)[0]
            pairs[debver] = f"{version}-1"
            pairs[upstream] = version
    old_branches = {v.split(".")[0] for v in pairs if re.match(r"^\d+\.", v)}
    keys = sorted(pairs, key=len, reverse=True)
    rx = re.compile("|".join(re.escape(k) for k in keys))
    branch_rx = re.compile(r"\((>=|>>|<=|<<|=) (" + "|".join(sorted(old_branches)) + r")\)")

    def relabel(text):
        text = rx.sub(lambda m: pairs[m.group(0)], text)
        return branch_rx.sub(lambda m: f"({m.group(1)} {branch})", text)

    return relabel


def _filter_relations(value, known):
    """Keep only the alternatives naming a package (or virtual package) of the stand-in; drop empty groups."""
    groups = []
    for group in value.split(","):
        alts = []
        for alt in group.split("|"):
            name = alt.strip().split(" ", 1)[0].split("(", 1)[0]
            if name and ":" not in name and name in known:
                alts.append(alt.strip())
        if alts:
            groups.append(" | ".join(alts))
    return ", ".join(groups)


def _provided(stanza):
    return {p.strip().split(" ", 1)[0] for p in stanza.get("Provides", "").split(",") if p.strip()}


def nvidia_only(version, stanzas):
    """Packages NVIDIA's repository adds to Debian's set, for one driver version (see the module docstring)."""
    ver = f"{version}-1"
    branch = int(version.split(".")[0])
    open_dkms = dict(stanzas["nvidia-open-kernel-dkms"], Package="nvidia-kernel-open-dkms")
    fm_name = "nvidia-fabricmanager" if branch >= 580 else f"nvidia-fabricmanager-{branch}"
    return [
        # NVIDIA's name for the open kernel modules (Debian calls the same package nvidia-open-kernel-dkms).
        open_dkms,
        {
            "Package": "nvidia-open",
            "Source": "nvidia-graphics-drivers",
            "Version": ver,
            "Architecture": "amd64",
            "Depends": f"nvidia-kernel-open-dkms (= {ver}), nvidia-driver (= {ver})",
            "Section": "non-free/metapackages",
            "Description": "NVIDIA driver with the open GPU kernel modules (desktop metapackage)",
        },
        {
            "Package": "nvidia-driver-cuda",
            "Source": "nvidia-graphics-drivers",
            "Version": ver,
            "Architecture": "amd64",
            "Depends": f"libcuda1 (= {ver}), libnvidia-ml1 (= {ver}), nvidia-smi (= {ver}), "
            f"libnvidia-nvvm4 (= {ver}), libnvidia-ptxjitcompiler1 (= {ver}), nvidia-alternative (= {ver})",
            "Recommends": f"nvidia-persistenced (= {ver}), nvidia-cuda-mps (= {ver})",
            "Section": "non-free/libs",
            "Description": "NVIDIA driver compute-only user space (no X, GL or VDPAU)",
        },
        {
            "Package": fm_name,
            "Source": "nvidia-fabricmanager",
            "Version": ver,
            "Architecture": "amd64",
            "Section": "non-free/utils",
            "Description": "NVIDIA Fabric Manager for NVSwitch systems\n Its version must equal the driver's exactly.",
        },
        {
            "Package": "cuda-drivers",
            "Source": "cuda-drivers",
            "Version": ver,
            "Architecture": "amd64",
            "Depends": f"nvidia-driver (= {ver}), nvidia-kernel-dkms (= {ver}) | nvidia-kernel-open-dkms (= {ver})",
            "Section": "non-free/metapackages",
            "Description": "CUDA driver metapackage: pulls the driver; roles must not install it.",
        },
        {
            "Package": f"cuda-drivers-{branch}",
            "Source": "cuda-drivers",
            "Version": ver,
            "Architecture": "amd64",
            "Depends": f"cuda-drivers (= {ver})",
            "Section": "non-free/metapackages",
            "Description": f"CUDA driver metapackage for the R{branch} branch",
        },
    ]


def driver_packages(version, stanzas):
    """Control stanzas (dicts) for every package of one driver version, relabelled and filtered."""
    relabel = _relabeller(stanzas, version)
    pkgs = []
    for s in stanzas.values():
        src = source_of(s)
        if src not in DRIVER_SOURCES:
            continue
        out = {"Package": s["Package"], "Version": relabel(s["Version"]), "Architecture": s["Architecture"]}
        for f in CONTROL_FIELDS:
            if s.get(f):
                out[f] = relabel(s[f]) if f != "Description" else s[f]
        pkgs.append(out)
    extra = [dict(p) for p in nvidia_only(version, stanzas)]
    for p in extra:
        for f in CONTROL_FIELDS:
            if p.get(f) and f != "Description":
                p[f] = relabel(p[f])
        p["Version"] = relabel(p["Version"])
    return pkgs + extra


def support_packages(stanzas):
    out = []
    for s in stanzas.values():
        if source_of(s) in SUPPORT_SOURCES:
            p = {"Package": s["Package"], "Version": s["Version"], "Architecture": s["Architecture"]}
            p.update({f: s[f] for f in CONTROL_FIELDS if s.get(f)})
            out.append(p)
    return out


def graph(versions, mirror=None):
    """All stand-in driver stanzas for ``versions``, relations limited to the stand-in's own names."""
    stanzas = debian_stanzas(mirror)
    pkgs = support_packages(stanzas)
    for v in versions:
        pkgs += driver_packages(v, stanzas)
    known = {p["Package"] for p in pkgs} | set().union(*(_provided(p) for p in pkgs))
    for p in pkgs:
        for f in RELATION_FIELDS:
            if f in p:
                kept = _filter_relations(p[f], known)
                if kept:
                    p[f] = kept
                else:
                    del p[f]
        if "Description" in p:
            # The first line of Debian's description, and a note that the body is a stand-in.
            p["Description"] = p["Description"].splitlines()[0] + "\n " + SIM_NOTE
    return pkgs
