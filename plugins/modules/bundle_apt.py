#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bundle_apt
short_description: Put the apt packages an OS release needs into an offline bundle, their closure resolved by apt
version_added: "0.3.0"
description:
  - Resolves O(packages) and everything they depend on for one OS release with apt's own resolver, in a private state
    of its own (its own sources list, package lists, cache and an empty dpkg status), downloads them and puts the
    package files into C(apt/RELEASE/) under the bundle's directory O(root).
  - The dpkg status is empty, so the closure is what a host with nothing installed needs; the bundle then installs on
    every host of that release whatever each one already has. The host's own apt state (its sources, lists, cache and
    installed packages) is neither read nor changed; its apt configuration (proxies) is kept, without the hooks it
    runs after an update or around dpkg (they act on the host's own state).
  - Every source must name its keyring (C(signed-by)); apt checks each repository's signature and each package's hash.
  - Package files in C(apt/RELEASE/) that the closure no longer holds are removed, so the directory is exactly the
    closure and its package index C(Packages) (each file's control fields, size and sha256, in file-name order), which
    makes the directory a flat repository a host installs from with C(deb [trusted=yes] file:DIR/apt/RELEASE ./)
    once the signed manifest that lists the index and the files is verified; returns each file's manifest source for
    M(llmops.sglang.bundle_manifest).
  - A request that is not well formed, a source apt cannot read or a package it cannot resolve is refused in one
    line before anything in the bundle changes.
  - Supports check mode (reads the sources into the private state and reports which files would be added or
    removed; downloads nothing and changes nothing in the bundle).
requirements:
  - apt-get and dpkg-deb on the host that makes the bundle (Debian or Ubuntu)
options:
  root:
    description: The bundle's directory.
    type: path
    required: true
  release:
    description: The OS release the packages are for, as the bundle's target names it (V(ubuntu-24.04), V(debian-12)).
    type: str
    required: true
  packages:
    description: The packages to install on that release, each V(NAME) or V(NAME=VERSION).
    type: list
    elements: str
    required: true
  sources:
    description:
      - The repositories of that release, each one line C(deb [signed-by=/PATH] URL SUITE [COMPONENT ...]), the
        keyring a file on this host. A closure that needs the release's own archive needs its sources too.
    type: list
    elements: str
    required: true
  arch:
    description: The fleet's CPU architecture.
    type: str
    default: x86_64
    choices: [x86_64, aarch64, amd64, arm64]
  preferences:
    description:
      - apt preferences for the resolver, the same pins the roles write on the hosts (for the driver,
        C(roles/nvidia_driver/templates/nvidia-driver.pref.j2), which holds every package of the driver's source
        packages at exactly its version; without it apt takes the newest version of each dependency and a pinned
        metapackage cannot be resolved).
    type: str
    default: ""
  install_recommends:
    description: Whether the closure includes recommended packages (apt's default, and how the roles install).
    type: bool
    default: true
  state_dir:
    description:
      - Where the private apt keeps its state, in a directory C(RELEASE-ARCH) under it (lists and a cache of downloaded
        packages, so a second bundle downloads nothing again). Created 0700.
    type: path
    default: ~/.cache/llmops-sglang/bundle-apt
extends_documentation_fragment:
  - llmops.sglang.attributes
attributes:
  check_mode:
    support: full
    details:
      - Refreshes the private package lists and reports which files would change; downloads nothing.
author:
  - llmops.sglang developers (@llmops)
"""

EXAMPLES = r"""
- name: Put the driver's packages for Ubuntu 24.04 into the bundle
  llmops.sglang.bundle_apt:
    root: /srv/bundles/glm5-fleet
    release: ubuntu-24.04
    packages: [nvidia-headless-580-open=580.95.05-0ubuntu1, nvidia-utils-580=580.95.05-0ubuntu1]
    sources:
      - >-
        deb [signed-by=/srv/keys/cuda-archive-keyring.gpg]
        https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/ /
  register: bundle_apt_ubuntu
"""

RETURN = r"""
packages:
  description: The closure, each package with its version, architecture and file (relative to O(root)).
  returned: success
  type: list
  elements: dict
  sample: [{"package": "nvidia-utils-580", "version": "580.95.05-0ubuntu1", "arch": "amd64",
            "path": "apt/ubuntu-24.04/nvidia-utils-580_580.95.05-0ubuntu1_amd64.deb"}]
sources:
  description:
    - Each file's manifest source, keyed by its path relative to O(root) (the
      O(llmops.sglang.bundle_manifest#module:sources) entries).
  returned: success
  type: dict
added:
  description: Files added or replaced in the bundle (the package index among them when it changed).
  returned: success
  type: list
  elements: str
removed:
  description: Files removed from the bundle because the closure no longer holds them.
  returned: success
  type: list
  elements: str
bytes:
  description: The closure's total size in bytes (0 in check mode for files not downloaded yet).
  returned: success
  type: int
"""

import os

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils import bundle_apt as A
from ansible_collections.llmops.sglang.plugins.module_utils import bundle_manifest as M


def _apt(module, argv, what, advice):
    rc, out, err = module.run_command(argv, environ_update={"LC_ALL": "C", "DEBIAN_FRONTEND": "noninteractive"})
    if rc != 0:
        module.fail_json(
            msg="apt could not %s: %s; %s; nothing in the bundle changed" % (what, A.first_error(err + out), advice)
        )
    return out


def main():
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "release": {"type": "str", "required": True},
            "packages": {"type": "list", "elements": "str", "required": True},
            "sources": {"type": "list", "elements": "str", "required": True},
            "arch": {"type": "str", "default": "x86_64", "choices": sorted(A.ARCHES)},
            "preferences": {"type": "str", "default": ""},
            "install_recommends": {"type": "bool", "default": True},
            "state_dir": {"type": "path", "default": "~/.cache/llmops-sglang/bundle-apt"},
        },
        supports_check_mode=True,
    )
    p = module.params
    release, root = p["release"], p["root"]
    try:
        A.check_request(release, p["packages"], p["sources"], p["arch"])
    except A.AptBundleError as e:
        module.fail_json(msg=str(e))
    if not os.path.isdir(root) or os.path.islink(root):
        module.fail_json(msg="expected the bundle's directory at %s; found none; create it first" % root)
    for tool in ("apt-get", "dpkg-deb"):
        if not module.get_bin_path(tool):
            module.fail_json(
                msg="expected %s on this host to resolve the packages; found none; make the bundle on "
                "a Debian or Ubuntu host" % tool
            )
    rel_dir = os.path.join("apt", release)
    dest = os.path.join(root, rel_dir)
    for d in (os.path.join(root, "apt"), dest):
        if os.path.islink(d) or (os.path.exists(d) and not os.path.isdir(d)):
            module.fail_json(msg="expected %s to be a directory; found a link or a file; remove it" % d)
    state_dir = os.path.join(p["state_dir"], "%s-%s" % (release, A.ARCHES[p["arch"]]))
    paths = A.prepare(state_dir, p["sources"], p["preferences"])
    opts = A.options(paths, p["arch"], p["install_recommends"])
    _apt(module, A.update_argv(opts), "read the sources for %s" % release, "check each source's URL and keyring")
    plan = A.parse_plan(
        _apt(
            module,
            A.plan_argv(opts, p["packages"]),
            "resolve the packages for %s" % release,
            "name versions the sources carry",
        )
    )
    if not plan:
        module.fail_json(
            msg="expected apt to plan the packages for %s; found an empty plan; nothing in the bundle changed" % release
        )
    want = {A.deb_name(*entry): entry for entry in plan}
    if not module.check_mode:
        _apt(
            module,
            A.download_argv(opts, p["packages"]),
            "download the packages for %s" % release,
            "check the sources and the free space of %s" % state_dir,
        )
    stanzas = {}
    index = os.path.join(state_dir, A.INDEX)
    if not module.check_mode:
        for name, (package, version, arch) in sorted(want.items()):
            cached = os.path.join(paths["archives"], name)
            if not os.path.isfile(cached):
                module.fail_json(
                    msg="expected apt to download %s; found no file in %s; nothing was recorded"
                    % (name, paths["archives"])
                )
            rc, out, err = module.run_command(["dpkg-deb", "-f", cached], environ_update={"LC_ALL": "C"})
            differ = A.check_control(A.parse_control(out), package, version, arch) if rc == 0 else err.strip()
            if differ:
                module.fail_json(msg="%s: %s; remove %s and run again" % (name, differ, cached))
            stanzas[name] = A.index_stanza(out, name, os.path.getsize(cached), M.sha256_file(cached))
        with open(index, "w") as f:
            f.write(A.index_text(stanzas))
    files = {"%s/%s" % (rel_dir, name): os.path.join(paths["archives"], name) for name in want}
    files["%s/%s" % (rel_dir, A.INDEX)] = index
    try:
        added, removed = M.sync(
            root,
            [rel_dir],
            files,
            prefix=".bundle-apt-",
            dry_run=module.check_mode,
        )
    except M.ManifestError as e:
        module.fail_json(msg=str(e))
    added, removed = [os.path.basename(r) for r in added], [os.path.basename(r) for r in removed]
    packages, sources, size = [], {}, 0
    for name, (package, version, arch) in sorted(want.items()):
        rel = "%s/%s" % (rel_dir, name)
        packages.append({"package": package, "version": version, "arch": arch, "path": rel})
        sources[rel] = A.source(package, version, arch, release)
        if os.path.isfile(os.path.join(root, rel)):
            size += os.path.getsize(os.path.join(root, rel))
    sources["%s/%s" % (rel_dir, A.INDEX)] = A.index_source(release)
    module.exit_json(
        changed=bool(added or removed), packages=packages, sources=sources, added=added, removed=removed, bytes=size
    )


if __name__ == "__main__":
    main()
