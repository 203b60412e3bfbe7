"""Debian's own packaging metadata, fetched at build time from the Debian mirror this host's apt sources name.

Used by the stand-ins that must be true to real packaging (sim/mirrors/apt_repo.py: the NVIDIA driver's package
graph; sim/gpu/pci_ids.py: the PCI id database). Nothing here names a registry host: the mirror comes from
/etc/apt/sources.list(.d), or SIM_MIRROR. Downloads are cached under $SIM_CACHE/debian (never in git) and each
file is checked against the SHA256 its index states.
"""

from __future__ import annotations

import glob
import hashlib
import lzma
import os
import re
import subprocess
import tempfile
import urllib.request
from pathlib import Path

DEFAULT_SUITE = "bookworm"


def cache_dir() -> Path:
    d = Path(os.environ.get("SIM_CACHE", "/var/cache/llmops-sim")) / "debian"
    d.mkdir(parents=True, exist_ok=True)
    return d


def host_mirror(suite: str = DEFAULT_SUITE) -> str:
    """The archive URI of this host's apt sources that serves ``suite`` (SIM_MIRROR overrides)."""
    if os.environ.get("SIM_MIRROR"):
        return os.environ["SIM_MIRROR"].rstrip("/")
    entries = []
    for path in ["/etc/apt/sources.list", *sorted(glob.glob("/etc/apt/sources.list.d/*.list"))]:
        try:
            lines = Path(path).read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            words = re.sub(r"\[[^]]*\]", "", line.split("#", 1)[0]).split()
            if len(words) >= 3 and words[0] == "deb":
                entries.append((words[1], [words[2]]))
    for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
        for stanza in re.split(r"\n\s*\n", Path(path).read_text()):
            fields = {}
            for line in stanza.splitlines():
                if line and not line.startswith(("#", " ")) and ":" in line:
                    k, v = line.split(":", 1)
                    fields[k.strip().lower()] = v.split()
            if "deb" in fields.get("types", []) and fields.get("enabled", ["yes"])[0] != "no":
                entries.extend((uri, fields.get("suites", [])) for uri in fields.get("uris", []))
    # The entry that serves the suite, else the one serving the host's own release: a Debian mirror carries all
    # suites (trixie's pci.ids is fetched from the mirror the host uses for bookworm).
    codename = ""
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("VERSION_CODENAME="):
                codename = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    for wanted in (suite, codename):
        for uri, suites in entries:
            if wanted and wanted in suites:
                return uri.rstrip("/")
    raise SystemExit(f"no Debian mirror for {suite} in this host's apt sources; set SIM_MIRROR")


def fetch(url: str, dest: Path, sha256: str | None = None) -> Path:
    """Download ``url`` to ``dest`` once (atomically); verify ``sha256`` when given."""
    if dest.exists() and (sha256 is None or hashlib.sha256(dest.read_bytes()).hexdigest() == sha256):
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    with urllib.request.urlopen(url, timeout=120) as resp:  # the host's own Debian mirror
        data = resp.read()
    if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
        raise SystemExit(f"{url}: SHA256 differs from the index; refusing it")
    fd, tmp = tempfile.mkstemp(dir=dest.parent)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    os.replace(tmp, dest)
    return dest


def parse_stanzas(text: str) -> list[dict]:
    """Debian control stanzas -> dicts (continuation lines joined with newlines)."""
    out = []
    for block in re.split(r"\n\s*\n", text):
        fields, key = {}, None
        for line in block.splitlines():
            if line.startswith((" ", "\t")) and key:
                fields[key] += "\n" + line
            elif ":" in line:
                key, value = line.split(":", 1)
                fields[key] = value.strip()
        if fields.get("Package"):
            out.append(fields)
    return out


def packages_index(suite: str, component: str, arch: str = "amd64", mirror: str | None = None) -> list[dict]:
    """The Packages index of one suite/component/architecture, cached."""
    mirror = mirror or host_mirror(suite)
    rel = f"dists/{suite}/{component}/binary-{arch}/Packages.xz"
    local = cache_dir() / rel
    fetch(f"{mirror}/{rel}", local)
    return parse_stanzas(lzma.decompress(local.read_bytes()).decode("utf-8", "replace"))


def extract_file(stanza: dict, member: str, dest: Path, mirror: str | None = None, suite: str = DEFAULT_SUITE) -> Path:
    """Fetch the .deb a Packages stanza describes (SHA256-checked) and extract one file of it to ``dest``."""
    mirror = mirror or host_mirror(suite)
    deb = cache_dir() / stanza["Filename"]
    fetch(f"{mirror}/{stanza['Filename']}", deb, stanza.get("SHA256"))
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(["dpkg-deb", "-x", str(deb), tmp], check=True)
        src = Path(tmp) / member.lstrip("/")
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp_dest = dest.with_suffix(".tmp")
        tmp_dest.write_bytes(src.read_bytes())
        os.replace(tmp_dest, dest)
    return dest
