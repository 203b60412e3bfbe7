#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bundle_wheels
short_description: Put the wheelhouse's builds and every wheel the virtualenv installs into an offline bundle
version_added: "0.3.0"
description:
  - Copies the finished builds of O(names) from the wheelhouse O(wheelhouse) (each wheel with its build record, the
    wheel's sha256 checked against the record) into C(wheelhouse/NAME/FINGERPRINT/) of the bundle O(root), the layout
    the build roles read, for every Python version of O(targets).
  - Then resolves, for each target (a Python version and the C library of an OS release), what the virtualenv installs
    besides them with pip's own resolver - O(torch) from O(torch_index_url) with its dependencies, then the dependency
    closure of the built wheels with those pins held - and puts every wheel file into C(wheels/). C(pip download) is
    given the target's tags, so the Python running the module does not matter.
  - C(wheelhouse/) and C(wheels/) then hold exactly this closure (files of an earlier request are removed); returns
    each file's manifest source for M(llmops.sglang.bundle_manifest). Downloads are kept in O(cache_dir), so a second
    run downloads nothing again.
  - A request that is not well formed, a build whose wheel differs from its record and a requirement pip cannot
    resolve are refused in one line before anything in the bundle changes.
requirements:
  - pip on the host that makes the bundle (the Python running the module)
options:
  root:
    description: The bundle's directory.
    type: path
    required: true
  wheelhouse:
    description:
      - The wheelhouse the build roles collect their wheels in (C(NAME/FINGERPRINT/build.json) beside each wheel).
    type: path
    required: true
  names:
    description: The builds to take from the wheelhouse (every finished fingerprint of each, for the targets' Pythons).
    type: list
    elements: str
    default: [sglang, sgl-kernel, flash-attn]
  targets:
    description:
      - The Pythons and C libraries the fleet's OS releases run, each a mapping with C(python) (V(3.12)) and C(glibc)
        (V(2.39)).
    type: list
    elements: dict
    required: true
  arch:
    description: The fleet's CPU architecture.
    type: str
    default: x86_64
    choices: [x86_64, aarch64]
  torch:
    description: The pins installed from the PyTorch index, each C(NAME==VERSION) (C(torch==2.9.1+cu128)).
    type: list
    elements: str
    default: []
  torch_index_url:
    description: The PyTorch index of the pins' variant (C(https://download.pytorch.org/whl/cu128)).
    type: str
    default: ""
  index_url:
    description: The package index of everything else; empty - the index pip's own configuration names.
    type: str
    default: ""
  flashinfer_index_url:
    description:
      - FlashInfer's own index (C(https://flashinfer.ai/whl)). Where the closure holds C(flashinfer-python), its kernel
        packages are resolved at exactly its version - C(flashinfer-cubin) from O(index_url) or this index,
        C(flashinfer-jit-cache) from this index's CUDA variant (the torch pin's, C(/cu128)) - and a closure without
        both at that version is refused, since FlashInfer would download kernels on first use.
    type: str
    default: ""
  pip_args:
    description: More arguments for every C(pip download) (C(--trusted-host HOST)).
    type: list
    elements: str
    default: []
  cache_dir:
    description: Where the downloads are kept between runs, one directory per target under it. Created 0700.
    type: path
    default: ~/.cache/llmops-sglang/bundle-wheels
extends_documentation_fragment:
  - llmops.sglang.attributes
attributes:
  check_mode:
    support: full
    details:
      - Resolves into O(cache_dir) as usual (pip downloads what it resolves) and reports which files of the bundle
        would be added or removed; changes nothing in the bundle.
author:
  - llmops.sglang developers (@llmops)
"""

EXAMPLES = r"""
- name: Put the builds and the virtualenv's wheels for Ubuntu 24.04 into the bundle
  llmops.sglang.bundle_wheels:
    root: /srv/bundles/glm5-fleet
    wheelhouse: /home/ops/.cache/llmops-sglang/wheelhouse
    targets: [{python: "3.12", glibc: "2.39"}]
    torch: [torch==2.9.1+cu128]
    torch_index_url: https://download.pytorch.org/whl/cu128
"""

RETURN = r"""
sources:
  description: Each file's manifest source, keyed by its path relative to O(root).
  returned: success
  type: dict
builds:
  description: The wheelhouse builds taken, each with its name, version, fingerprint and Python.
  returned: success
  type: list
  elements: dict
wheels:
  description: The file names in C(wheels/).
  returned: success
  type: list
  elements: str
added:
  description: Files added to the bundle or replaced in it.
  returned: success
  type: list
  elements: str
removed:
  description: Files removed from the bundle because the closure no longer holds them.
  returned: success
  type: list
  elements: str
"""

import os
import re
import sys

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils import bundle_wheels as W
from ansible_collections.llmops.sglang.plugins.module_utils import bundle_manifest as M

# pip download names each file of the closure once: "Saved DEST/F" or "File was already downloaded DEST/F".
_FILE = re.compile(r"^\s*(?:Saved|File was already downloaded) (?P<path>\S+\.whl)\s*$", re.M)


def _builds(module, wheelhouse, names, pythons):
    builds = []
    for name in sorted(set(names)):
        top = os.path.join(wheelhouse, name)
        if not os.path.isdir(top):
            continue
        for fp in sorted(os.listdir(top)):
            directory = os.path.join(top, fp)
            if not os.path.isfile(os.path.join(directory, W.RECORD)):
                continue  # not finished: the record is written last
            try:
                record = W.read_record(directory)
            except W.WheelBundleError as e:
                module.fail_json(msg="%s; nothing in the bundle changed" % e)
            if record["python"] in pythons:
                builds.append(dict(record, directory=directory, dir_name=name))
    return builds


def _pip(module, argv, what):
    rc, out, err = module.run_command(argv, environ_update={"PIP_NO_INPUT": "1", "LC_ALL": "C"})
    if rc != 0:
        lines = [line.strip() for line in (err + "\n" + out).splitlines() if line.strip()]
        first = next((line for line in lines if line.startswith("ERROR")), lines[-1] if lines else "exit %d" % rc)
        module.fail_json(msg="pip could not %s: %s; check the pins and the index; nothing in the bundle changed"
                             % (what, first))  # fmt: skip
    return [os.path.basename(m.group("path")) for m in _FILE.finditer(out)]


def _flashinfer(module, pip, cache, target, names):
    """FlashInfer's kernel packages at exactly the version of flashinfer-python in this target's closure."""
    p = module.params
    versions = W.versions_of(names, W.FLASHINFER)
    if not versions:
        return []
    if len(versions) > 1:
        module.fail_json(msg="expected one version of flashinfer-python in the closure; found %s; pin one; nothing in "
                             "the bundle changed" % ", ".join(versions))  # fmt: skip
    variant = W.variant_of(p["torch"])
    if not p["flashinfer_index_url"] or not variant:
        module.fail_json(msg="expected FlashInfer's index and the torch pin's CUDA variant to bundle the kernels of "
                             "flashinfer-python %s; found index %r, variant %r; set them, or FlashInfer downloads "
                             "kernels on first use; nothing in the bundle changed"
                             % (versions[0], p["flashinfer_index_url"], variant))  # fmt: skip
    base = p["flashinfer_index_url"].rstrip("/")
    constraints = os.path.join(cache, "llmops-flashinfer-constraints.txt")
    with open(constraints, "w") as f:
        f.write("".join("%s\n" % pin for pin in p["torch"]) + "%s==%s\n" % (W.FLASHINFER, versions[0]))
    cubin, jit = W.flashinfer_requirements(versions[0], variant)
    common = [*p["pip_args"], "--find-links", cache, "--constraint", constraints]
    got = _pip(module, W.download_argv(pip, cache, target, [cubin], index_url=p["index_url"],
                                       extra=[*common, "--extra-index-url", base]), "resolve " + cubin)  # fmt: skip
    got += _pip(module, W.download_argv(pip, cache, target, [jit], index_url="%s/%s" % (base, variant), extra=common),
                "resolve " + jit)  # fmt: skip
    problems = W.flashinfer_problems(names + got, versions[0])
    if problems:
        module.fail_json(msg="%s; nothing in the bundle changed" % problems[0])
    return got


def main():
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "wheelhouse": {"type": "path", "required": True},
            "names": {"type": "list", "elements": "str", "default": ["sglang", "sgl-kernel", "flash-attn"]},
            "targets": {"type": "list", "elements": "dict", "required": True},
            "arch": {"type": "str", "default": "x86_64", "choices": sorted(W.ARCHES)},
            "torch": {"type": "list", "elements": "str", "default": []},
            "torch_index_url": {"type": "str", "default": ""},
            "index_url": {"type": "str", "default": ""},
            "flashinfer_index_url": {"type": "str", "default": ""},
            "pip_args": {"type": "list", "elements": "str", "default": []},
            "cache_dir": {"type": "path", "default": "~/.cache/llmops-sglang/bundle-wheels"},
        },
        supports_check_mode=True,
    )
    p = module.params
    root = p["root"]
    try:
        W.check_targets(p["targets"])
        W.check_pins(p["torch"])
    except W.WheelBundleError as e:
        module.fail_json(msg=str(e))
    if p["torch"] and not p["torch_index_url"]:
        module.fail_json(msg="expected the PyTorch index of %s; found none; set its URL" % ", ".join(p["torch"]))
    if not os.path.isdir(root) or os.path.islink(root):
        module.fail_json(msg="expected the bundle's directory at %s; found none; create it first" % root)
    pip = [sys.executable, "-m", "pip"]
    pythons = sorted({str(t["python"]) for t in p["targets"]})
    builds = _builds(module, p["wheelhouse"], p["names"], pythons)

    # Resolve every target in the cache first: a failure leaves the bundle as it was.
    closure, built_files = {}, {b["wheel"] for b in builds}
    for t in sorted(p["targets"], key=lambda t: (str(t["python"]), str(t["glibc"]))):
        target = {"python": str(t["python"]), "glibc": str(t["glibc"]), "arch": p["arch"]}
        cache = os.path.join(p["cache_dir"], "cp%s-glibc%s-%s" % (target["python"], target["glibc"], p["arch"]))
        os.makedirs(cache, mode=0o700, exist_ok=True)
        names = []
        if p["torch"]:
            argv = W.download_argv(pip, cache, target, p["torch"], index_url=p["torch_index_url"], extra=p["pip_args"])
            names += _pip(module, argv, "resolve %s" % ", ".join(p["torch"]))
        mine = [b for b in builds if b["python"] == target["python"]]
        if mine:
            constraints = os.path.join(cache, "llmops-constraints.txt")
            with open(constraints, "w") as f:
                f.write("".join("%s\n" % pin for pin in p["torch"]))
                f.write("".join("%s==%s\n" % (b["name"], b["version"]) for b in mine))
            extra = [*p["pip_args"], "--find-links", cache, "--constraint", constraints]
            files = [os.path.join(b["directory"], b["wheel"]) for b in mine]
            what = "resolve the dependencies of %s" % ", ".join(b["wheel"] for b in mine)
            names += _pip(
                module, W.download_argv(pip, cache, target, files, index_url=p["index_url"], extra=extra), what
            )
        names += _flashinfer(module, pip, cache, target, names)
        for name in names:
            if name in built_files:
                continue
            if not W.parse_wheel(name) or not os.path.isfile(os.path.join(cache, name)):
                module.fail_json(msg="expected pip to leave the wheel %s in %s; found none; nothing in the bundle "
                                     "changed" % (name, cache))  # fmt: skip
            closure.setdefault(name, os.path.join(cache, name))

    want = {}
    for b in builds:
        rel = "wheelhouse/%s/%s" % (b["dir_name"], b["fingerprint"])
        src = {"kind": "wheel", "name": b["name"], "version": b["version"], "fingerprint": b["fingerprint"]}
        want["%s/%s" % (rel, b["wheel"])] = (os.path.join(b["directory"], b["wheel"]), src)
        want["%s/%s" % (rel, W.RECORD)] = (os.path.join(b["directory"], W.RECORD), src)
    for name, path in sorted(closure.items()):
        want["wheels/%s" % name] = (path, W.wheel_source(name))

    try:
        added, removed = M.sync(root, ["wheelhouse", "wheels"], {rel: src for rel, (src, _) in want.items()},
                                prefix=".bundle-wheel-", dry_run=module.check_mode)  # fmt: skip
    except M.ManifestError as e:
        module.fail_json(msg=str(e))
    module.exit_json(
        changed=bool(added or removed),
        sources={rel: src for rel, (_, src) in sorted(want.items())},
        builds=[{k: b[k] for k in ("name", "version", "fingerprint", "python")} for b in builds],
        wheels=sorted(closure),
        added=added,
        removed=removed,
    )


if __name__ == "__main__":
    main()
