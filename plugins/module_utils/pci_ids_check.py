# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Is a downloaded PCI id database fit to name the GPUs? (preflight's pci.ids download)

A captive portal's HTML page, an empty, truncated, oversized or altered file would otherwise change which chip and so
which GPU architecture preflight decides on. ``problem(candidate, installed, max_bytes, sha256)`` returns what is
wrong with ``candidate`` in words (a clause such as "an HTML page"), or None when it:

* is at most ``max_bytes`` bytes and not empty, and matches the ``sha256`` pin when one is given;
* is text in the pci.ids format, not HTML;
* carries NVIDIA's vendor block (``10de  NVIDIA Corporation``) and the device class list that ends the file (a file
  cut short lacks it);
* knows every NVIDIA device the installed database (``installed``, when there is one) knows.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import os
import re

from ansible_collections.llmops.sglang.plugins.module_utils.gpu_inventory import read_pci_ids

NVIDIA_VENDOR_LINE = re.compile(r"^10de  \S", re.MULTILINE)
CLASS_LINE = re.compile(r"^C [0-9a-f]{2}  \S", re.MULTILINE)
DEFAULT_MAX_BYTES = 8 * 1024 * 1024  # Debian trixie's pci.ids (2025) is 1.5 MB


def problem(candidate, installed=None, max_bytes=DEFAULT_MAX_BYTES, sha256=""):
    try:
        size = os.path.getsize(candidate)
    except OSError as exc:
        return "no readable file (%s)" % (exc.strerror or exc)
    if size == 0:
        return "an empty file"
    if size > max_bytes:
        return "%d bytes, more than the %d allowed (preflight_pci_ids_max_bytes)" % (size, max_bytes)
    with open(candidate, "rb") as fh:
        data = fh.read(max_bytes + 1)
    if sha256:
        digest = hashlib.sha256(data).hexdigest()
        if digest != sha256.strip().lower():
            return "sha256 %s, not the pinned %s (preflight_pci_ids_sha256)" % (digest, sha256.strip().lower())
    head = data[:1024].lstrip().lower()
    if head.startswith(b"<") or b"<html" in head or b"<!doctype" in head:
        return "an HTML page (a captive portal or an error page), not the PCI id database"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "binary data, not the text of the PCI id database"
    if not NVIDIA_VENDOR_LINE.search(text):
        return "no NVIDIA vendor block (10de), so it names no NVIDIA GPU"
    if not CLASS_LINE.search(text):
        return "a file cut short (no device class list, which ends the PCI id database)"
    if installed:
        try:
            known = read_pci_ids(installed)
        except OSError:
            known = {}
        new = read_pci_ids(candidate)
        missing = sorted(set(known) - set(new))
        if missing:
            return "%d NVIDIA device(s) fewer than the installed %s knows (e.g. %s)" % (
                len(missing),
                installed,
                ", ".join(missing[:3]),
            )
    return None
