#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: bundle_manifest
short_description: Write the manifest of an offline bundle directory, every file with its sha256 and its source
version_added: "0.3.0"
description:
  - Hashes every file under O(root) and writes C(manifest.json) there with each file's relative path, sha256, size
    and where it came from (O(sources)), in a canonical form, so that two bundles of the same files and sources have
    byte-identical manifests.
  - Every file needs a source and every source a file; links and special files are refused. The check comes before
    anything is written.
  - A manifest that changes makes an existing C(manifest.json.sig) stale, so that file is removed; sign the new
    manifest with C(ssh-keygen -Y sign) (docs/air-gapped.md).
  - With O(sbom=true) also writes C(sbom.cdx.json), the manifest as a CycloneDX 1.6 SBOM (one component per source,
    named by its package URL, with each file and its sha256), checked against CycloneDX's JSON schema before it is
    written. It is made from the manifest alone, so it is neither listed in the manifest nor signed.
  - Supports check mode (reports whether the manifest would change, writes nothing).
requirements:
  - cyclonedx-python-lib (with O(sbom=true); installed by C(make setup) in the control node's venv)
options:
  root:
    description: The bundle's directory.
    type: path
    required: true
  bundle:
    description: The bundle's name, kept in the manifest.
    type: str
    required: true
  sources:
    description:
      - Where each file came from, keyed by its path relative to O(root). Each value is a mapping with C(kind)
        (C(apt), C(wheel), C(git), C(model), C(pci_ids), C(patch) or C(index)) and the fields that kind names
        (docs/air-gapped.md).
    type: dict
    required: true
  target:
    description:
      - The fleet the bundle is made for, kept in the manifest and checked by each host before it installs anything
        (M(llmops.sglang.bundle_verify) O(llmops.sglang.bundle_verify#module:host)). A mapping with C(os) (OS
        releases such as V(ubuntu-24.04)), C(arch) (V(x86_64) or V(aarch64)), C(gpu_archs) (such as V(sm_120)),
        C(driver_branch) (such as V(580)) and C(cuda) (toolkit versions such as V(12.8)).
    type: dict
  sbom:
    description: Whether to write the CycloneDX SBOM beside the manifest.
    type: bool
    default: true
  signing_key:
    description:
      - A private OpenSSH key on this host to sign the manifest with (C(ssh-keygen -Y sign), the bundle's namespace),
        writing C(manifest.json.sig) whenever the manifest changed or has no signature. Without it the manifest is
        left unsigned and is signed by hand (docs/air-gapped.md).
      - The key must open without a passphrase prompt (an agent, or a key without one); the module never asks.
    type: path
extends_documentation_fragment:
  - llmops.sglang.attributes
attributes:
  check_mode:
    details:
      - Hashes the files and reports whether the manifest would change; writes and removes nothing.
author:
  - llmops.sglang developers (@llmops)
"""

EXAMPLES = r"""
- name: Write the bundle's manifest
  llmops.sglang.bundle_manifest:
    root: /srv/bundles/glm5-fleet
    bundle: glm5-fleet
    sources:
      pci.ids: {kind: pci_ids, url: "https://raw.githubusercontent.com/pciutils/pciids/master/pci.ids"}
      wheels/sglang-0.5.9-py3-none-any.whl: {kind: wheel, name: sglang, version: 0.5.9}
"""

RETURN = r"""
files:
  description: Files listed.
  returned: success
  type: int
  sample: 412
bytes:
  description: Their total size.
  returned: success
  type: int
  sample: 498221003776
sha256:
  description: The sha256 of the manifest's bytes.
  returned: success
  type: str
signed:
  description: Whether the manifest has its signature (made now with O(signing_key), or kept from before).
  returned: success
  type: bool
sbom_sha256:
  description: The sha256 of the SBOM's bytes.
  returned: with O(sbom=true)
  type: str
"""

import hashlib
import os

from ansible.module_utils.basic import AnsibleModule, missing_required_lib

from ansible_collections.llmops.sglang.plugins.module_utils import bundle_manifest as M
from ansible_collections.llmops.sglang.plugins.module_utils import bundle_sbom as S
from ansible_collections.llmops.sglang.plugins.module_utils.private_files import write_whole


def _read(path):
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _write(path, text):
    write_whole(path, text, 0o644, prefix=".bundle-")


def main():
    module = AnsibleModule(
        argument_spec={
            "root": {"type": "path", "required": True},
            "bundle": {"type": "str", "required": True},
            "sources": {"type": "dict", "required": True},
            "target": {"type": "dict"},
            "sbom": {"type": "bool", "default": True},
            "signing_key": {"type": "path", "no_log": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    root = p["root"]
    if p["sbom"] and not S.HAS_CYCLONEDX:
        module.fail_json(msg=missing_required_lib(S.LIBRARY), exception=str(S.IMPORT_ERROR))
    if p["signing_key"] and not os.path.isfile(p["signing_key"]):
        module.fail_json(
            msg="expected the signing key %s; found no file; name the private key that signs the "
            "bundles; nothing was written" % p["signing_key"]
        )
    if not os.path.isdir(root) or os.path.islink(root):
        module.fail_json(msg="expected the bundle's directory at %s; found none; collect the bundle there first" % root)
    try:
        text = M.dumps(M.build(root, p["sources"], p["bundle"], p["target"]))
    except M.ManifestError as e:
        module.fail_json(msg="%s: nothing was written" % e)
    except OSError as e:
        module.fail_json(
            msg="expected to read every file of the bundle at %s; found %s; fix its permissions" % (root, e)
        )
    sbom = None
    if p["sbom"]:
        sbom = S.document(M.loads(text))
        bad = S.problems(sbom)
        if bad:
            module.fail_json(msg="%s: nothing was written" % bad[0])
    target, sig = os.path.join(root, M.MANIFEST), os.path.join(root, M.SIGNATURE)
    sbom_file = os.path.join(root, M.SBOM)
    changed = _read(target) != text
    signed = False
    sbom_changed = sbom is not None and _read(sbom_file) != sbom
    if not module.check_mode:
        if changed:
            _write(target, text)
            if os.path.lexists(sig):
                os.unlink(sig)  # it signed the manifest this one replaces
        if sbom_changed:
            _write(sbom_file, sbom)
        if p["signing_key"] and not os.path.exists(sig):
            rc, _, err = module.run_command(M.sign_argv(p["signing_key"], target), data="")
            if rc != 0 or not os.path.isfile(sig):
                module.fail_json(
                    msg="expected ssh-keygen to sign %s with %s; found exit %s (%s); use a key that "
                    "opens without a prompt"
                    % (target, p["signing_key"], rc, (err.strip().splitlines() or ["no output"])[-1])
                )
            signed = True
    files = M.loads(text)["files"]
    out = {
        "files": len(files),
        "bytes": sum(e["size"] for e in files),
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
    }
    if sbom is not None:
        out["sbom_sha256"] = hashlib.sha256(sbom.encode()).hexdigest()
    out["signed"] = os.path.exists(sig) or (module.check_mode and bool(p["signing_key"]))
    module.exit_json(changed=changed or sbom_changed or signed, **out)


if __name__ == "__main__":
    main()
