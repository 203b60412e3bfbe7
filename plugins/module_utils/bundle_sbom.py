# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The offline bundle's SBOM: its manifest (bundle_manifest.py) as a CycloneDX 1.6 JSON document, made and validated
with CycloneDX's own Python library (cyclonedx-python-lib) and its bundled JSON schema.

One component per source of the manifest (a deb package, a wheel, a git tree, a model snapshot, pci.ids, a patch),
named by its package URL (purl), with one file sub-component per bundle file, each with its sha256. Made from the
manifest alone, so it says nothing the signed manifest does not: the serial number is derived from the manifest's
bytes and the time stamp is fixed, which makes two SBOMs of one manifest byte-identical. The library is needed only
where the bundle is made or its SBOM checked (the control node's venv), never on a GPU host.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import uuid

from ansible_collections.llmops.sglang.plugins.module_utils import bundle_manifest as M

try:
    from cyclonedx.model import HashAlgorithm, HashType
    from cyclonedx.model.bom import Bom
    from cyclonedx.model.component import Component, ComponentType
    from cyclonedx.output.json import JsonV1Dot6
    from cyclonedx.schema import SchemaVersion
    from cyclonedx.validation.json import JsonStrictValidator
    from packageurl import PackageURL

    HAS_CYCLONEDX = True
    IMPORT_ERROR = None
except ImportError as e:  # pragma: no cover - the module says which library is missing
    HAS_CYCLONEDX = False
    IMPORT_ERROR = e

SBOM = M.SBOM
LIBRARY = "cyclonedx-python-lib"
#: The SBOM's fixed time stamp: the document describes the manifest, not the moment it was written.
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
#: uuid5 namespace of the serial numbers (any fixed UUID; this one is uuid5(NAMESPACE_URL, the signature namespace)).
SERIAL_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, M.NAMESPACE)


def purl(source):
    """The package URL of a manifest source (https://github.com/package-url/purl-spec types: deb, pypi, huggingface,
    github, generic), as a string."""
    kind = source["kind"]
    if kind == "apt":
        qualifiers = {k: source[k] for k in ("arch", "distro") if source.get(k)}
        return PackageURL("deb", source.get("vendor") or "debian", source["package"], source["version"],
                          qualifiers or None).to_string()  # fmt: skip
    if kind == "wheel":
        return PackageURL("pypi", None, source["name"].lower().replace("_", "-"), source["version"]).to_string()
    if kind == "model":
        namespace, _, name = source["repo_id"].rpartition("/")
        return PackageURL("huggingface", namespace or None, name, source["commit"]).to_string()
    if kind == "git":
        url = source["url"].rstrip("/")
        name = url.rsplit("/", 1)[-1]
        name = name[:-4] if name.endswith(".git") else name
        return PackageURL("generic", None, name, source["commit"], {"vcs_url": "git+%s@%s" % (url, source["commit"])})\
            .to_string()  # fmt: skip
    if kind == "pci_ids":
        return PackageURL("generic", None, "pci.ids", source.get("version") or None,
                          {"download_url": source["url"]}).to_string()  # fmt: skip
    return PackageURL("generic", None, source["name"], source.get("version") or None).to_string()  # a patch, an index


TYPES = {"apt": "APPLICATION", "wheel": "LIBRARY", "git": "LIBRARY", "model": "MACHINE_LEARNING_MODEL",
         "pci_ids": "DATA", "patch": "FILE", "index": "DATA"}  # fmt: skip


def _name(source):
    """The component's name: its package URL's (a model's ORG/NAME as the hub writes it)."""
    return source.get("repo_id") or PackageURL.from_string(purl(source)).name


def document(manifest):
    """The SBOM's text (canonical: sorted keys, two-space indent, one trailing newline) for a manifest (loads())."""
    if not HAS_CYCLONEDX:
        raise M.ManifestError("expected the Python library %s where the SBOM is made; found none (%s); install it "
                              "(make setup, or pip install %s)" % (LIBRARY, IMPORT_ERROR, LIBRARY))  # fmt: skip
    text = M.dumps(manifest)
    bom = Bom(serial_number=uuid.uuid5(SERIAL_NAMESPACE, hashlib.sha256(text.encode()).hexdigest()))
    bom.metadata.timestamp = EPOCH
    bom.metadata.component = Component(name=str(manifest.get("bundle") or "bundle"),
                                       type=ComponentType.APPLICATION, bom_ref="bundle")  # fmt: skip
    root = bom.metadata.component
    by_source = {}
    for entry in manifest["files"]:
        key = json.dumps(entry["source"], sort_keys=True)
        by_source.setdefault(key, []).append(entry)
    refs = set()
    parts = []
    for key in sorted(by_source):
        source = json.loads(key)
        ref = purl(source)
        n = 1
        while ref in refs:  # two sources of one package URL (e.g. the same package from two URLs)
            n += 1
            ref = "%s#%d" % (purl(source), n)
        refs.add(ref)
        files = [
            Component(name=e["path"], type=ComponentType.FILE, bom_ref="file:" + e["path"],
                      hashes=[HashType(alg=HashAlgorithm.SHA_256, content=e["sha256"])])
            for e in by_source[key]
        ]  # fmt: skip
        version = source.get("version") or source.get("commit")
        part = Component(name=_name(source), version=version, type=getattr(ComponentType, TYPES[source["kind"]]),
                         purl=PackageURL.from_string(purl(source)), bom_ref=ref, components=files)  # fmt: skip
        bom.components.add(part)
        parts.append(part)
    bom.register_dependency(root, parts)  # the bundle holds each of them
    out = json.loads(JsonV1Dot6(bom).output_as_string())
    return json.dumps(out, sort_keys=True, indent=2, ensure_ascii=True) + "\n"


def problems(text):
    """What the CycloneDX 1.6 JSON schema (the library's own) finds wrong with an SBOM's text: [] or one sentence."""
    if not HAS_CYCLONEDX:
        return ["expected the Python library %s to check the SBOM; found none; install it" % LIBRARY]
    error = JsonStrictValidator(SchemaVersion.V1_6).validate_str(text)
    if error is None:
        return []
    return ["expected %s to validate against CycloneDX 1.6's JSON schema; found: %s"
            % (SBOM, str(getattr(error, "data", error)).splitlines()[0][:300])]  # fmt: skip
