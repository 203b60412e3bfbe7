# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The offline bundle's manifest: every file of a bundle with its sha256, its size and where it came from, as one
canonical JSON document, signed with OpenSSH's ``ssh-keygen -Y sign`` by a key the operator holds and verified on each
host with ``ssh-keygen -Y verify`` against the public key in the inventory. This file owns the manifest's schema, its
canonical form, the checks of a bundle against it and the command lines of the signature; the
``llmops.sglang.bundle_verify`` module runs them on a host.

Schema::

    {"schema": 1, "bundle": NAME, "files": [{"path": "wheels/torch-2.9.1-...whl", "sha256": "...", "size": 123,
                                             "source": {"kind": "wheel", "name": "torch", "version": "2.9.1",
                                                        "url": "..."}}, ...]}

An optional ``"target"`` says which fleet the bundle was made for (TARGET: operating systems, CPU architecture, GPU
architectures, driver branch, CUDA toolkits); a host checks itself against it before anything is installed.

Paths are relative, POSIX, sorted, without ``..``; every file under the bundle's root but the manifest and its
signature is listed, and every listed file has a source of a known kind. The canonical form (sorted keys, two-space
indent, one trailing newline, no time stamp) makes two manifests of the same files and sources byte-identical.
Pure functions besides reading the bundle's files; no Ansible imports.
"""

from __future__ import annotations

import filecmp
import hashlib
import json
import os
import re
import stat

from ansible_collections.llmops.sglang.plugins.module_utils.private_files import copy_whole

SCHEMA = 1
MANIFEST = "manifest.json"
SIGNATURE = MANIFEST + ".sig"
#: The SBOM made from the manifest (bundle_sbom.py): derived, so neither listed in the manifest nor signed.
SBOM = "sbom.cdx.json"
#: The signature's namespace (ssh-keygen -n): a signature made for anything else does not verify as a bundle's.
NAMESPACE = "llmops-bundle@llmops.sglang"
#: The kinds of source a file may come from, and the fields each must name.
SOURCE_KINDS = {
    "apt": ("package", "version"),
    "wheel": ("name", "version"),
    "git": ("url", "commit"),
    "model": ("repo_id", "commit"),
    "pci_ids": ("url",),
    "patch": ("name",),
    "index": ("name", "of"),
}
PUBLIC_KEY = re.compile(
    r"\A(ssh-ed25519|ecdsa-sha2-nistp(256|384|521)|ssh-rsa|sk-ssh-ed25519@openssh\.com) [A-Za-z0-9+/=]+( [^\n]*)?\Z"
)
#: What a bundle's target names, each with the form of its values (lists are kept sorted and unique).
TARGET = {
    "os": (list, re.compile(r"\A[a-z]+-[0-9]+(\.[0-9]+)?\Z"), "OS releases such as ubuntu-24.04 or debian-12"),
    "arch": (str, re.compile(r"\A(x86_64|aarch64)\Z"), "a CPU architecture, x86_64 or aarch64"),
    "gpu_archs": (list, re.compile(r"\Asm_[0-9]{2,3}[af]?\Z"), "GPU architectures such as sm_90 or sm_120"),
    "driver_branch": (str, re.compile(r"\A[0-9]{3}\Z"), "a driver branch such as 580"),
    "cuda": (list, re.compile(r"\A[0-9]{1,2}\.[0-9]{1,2}\Z"), "CUDA toolkit versions such as 12.8"),
}
#: How each distribution's releases are named in a target's ``os`` (by the host's facts): Ubuntu by its version
#: (ubuntu-24.04), Debian by its major version (debian-12; its point releases share one archive).
RELEASE_NAMES = {"Ubuntu": ("ubuntu", "distribution_version"), "Debian": ("debian", "distribution_major_version")}
IDENTITY = re.compile(r"\A[A-Za-z0-9][A-Za-z0-9._@-]{0,63}\Z")
CHUNK = 1 << 20


class ManifestError(ValueError):
    """A bundle or manifest that is not what it should be; the message is the one-line error."""


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            h.update(block)
    return h.hexdigest()


def _safe(rel):
    parts = rel.split("/")
    return bool(rel) and not rel.startswith("/") and all(p not in ("", ".", "..") for p in parts) and "\\" not in rel


def bundle_files(root):
    """Every file under ``root`` (relative POSIX paths, sorted) but the manifest, its signature and the SBOM; a link or
    a special file is refused, since a host would install what it points to, not what was hashed."""
    out = []
    for top, dirs, files in os.walk(root):
        dirs.sort()
        for name in dirs + files:
            full = os.path.join(top, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if os.path.islink(full):
                raise ManifestError(
                    "expected only files and directories in the bundle; found the link %s; copy what it points to "
                    "into the bundle instead" % rel
                )
            if name in files and not os.path.isfile(full):
                raise ManifestError("expected only regular files in the bundle; found %s; remove it" % rel)
        for name in files:
            rel = os.path.relpath(os.path.join(top, name), root).replace(os.sep, "/")
            if rel not in (MANIFEST, SIGNATURE, SBOM):
                out.append(rel)
    return sorted(out)


def sync(root, tops, want, prefix=".bundle-", dry_run=False):
    """Make the directories ``tops`` (relative to ``root``) hold exactly ``want`` ({relative path: file to take it
    from}): a file that differs or is missing is copied whole (copy_whole), one not wanted is removed, and directories
    left empty go. Returns (added, removed), relative paths, sorted. A link or special file under ``tops`` is refused
    (ManifestError) before anything changes. ``dry_run`` changes nothing and counts a wanted file whose source is not
    there yet as added only where the bundle lacks it."""
    have = []
    for top in tops:
        base = os.path.join(root, top)
        if os.path.islink(base) or (os.path.exists(base) and not os.path.isdir(base)):
            raise ManifestError("expected %s to be a directory; found a link or a file; remove it" % base)
        for path, dirs, files in os.walk(base):
            for name in dirs + files:
                full = os.path.join(path, name)
                if os.path.islink(full) or (name in files and not os.path.isfile(full)):
                    raise ManifestError("expected only files in %s; found %s, which is not one; remove it"
                                        % (base, full))  # fmt: skip
            have += [os.path.relpath(os.path.join(path, f), root).replace(os.sep, "/") for f in files]
    removed = sorted(rel for rel in have if rel not in want)
    added = []
    for rel, src in sorted(want.items()):
        dest = os.path.join(root, rel)
        if os.path.isfile(dest) and ((dry_run and not os.path.isfile(src)) or filecmp.cmp(src, dest, shallow=False)):
            continue
        added.append(rel)
        if not dry_run:
            os.makedirs(os.path.dirname(dest), mode=0o755, exist_ok=True)
            copy_whole(src, dest, 0o644, prefix=prefix)
    if not dry_run:
        for rel in removed:
            os.unlink(os.path.join(root, rel))
        for top in tops:
            for path, _, _ in sorted(os.walk(os.path.join(root, top)), reverse=True):
                if path != os.path.join(root, top) and not os.listdir(path):
                    os.rmdir(path)
    return added, removed


def check_source(rel, source):
    if not isinstance(source, dict) or source.get("kind") not in SOURCE_KINDS:
        raise ManifestError("expected the source of %s as a mapping with kind one of %s; found %r; say where the file "
                            "came from" % (rel, ", ".join(sorted(SOURCE_KINDS)), source))  # fmt: skip
    missing = [k for k in SOURCE_KINDS[source["kind"]] if not isinstance(source.get(k), str) or not source[k]]
    if missing:
        wanted = ", ".join(SOURCE_KINDS[source["kind"]])
        raise ManifestError(
            "expected the %s source of %s to name %s; found none for %s"
            % (source["kind"], rel, wanted, ", ".join(missing))
        )
    return {k: str(v) for k, v in sorted(source.items())}


def check_target(target):
    """The target in its canonical form (every key of TARGET; lists sorted and unique); ManifestError names the first
    value that is not of its form."""
    if not isinstance(target, dict) or set(target) != set(TARGET):
        found = sorted(target) if isinstance(target, dict) else target
        raise ManifestError("expected the bundle's target to name exactly %s; found %r; say which fleet the bundle "
                            "is for" % (", ".join(sorted(TARGET)), found))  # fmt: skip
    out = {}
    for key, (kind, form, says) in TARGET.items():
        value = target[key]
        values = value if isinstance(value, list) else [value]
        if not isinstance(value, kind) or not values or not all(isinstance(v, str) and form.match(v) for v in values):
            raise ManifestError("expected the bundle's target %s as %s; found %r" % (key, says, value))
        out[key] = sorted(set(value)) if kind is list else value
    return out


def release_of(facts):
    """The OS release of a host as a target names it (``ubuntu-24.04``, ``debian-12``) from its Ansible facts; '' for
    a distribution bundles are not made for."""
    name, key = RELEASE_NAMES.get(str(facts.get("distribution", "")), (None, None))
    value = str(facts.get(key) or "") if name else ""
    release = "%s-%s" % (name, value)
    return release if value and TARGET["os"][1].match(release) else ""


def target_problems(target, host):
    """What keeps a host from installing a bundle made for ``target``, one sentence each (empty: it may). ``host`` names
    the same keys for this host (``cuda``: the toolkits it is to install; a key it omits is not compared)."""
    out = []
    if host.get("os") and host["os"] not in target["os"]:
        out.append("it was made for %s and this host runs %s" % (", ".join(target["os"]), host["os"]))
    if host.get("arch") and host["arch"] != target["arch"]:
        out.append("it holds %s packages and wheels and this host is %s" % (target["arch"], host["arch"]))
    missing = sorted(set(host.get("gpu_archs") or []) - set(target["gpu_archs"]))
    if missing:
        out.append("its kernels were built for %s and this host's GPUs need %s"
                   % (", ".join(target["gpu_archs"]), ", ".join(missing)))  # fmt: skip
    if host.get("driver_branch") and str(host["driver_branch"]) != target["driver_branch"]:
        out.append("it holds the %s driver branch and this host is to run %s" % (target["driver_branch"],
                                                                                 host["driver_branch"]))  # fmt: skip
    cuda = sorted(set(host.get("cuda") or []) - set(target["cuda"]))
    if cuda:
        out.append("it holds the CUDA toolkits %s and this host is to install %s"
                   % (", ".join(target["cuda"]), ", ".join(cuda)))  # fmt: skip
    return out


def build(root, sources, bundle, target=None):
    """The manifest of the bundle at ``root``: ``sources`` maps each relative path to where it came from (every file
    needs one, and every source a file); ``target`` (optional, see TARGET) the fleet it is for."""
    files = bundle_files(root)
    unknown = sorted(set(sources) - set(files))
    if unknown:
        raise ManifestError("expected a file in the bundle for each source; found none for %s" % ", ".join(unknown[:5]))
    entries = []
    for rel in files:
        if rel not in sources:
            raise ManifestError("expected a source for every file of the bundle; found none for %s" % rel)
        full = os.path.join(root, *rel.split("/"))
        entries.append({"path": rel, "sha256": sha256_file(full), "size": os.path.getsize(full),
                        "source": check_source(rel, sources[rel])})  # fmt: skip
    out = {"schema": SCHEMA, "bundle": str(bundle), "files": entries}
    if target is not None:
        out["target"] = check_target(target)
    return out


def dumps(manifest):
    """The canonical text: the same manifest is always the same bytes."""
    return json.dumps(manifest, sort_keys=True, indent=2, ensure_ascii=True) + "\n"


def loads(text):
    """The manifest from its text, its shape checked; ManifestError says what is wrong."""
    try:
        doc = json.loads(text)
    except ValueError as e:
        raise ManifestError(
            "expected the bundle's %s to be JSON; found %s; make the bundle again" % (MANIFEST, e)
        ) from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("files"), list):
        raise ManifestError("expected a bundle manifest of schema %d; found another document; make the bundle again "
                            "with this collection's playbooks/bundle.yml" % SCHEMA)  # fmt: skip
    for e in doc["files"]:
        if not isinstance(e, dict) or not isinstance(e.get("path"), str) or not _safe(e["path"]):
            shown = e.get("path") if isinstance(e, dict) else e
            raise ManifestError(
                "expected relative paths inside the bundle in its manifest; found %r; the manifest is not one this "
                "collection made" % (shown,)
            )
        if not re.fullmatch(r"[0-9a-f]{64}", str(e.get("sha256", ""))) or not isinstance(e.get("size"), int):
            raise ManifestError("expected a sha256 and a size for %s in the manifest; found %r, %r"
                                % (e["path"], e.get("sha256"), e.get("size")))  # fmt: skip
        check_source(e["path"], e.get("source"))
    if "target" in doc:
        check_target(doc["target"])
    return doc


def problems(root, manifest):
    """What differs between the bundle at ``root`` and its manifest, one sentence each (empty: the bundle is the
    manifest's). Sizes are compared first, so a truncated file is named without hashing it."""
    out = []
    listed = {e["path"]: e for e in manifest["files"]}
    try:
        present = set(bundle_files(root))
    except ManifestError as e:
        return [str(e)]
    for rel in sorted(present - set(listed)):
        out.append("%s is in the bundle but not in its manifest" % rel)
    for rel, e in sorted(listed.items()):
        full = os.path.join(root, *rel.split("/"))
        if rel not in present:
            out.append("%s is in the manifest but missing from the bundle" % rel)
        elif os.path.getsize(full) != e["size"]:
            out.append("%s has %d bytes; the manifest says %d" % (rel, os.path.getsize(full), e["size"]))
        else:
            digest = sha256_file(full)
            if digest != e["sha256"]:
                out.append("%s has sha256 %s; the manifest says %s" % (rel, digest[:16], e["sha256"][:16]))
    return out


def ownership_problems(root, uid=0, limit=3):
    """The bundle's directories and files (``root`` itself included) that an account other than ``uid`` owns or that
    its group or others may write, one sentence each (at most ``limit``): such an account could change a file after it
    was verified and before it is installed."""
    out = []
    for path, dirs, files in os.walk(root):
        for full in [path] + [os.path.join(path, n) for n in dirs + files]:
            st = os.lstat(full)
            if st.st_uid != uid:
                out.append("%s is owned by uid %d" % (full, st.st_uid))
            elif stat.S_IMODE(st.st_mode) & 0o022:
                out.append("%s is writable by its group or others (mode %04o)" % (full, stat.S_IMODE(st.st_mode)))
            if len(out) >= limit:
                return out
    return out


def allowed_signers(identity, public_key):
    """The one line of an ssh-keygen allowed-signers file that trusts ``public_key`` as ``identity`` for bundles."""
    key = (public_key or "").strip()
    if not IDENTITY.match(identity or ""):
        raise ManifestError("expected the signer identity as a word of letters, digits, '.', '_', '@' or '-'; found "
                            "%r" % (identity,))  # fmt: skip
    if not PUBLIC_KEY.match(key):
        raise ManifestError("expected the public key as one OpenSSH public key line (ssh-ed25519 AAAA...); "
                            "found %r; paste the .pub file of the key that signs the bundles" % key[:40])  # fmt: skip
    return '%s namespaces="%s" %s\n' % (identity, NAMESPACE, " ".join(key.split()[:2]))


def verify_argv(signers_file, identity, signature_file):
    """ssh-keygen's verification: the manifest's bytes on standard input."""
    return ["ssh-keygen", "-Y", "verify", "-f", signers_file, "-I", identity, "-n", NAMESPACE, "-s", signature_file]


def sign_argv(private_key, manifest_file):
    """ssh-keygen's signature of the manifest (writes MANIFEST.sig beside it)."""
    return ["ssh-keygen", "-Y", "sign", "-f", private_key, "-n", NAMESPACE, manifest_file]
