# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""An offline bundle's Python wheels: the wheelhouse's finished builds (SGLang, sgl-kernel, flash-attn, each with its
build record) and every wheel the virtualenv installs besides them - torch from the PyTorch index at its pin, then the
dependency closure of the built wheels resolved by pip's own resolver for each Python and C library the fleet's OS
releases run (``pip download`` with explicit target tags, so the control node's own Python does not matter).

This file owns the wheelhouse record check, pip's command lines, the platform tags of a release and the manifest
source of each wheel file. Pure functions besides ``read_record``; no Ansible imports.
"""

from __future__ import annotations

import json
import os
import re

from ansible_collections.llmops.sglang.plugins.module_utils.bundle_manifest import sha256_file

#: A finished build in the wheelhouse: NAME/FINGERPRINT/build.json (written last) beside its wheel.
RECORD = "build.json"
PYTHON = re.compile(r"\A3\.[0-9]{1,2}\Z")
GLIBC = re.compile(r"\A2\.[0-9]{1,2}\Z")
ARCHES = {"x86_64": "x86_64", "aarch64": "aarch64"}
#: PEP 427: NAME-VERSION(-BUILD)?-PYTHON-ABI-PLATFORM.whl
WHEEL = re.compile(
    r"\A(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._]*[A-Za-z0-9])?)-(?P<version>[A-Za-z0-9_.!+]+)"
    r"(?:-(?P<build>[0-9][A-Za-z0-9_.]*))?-(?P<python>[A-Za-z0-9_.]+)-(?P<abi>[A-Za-z0-9_.]+)"
    r"-(?P<platform>[A-Za-z0-9_.]+)\.whl\Z"
)
#: A requirement pinned exactly: NAME==VERSION (the version may carry a local part, +cu128).
PIN = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._-]*==[A-Za-z0-9_.!+]+\Z")


#: FlashInfer downloads kernels on first use unless its kernel packages are installed at exactly its own version
#: (docs.flashinfer.ai's installation page: flashinfer-cubin, and flashinfer-jit-cache from FlashInfer's index per CUDA
#: variant); a mismatched one is ignored.
FLASHINFER = "flashinfer-python"
FLASHINFER_KERNELS = ("flashinfer-cubin", "flashinfer-jit-cache")


class WheelBundleError(Exception):
    """A request or a wheelhouse this module refuses, in one sentence (expected, found, what to do)."""


def normalize(name):
    """PEP 503's normal form of a distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_wheel(filename):
    """{name, version, python, abi, platform} of a wheel file name, or None when it is not one."""
    m = WHEEL.match(filename)
    if not m:
        return None
    return {"name": normalize(m.group("name")), "version": m.group("version"), "python": m.group("python"),
            "abi": m.group("abi"), "platform": m.group("platform")}  # fmt: skip


def check_targets(targets):
    """Each target is {python: '3.12', glibc: '2.39'}; refuse one that is not."""
    if not targets:
        raise WheelBundleError("expected at least one Python and C library to bundle wheels for; found none; name the "
                               "fleet's OS releases")  # fmt: skip
    for t in targets:
        if (
            not isinstance(t, dict)
            or not PYTHON.match(str(t.get("python", "")))
            or not GLIBC.match(str(t.get("glibc", "")))
        ):
            raise WheelBundleError(
                "expected each target as {python: 3.X, glibc: 2.Y}; found %r; fix the OS table" % (t,)
            )


def check_pins(pins):
    for p in pins:
        if not isinstance(p, str) or not PIN.match(p):
            raise WheelBundleError("expected each pinned requirement as NAME==VERSION; found %r; fix the pins" % (p,))


def platform_tags(glibc, arch):
    """pip's --platform values for a host with this C library: every manylinux tag it can run, newest first, with the
    legacy aliases (manylinux2014 = 2.17, manylinux2010 = 2.12, manylinux1 = 2.5)."""
    minor = int(glibc.split(".")[1])
    tags = ["manylinux_2_%d_%s" % (m, arch) for m in range(minor, 4, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    tags += ["%s_%s" % (name, arch) for m, name in sorted(legacy.items(), reverse=True) if m <= minor]
    return tags


def target_args(python, glibc, arch):
    """pip download's arguments that name the target instead of the running interpreter."""
    abi = "cp" + python.replace(".", "")
    args = ["--only-binary=:all:", "--implementation", "cp", "--python-version", python, "--abi", abi, "--abi", "abi3",
            "--abi", "none"]  # fmt: skip
    for tag in platform_tags(glibc, ARCHES[arch]):
        args += ["--platform", tag]
    return args


def download_argv(pip, dest, target, requirements, *, index_url="", extra=None):
    """One ``pip download`` into ``dest`` for ``target`` ({python, glibc, arch})."""
    argv = [*pip, "download", "--dest", dest, "--no-input", "--disable-pip-version-check", "--progress-bar", "off"]
    argv += target_args(target["python"], target["glibc"], target["arch"])
    if index_url:
        argv += ["--index-url", index_url]
    return [*argv, *(extra or []), "--", *requirements]


def read_record(directory):
    """The wheelhouse record of one finished build, checked against its wheel file (name, version, sha256)."""
    path = os.path.join(directory, RECORD)
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, ValueError) as e:
        raise WheelBundleError("expected a build record at %s; found %s; build the wheel again" % (path, e)) from None
    wheel = record.get("wheel") if isinstance(record, dict) else None
    parsed = parse_wheel(wheel or "")
    if not parsed or os.path.basename(wheel) != wheel:
        raise WheelBundleError("expected the record %s to name its wheel file; found %r; build the wheel again"
                               % (path, wheel))  # fmt: skip
    file = os.path.join(directory, wheel)
    try:
        digest = sha256_file(file)
    except OSError as e:
        raise WheelBundleError(
            "expected the wheel %s beside its record; found %s; build it again" % (file, e)
        ) from None
    if digest != record.get("sha256"):
        raise WheelBundleError("expected %s to have the sha256 its record names (%s); found %s; the wheelhouse was "
                               "changed after the build: build the wheel again"
                               % (file, str(record.get("sha256"))[:16], digest[:16]))  # fmt: skip
    return {"name": normalize(record.get("name") or parsed["name"]), "version": str(record.get("version") or
            parsed["version"]), "wheel": wheel, "python": str((record.get("inputs") or {}).get("python", "")),
            "fingerprint": os.path.basename(directory.rstrip("/")), "commit": str((record.get("inputs") or {})
            .get("commit", ""))}  # fmt: skip


def versions_of(names, project):
    """The versions of ``project`` among wheel file names (public part, without a local +variant)."""
    out = set()
    for n in names:
        parsed = parse_wheel(n)
        if parsed and parsed["name"] == project:
            out.add(parsed["version"].split("+")[0])
    return sorted(out)


def variant_of(pins):
    """The CUDA variant of the torch pin (torch==2.9.1+cu128 -> cu128), or ''."""
    for pin in pins:
        name, _, version = pin.partition("==")
        if normalize(name) == "torch" and "+" in version:
            return version.split("+", 1)[1]
    return ""


def flashinfer_requirements(version, variant):
    """FlashInfer's kernel packages at exactly ``version``: (cubin requirement, JIT-cache requirement)."""
    return "flashinfer-cubin==%s" % version, "flashinfer-jit-cache==%s+%s" % (version, variant)


def flashinfer_problems(names, version):
    """One sentence per kernel package not present at exactly flashinfer-python's ``version``."""
    out = []
    for kernel in FLASHINFER_KERNELS:
        got = versions_of(names, kernel)
        if got != [version]:
            out.append("expected %s %s (FlashInfer uses its kernels only at exactly its own version); found %s"
                       % (kernel, version, ", ".join(got) or "none"))  # fmt: skip
    return out


def wheel_source(filename, url=""):
    """A wheel file's manifest source (bundle_manifest.SOURCE_KINDS['wheel'])."""
    parsed = parse_wheel(filename)
    src = {"kind": "wheel", "name": parsed["name"], "version": parsed["version"]}
    if url:
        src["url"] = url
    return src
