#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: repo_packages
short_description: Check that packages exist at the wanted versions in a flat apt repository, changing nothing
version_added: "0.3.0"
description:
  - Reads the package index (C(Packages.gz), else C(Packages)) of the flat apt repository at O(url), the layout of
    NVIDIA's CUDA repositories (C(deb <url> /)), over HTTP(S) from the host, without apt and without touching apt's
    state, and reports which of O(packages) are not there at the version asked for, with the versions that are.
  - Each package found is followed through its exact-version dependencies (C(Depends) and C(Pre-Depends) of the form
    C(name (= version))) to the other packages of the same index; a dependency on a package the index does not have
    comes from the distribution's archive and is not checked.
  - Uses the proxy apt is configured with (C(Acquire::http::Proxy), C(Acquire::https::Proxy), per-host entries and
    C(DIRECT)) when the environment names none.
  - The roles call it before they write the repository entry, the pin or the blacklist (C(roles/nvidia_repo),
    C(tasks/check.yml)); it never fails on a missing package, it reports (RV(missing)).
  - The index is read as served; apt still verifies the repository's signature when it installs.
options:
  url:
    description: The repository's base URL (what follows C(deb) in the source entry), with or without the final slash.
    type: str
    required: true
  packages:
    description:
      - The packages to look for, as C(apt-get install) takes them - C(name=version), or C(name) for any version.
    type: list
    elements: str
    required: true
  timeout:
    description: Seconds to wait for the repository to answer.
    type: int
    default: 60
  validate_certs:
    description: Check the repository's TLS certificate.
    type: bool
    default: true
extends_documentation_fragment:
  - llmops.sglang.attributes
attributes:
  check_mode:
    details: Reads only (the repository's index over HTTP(S), apt's proxy settings); the same result in check mode.
author:
  - llmops.sglang developers (@llmops)
"""

EXAMPLES = r"""
- name: Check that the driver packages exist in NVIDIA's repository at the pinned version
  llmops.sglang.repo_packages:
    url: https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/
    packages:
      - nvidia-headless-580-open=580.95.05-0ubuntu1
      - cuda-toolkit-12-8
  register: repo
"""

RETURN = r"""
missing:
  description:
    - One text per package that is not in the index at the version asked for, naming the versions that are
      (C(nvidia-driver-cuda 580.95.06-1 (it has 580.95.05-1, 580.105.08-1)), C(cuda-toolkit-14-0 (no such package))),
      and per exact-version dependency that is missing (C(..., which nvidia-driver-cuda 580.95.05-1 depends on,)).
    - Empty when the index could not be read.
  returned: always
  type: list
  elements: str
found:
  description: The packages and exact-version dependencies found, as C(name=version).
  returned: always
  type: list
  elements: str
index_url:
  description: The index that was read (or tried last); a user name and password in the URL are shown as C(***).
  returned: always
  type: str
repository:
  description: O(url) as messages may show it (with a final slash; a user name and password shown as C(***)).
  returned: always
  type: str
unreadable:
  description: Why the index could not be read (C(HTTP Error 404 ...), a timeout, a bad URL), or an empty string.
  returned: always
  type: str
"""

import gzip
import os
import re
import shutil

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import open_url
from ansible_collections.llmops.sglang.plugins.module_utils import apt_index

_SCHEMES = ("http://", "https://", "file://")


def shown(url):
    """The URL without the password (or token) a mirror's URL may carry before its host."""
    return re.sub(r"^([a-z]+://)[^/@]*@", r"\1***@", url)


def read_index(module, base):
    """(text, url, error): the index's text, or '' and the reason."""
    dump = ""
    apt_config = shutil.which("apt-config")
    if apt_config:
        rc, out, _ = module.run_command([apt_config, "dump"])
        dump = out if rc == 0 else ""
    proxy = apt_index.apt_proxy(dump, base)
    scheme = base.split(":", 1)[0]
    use_proxy = proxy != "DIRECT"
    if proxy and proxy != "DIRECT" and not os.environ.get(scheme + "_proxy"):
        os.environ[scheme + "_proxy"] = proxy
    error, url = "", base
    for name in ("Packages.gz", "Packages"):
        url = base + name
        try:
            response = open_url(url, timeout=module.params["timeout"], validate_certs=module.params["validate_certs"],
                                use_proxy=use_proxy, http_agent="llmops.sglang")  # fmt: skip
            body = response.read()
            if name.endswith(".gz"):
                body = gzip.decompress(body)
            return body.decode("utf-8", "replace"), url, ""
        except Exception as e:  # urllib's errors, a timeout, a corrupt gzip: say which and try the next name
            error = str(e).splitlines()[0] if str(e) else type(e).__name__
    return "", url, error


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            packages=dict(type="list", elements="str", required=True),
            timeout=dict(type="int", default=60),
            validate_certs=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    url = module.params["url"].strip()
    if not url.startswith(_SCHEMES) or any(c.isspace() for c in url):
        module.fail_json(msg=f"Expected an http(s) or file URL of an apt repository; found {shown(url)!r}.")
    base = url if url.endswith("/") else url + "/"
    text, index_url, error = read_index(module, base)
    where = {"index_url": shown(index_url), "repository": shown(base)}
    if not text:
        module.exit_json(changed=False, missing=[], found=[], unreadable=error or "the index is empty", **where)
    result = apt_index.check(apt_index.parse(text), module.params["packages"])
    module.exit_json(changed=False, missing=result["missing"], found=result["found"], unreadable="", **where)


if __name__ == "__main__":
    main()
