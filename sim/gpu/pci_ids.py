#!/usr/bin/env python3
"""The PCI id database from Debian's own ``pci.ids`` package, for tests and the simulated nodes.

Debian 12's package (2023.04) predates Blackwell, so by default the file comes from the package of a newer suite
(SIM_PCI_IDS_SUITE, default trixie) on the Debian mirror this host's apt sources name. Cached under
$SIM_CACHE/debian; prints the path of the extracted pci.ids.

    python3 sim/gpu/pci_ids.py            # fetch once, print the path
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "mirrors"))

import debian_meta

MEMBER = "usr/share/misc/pci.ids"


def path() -> Path:
    suite = os.environ.get("SIM_PCI_IDS_SUITE", "trixie")
    return debian_meta.cache_dir() / f"pci.ids-{suite}" / "pci.ids"


def ensure() -> Path:
    dest = path()
    if dest.is_file():
        return dest
    suite = dest.parent.name.removeprefix("pci.ids-")
    index = debian_meta.packages_index(suite, "main", "all")
    stanza = next((s for s in index if s["Package"] == "pci.ids"), None)
    if stanza is None:
        raise SystemExit(f"Debian {suite} main has no pci.ids package")
    debian_meta.extract_file(stanza, MEMBER, dest, suite=suite)
    (dest.parent / "VERSION").write_text(f"pci.ids {stanza['Version']} ({stanza['Filename']})\n")
    return dest


if __name__ == "__main__":
    print(ensure())
