#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bundle_verify
short_description: Verify an offline bundle's signed manifest and every file's hash on the host
version_added: "0.3.0"
description:
  - Checks that the bundle directory's C(manifest.json) is signed (C(manifest.json.sig)) by the key given in
    O(public_key), with OpenSSH's C(ssh-keygen -Y verify) in the bundle namespace, then that the host is one the
    bundle was made for (O(host) against the manifest's target), then that every file of the bundle is
    listed in the manifest with the same size and sha256, that none is missing and that none is added. Links and
    special files in the bundle are refused.
  - Fails with one sentence before anything is installed from the bundle when any of this does not hold.
  - Read-only; supports check mode and always reports C(changed=false).
  - See docs/air-gapped.md for the bundle's layout and how it is made and signed.
options:
  root:
    description: The bundle's directory on the host.
    type: path
    required: true
  public_key:
    description: The OpenSSH public key line of the key the bundle must be signed with (the inventory's).
    type: str
    required: true
  identity:
    description: The signer's name in the allowed-signers line (any word; it must match the one the bundle was signed
      for only in name).
    type: str
    default: llmops-bundle
  host:
    description:
      - This host as the bundle's target names a fleet (C(os), C(arch), C(gpu_archs), C(driver_branch), C(cuda); a key
        left out is not compared). When the signed manifest names a target, a host outside it is refused in one
        sentence saying what differs, before any file is hashed.
    type: dict
  root_owned:
    description:
      - Also refuse a bundle whose directories or files (O(root) itself included) another account than root owns or
        that their group or others may write, before the signature is checked; such an account could change a file
        after it was verified and before it is installed. Where the roles install from the bundle they ask for it.
    type: bool
    default: false
  ssh_keygen:
    description: Path or name of ssh-keygen (OpenSSH 8.1 or later).
    type: str
    default: ssh-keygen
extends_documentation_fragment:
  - llmops.sglang.attributes
attributes:
  check_mode:
    details:
      - Verifies as outside check mode; it changes nothing either way.
author:
  - llmops.sglang developers (@llmops)
"""

EXAMPLES = r"""
- name: Verify the bundle before anything is installed from it
  llmops.sglang.bundle_verify:
    root: /srv/llmops-bundle
    public_key: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB8ovbFPNn3tRRW8Y9tCk1Tg0VpGBBCd1XnPrD2T7b4A ops@site"
"""

RETURN = r"""
bundle:
  description: The bundle's name from its manifest.
  returned: success
  type: str
  sample: glm5-fleet
files:
  description: Files verified.
  returned: success
  type: int
  sample: 412
bytes:
  description: Their total size.
  returned: success
  type: int
  sample: 498221003776
target:
  description: The fleet the signed manifest says the bundle is for (null when it names none).
  returned: success
  type: dict
  sample: {"os": ["ubuntu-24.04"], "arch": "x86_64", "gpu_archs": ["sm_120"], "driver_branch": "580",
           "cuda": ["12.8"]}
"""

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.llmops.sglang.plugins.module_utils import bundle_manifest as M


def main():
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "public_key": {"type": "str", "required": True, "no_log": False},
            "identity": {"type": "str", "default": "llmops-bundle"},
            "ssh_keygen": {"type": "str", "default": "ssh-keygen", "no_log": False},
            "host": {"type": "dict"},
            "root_owned": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    root = p["root"]
    try:
        signers = M.allowed_signers(p["identity"], p["public_key"])
    except M.ManifestError as e:
        module.fail_json(msg=str(e))
    keygen = p["ssh_keygen"] if os.sep in p["ssh_keygen"] else module.get_bin_path(p["ssh_keygen"])
    if not keygen:
        module.fail_json(msg="expected ssh-keygen (OpenSSH) on the host to verify the bundle; found none; install "
                         "openssh-client from the bundle's packages")  # fmt: skip
    if p["root_owned"] and os.path.isdir(root):
        loose = M.ownership_problems(root)
        if loose:
            module.fail_json(msg="expected the bundle at %s to be root's alone; %s; nothing was installed - run "
                             "chown -R root:root and chmod -R go-w on it" % (root, "; ".join(loose)))  # fmt: skip
    manifest_file, sig_file = os.path.join(root, M.MANIFEST), os.path.join(root, M.SIGNATURE)
    for path in (manifest_file, sig_file):
        if not os.path.isfile(path) or os.path.islink(path):
            module.fail_json(msg="expected the bundle's %s at %s; found none; copy the whole bundle, with its signed "
                             "manifest, to the host" % (os.path.basename(path), path))  # fmt: skip
    with open(manifest_file, "rb") as f:
        text = f.read()
    with tempfile.TemporaryDirectory(prefix="llmops-bundle-") as work:
        allowed = os.path.join(work, "allowed_signers")
        with open(os.open(allowed, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(signers)
        argv = [keygen, *M.verify_argv(allowed, p["identity"], sig_file)[1:]]
        rc, out, err = module.run_command(argv, data=text, binary_data=True)
    if rc != 0:
        said = " ".join((err or out).split())[:300] or "no output"
        module.fail_json(msg="expected %s signed by the key given as public_key; ssh-keygen found otherwise "
                         "(%s); nothing was installed - use the bundle signed by your key, or sign it again"
                         % (manifest_file, said))  # fmt: skip
    try:
        manifest = M.loads(text.decode("utf-8"))
    except (M.ManifestError, UnicodeDecodeError) as e:
        module.fail_json(msg=str(e))
    if p["host"] and "target" in manifest:
        differs = M.target_problems(manifest["target"], p["host"])
        if differs:
            module.fail_json(msg="expected the bundle %s to be made for this host's fleet; %s; nothing was installed - "
                             "make a bundle for this fleet" % (manifest.get("bundle"), "; ".join(differs)),
                             problems=differs)  # fmt: skip
    found = M.problems(root, manifest)
    if found:
        more = " (and %d more)" % (len(found) - 3) if len(found) > 3 else ""
        module.fail_json(msg="expected the bundle at %s to be exactly what its signed manifest lists; found: %s%s; "
                         "nothing was installed - copy the bundle again from its source"
                         % (root, "; ".join(found[:3]), more), problems=found[:50])  # fmt: skip
    module.exit_json(changed=False, bundle=manifest.get("bundle"), files=len(manifest["files"]),
                     bytes=sum(e["size"] for e in manifest["files"]), target=manifest.get("target"))  # fmt: skip


if __name__ == "__main__":
    main()
