# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""An offline bundle's apt packages: the closure of a package request for one OS release, resolved by apt's own
resolver in a private state (its own sources, lists, cache and an empty dpkg status, so the host's apt state is neither
read nor changed), and the manifest sources of the files it downloaded.

The dpkg status is empty on purpose: the closure is what a host with nothing installed would need, a superset of
what any real host of that release needs, so the bundle installs on every host of the fleet whatever each one already
has. The host's own apt configuration (``/etc/apt/apt.conf.d``: proxies, mirrors' settings) is kept without its hooks
(they act on the host's own state); the sources, the preferences, the state and the cache are private.

The files of a release come with their own flat package index (``Packages``, as a flat repository serves it next to
its files): a host installs from the bundle with apt's own resolver given the line ``deb [trusted=yes]
file:DIR/apt/RELEASE ./``; the index is trusted because the signed manifest that lists it and every package file is
verified first.

This file owns the checks of the request, the command lines of the private apt, the reading of apt's plan, the
package index and the manifest source of each package file. Pure functions besides ``prepare``; no Ansible imports.
"""

from __future__ import annotations

import os
import re

#: An OS release as the bundle's target names it (bundle_manifest.TARGET's ``os``): distribution-version.
RELEASE = re.compile(r"\A(?P<vendor>[a-z]+)-(?P<version>[0-9]+(\.[0-9]+)?)\Z")
#: One package, optionally pinned: NAME or NAME=VERSION (Debian policy's characters for each).
PACKAGE = re.compile(r"\A[a-z0-9][a-z0-9+.-]+(=[0-9][A-Za-z0-9.+~:-]*)?\Z")
#: One one-line apt source, signed by a keyring file: deb [signed-by=/ABS/PATH ...] URL SUITE [COMPONENT ...]
SOURCE = re.compile(
    r"\Adeb \[(?P<opts>[^\]\n]*)\] (?P<url>(https?|file):/[^\s]+) (?P<suite>[^\s]+)"
    r"(?P<components>( [A-Za-z0-9_./-]+)*)\Z"
)
SIGNED_BY = re.compile(r"(?:\A| )signed-by=(?P<path>/[^\s\]]+)")
ARCHES = {"x86_64": "amd64", "aarch64": "arm64", "amd64": "amd64", "arm64": "arm64"}
#: apt-get -s prints one line per package it would install: Inst NAME (VERSION ORIGIN [ARCH])
_INST = re.compile(r"^Inst (?P<package>\S+) (?:\[\S+\] )?\((?P<version>\S+) .*\[(?P<arch>[a-z0-9]+)\]\)", re.M)
_ERROR = re.compile(r"^E: (?P<text>.+)$", re.M)
#: The first relation apt could not satisfy, printed before its "Unable to correct problems".
_UNMET = re.compile(r"^ (?P<package>\S+) : (?P<relation>[A-Za-z-]+): (?P<text>.+)$", re.M)


class AptBundleError(Exception):
    """A request this module refuses, in one sentence (expected, found, what to do)."""


def check_request(release, packages, sources, arch):
    """Refuse a request that is not well formed, before apt runs."""
    if not isinstance(release, str) or not RELEASE.match(release):
        raise AptBundleError(
            "expected an OS release such as ubuntu-24.04 or debian-12; found %r; name the release the packages are for"
            % (release,)
        )
    if arch not in ARCHES:
        raise AptBundleError(
            "expected a CPU architecture (x86_64, aarch64, amd64 or arm64); found %r; name the fleet's" % (arch,)
        )
    if not packages:
        raise AptBundleError("expected at least one package for %s; found none; name the packages to bundle" % release)
    for p in packages:
        if not isinstance(p, str) or not PACKAGE.match(p):
            raise AptBundleError(
                "expected each package as NAME or NAME=VERSION; found %r; fix the package list for %s" % (p, release)
            )
    if not sources:
        raise AptBundleError("expected at least one apt source for %s; found none; name the repositories" % release)
    for s in sources:
        m = SOURCE.match(s) if isinstance(s, str) else None
        if not m:
            raise AptBundleError(
                "expected each apt source as one line 'deb [signed-by=/PATH] URL SUITE [COMPONENT ...]'; found %r; "
                "fix the sources for %s" % (s, release)
            )
        key = SIGNED_BY.search(m.group("opts"))
        if not key:
            raise AptBundleError(
                "expected each apt source to name its keyring (signed-by=/PATH); found %r; a bundle takes packages "
                "only from repositories whose signatures apt checks" % s
            )
        if not os.path.isfile(key.group("path")):
            raise AptBundleError(
                "expected the keyring %s of the apt source %r; found no file; put the repository's keyring there"
                % (key.group("path"), s)
            )


def layout(state_dir):
    """The private apt's directories and files under ``state_dir``."""
    return {
        "state": os.path.join(state_dir, "state"),
        "lists": os.path.join(state_dir, "state", "lists"),
        "status": os.path.join(state_dir, "status"),
        "cache": os.path.join(state_dir, "cache"),
        "archives": os.path.join(state_dir, "cache", "archives"),
        "sourcelist": os.path.join(state_dir, "etc", "sources.list"),
        "sourceparts": os.path.join(state_dir, "etc", "sources.list.d"),
        "preferences": os.path.join(state_dir, "etc", "preferences"),
        "preferencesparts": os.path.join(state_dir, "etc", "preferences.d"),
        "config": os.path.join(state_dir, "etc", "apt.conf"),
    }


#: The host's apt hooks (an AppStream refresh, PackageKit's notice, a cache clean-up) act on the host's own state: the
#: private apt runs none of them.
HOOKS = ("APT::Update::Pre-Invoke", "APT::Update::Post-Invoke", "APT::Update::Post-Invoke-Success",
         "DPkg::Pre-Invoke", "DPkg::Post-Invoke", "DPkg::Pre-Install-Pkgs")  # fmt: skip


def prepare(state_dir, sources, preferences=""):
    """Create the private state (0700) with its own sources list, its own preferences (the roles' pins) and an empty
    dpkg status."""
    paths = layout(state_dir)
    for d in (
        state_dir,
        os.path.join(paths["lists"], "partial"),
        os.path.join(paths["archives"], "partial"),
        paths["sourceparts"],
        paths["preferencesparts"],
    ):
        os.makedirs(d, mode=0o700, exist_ok=True)
    os.chmod(state_dir, 0o700)
    with open(paths["sourcelist"], "w") as f:
        f.write("".join(s + "\n" for s in sources))
    open(paths["status"], "w").close()
    with open(paths["preferences"], "w") as f:
        f.write(preferences or "")
    with open(paths["config"], "w") as f:
        f.write("".join("#clear %s;\n" % hook for hook in HOOKS))
    return paths


def options(paths, arch, install_recommends):
    """apt-get's -o options: every path private, one architecture, recommends as the roles install them."""
    deb_arch = ARCHES[arch]
    opts = [
        ("Dir::State", paths["state"]),
        ("Dir::State::status", paths["status"]),
        ("Dir::Cache", paths["cache"]),
        ("Dir::Cache::archives", paths["archives"]),
        ("Dir::Etc::sourcelist", paths["sourcelist"]),
        ("Dir::Etc::sourceparts", paths["sourceparts"]),
        ("Dir::Etc::preferences", paths["preferences"]),
        ("Dir::Etc::preferencesparts", paths["preferencesparts"]),
        ("APT::Architecture", deb_arch),
        ("APT::Architectures", deb_arch),
        ("APT::Install-Recommends", "true" if install_recommends else "false"),
        ("Debug::NoLocking", "true"),
    ]
    return ["-c", paths["config"]] + [x for k, v in opts for x in ("-o", "%s=%s" % (k, v))]


def update_argv(opts):
    """Read the sources; any source that cannot be read is an error (apt 2.1.16 and later), not a warning: a closure
    resolved from part of the sources would be wrong."""
    return ["apt-get", "-q", *opts, "update", "--error-on=any"]


def plan_argv(opts, packages):
    return ["apt-get", "-q", "-s", *opts, "install", "--", *packages]


def download_argv(opts, packages):
    return ["apt-get", "-q", "-y", "--download-only", *opts, "install", "--", *packages]


def first_error(output):
    """apt's first error line (without its ``E: ``), or the last line of its output."""
    unmet = _UNMET.search(output or "")
    if unmet:
        return "%s %s %s" % (unmet.group("package"), unmet.group("relation"), unmet.group("text").strip())
    m = _ERROR.search(output or "")
    if m:
        return m.group("text").strip()
    lines = [line.strip() for line in (output or "").splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def parse_plan(output):
    """The packages ``apt-get -s install`` would install: [(package, version, arch)], sorted by name."""
    return sorted({(m.group("package"), m.group("version"), m.group("arch")) for m in _INST.finditer(output)})


def deb_name(package, version, arch):
    """The file name apt gives a downloaded package (an epoch's colon is written %3a)."""
    return "%s_%s_%s.deb" % (package, version.replace(":", "%3a"), arch)


def source(package, version, arch, release):
    """A package file's manifest source (bundle_manifest.SOURCE_KINDS['apt'] plus what its package URL names)."""
    return {
        "kind": "apt",
        "package": package,
        "version": version,
        "arch": arch,
        "distro": release,
        "vendor": RELEASE.match(release).group("vendor"),
    }


#: The package index of a release's files, beside them (apt's flat repository layout).
INDEX = "Packages"


def index_stanza(control, filename, size, sha256):
    """One package's index entry: its control file as ``dpkg-deb -f FILE`` prints it (every field, continuation lines
    kept) followed by where the file is relative to the index, its size and its sha256 (Debian policy 5.1's syntax,
    the fields apt reads from a Packages file)."""
    body = "\n".join(line for line in control.rstrip("\n").splitlines() if line.strip())
    return "%s\nFilename: ./%s\nSize: %d\nSHA256: %s\n" % (body, filename, size, sha256)


def index_text(stanzas):
    """The index of a release's files: {file name: stanza}, in the order of the names (the same files always give
    the same bytes)."""
    return "\n".join(stanzas[name] for name in sorted(stanzas))


def index_source(release):
    """The index's manifest source (bundle_manifest.SOURCE_KINDS['index']): made by the bundle from the files of
    ``apt/RELEASE``."""
    return {"kind": "index", "name": "apt-packages-%s" % release, "of": "apt/%s" % release}


def repo_dir(root, release):
    """The directory of a bundle's files of ``release`` (with their index) on a host where the bundle is at ``root``."""
    return "%s/apt/%s" % (root.rstrip("/"), release)


def source_line(root, release):
    """The apt source line that installs from a bundle's files of ``release`` on a host where the bundle is at
    ``root`` (a flat repository over file:, trusted because the manifest listing its index was verified)."""
    return "deb [trusted=yes] file:%s ./" % repo_dir(root, release)


def index_url(root, release):
    """The URL of that flat repository, as the index check reads it (``Packages`` under it)."""
    return "file://%s/" % repo_dir(root, release)


def check_control(fields, package, version, arch):
    """Compare a downloaded file's control fields with apt's plan; return the difference in one sentence or None."""
    got = (fields.get("Package"), fields.get("Version"), fields.get("Architecture"))
    if got != (package, version, arch):
        return "expected %s %s (%s); found %s %s (%s) in the downloaded file" % (package, version, arch, *got)
    return None


def parse_control(text):
    """``dpkg-deb -f FILE`` output as a dict of the fields it printed."""
    fields, key = {}, None
    for line in text.splitlines():
        if line[:1] in (" ", "\t") and key:
            fields[key] += "\n" + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields
