# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Print the virtualenv's NCCL wheel as JSON: {"dist": "nvidia-nccl-cu12", "version": "2.27.5"}, or null when none
is installed (torch then loads the host's libnccl).

Run by the llmops.sglang.python_env role with the service virtualenv's Python after torch is installed; the gpu_compat
filter's venv scope holds the floor per GPU architecture (plugins/module_utils/gpu_compat.py). The wheel is the one
torch's own wheel requires (PyPI metadata: torch 2.9.1 requires nvidia-nccl-cu12==2.27.5) and loads libnccl from.
With two installed (cu12 and cu13), the one torch's metadata requires. Standard library only.
"""

import importlib.metadata as md
import json
import re


def nccl_wheel():
    found = []
    for dist in md.distributions():
        name = str(dist.metadata.get("Name") or "")
        if re.fullmatch(r"nvidia[-_.]nccl[-_.]cu[0-9]+", name, re.IGNORECASE):
            found.append({"dist": name, "version": dist.version})
    try:
        torch_requires = " ".join(md.requires("torch") or []).lower()
    except md.PackageNotFoundError:
        torch_requires = ""
    found.sort(key=lambda d: (re.sub(r"[-_.]+", "-", d["dist"].lower()) in torch_requires, d["dist"]))
    return found[-1] if found else None


if __name__ == "__main__":
    print(json.dumps(nccl_wheel()))
