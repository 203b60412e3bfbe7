"""Runtime half of the simulated CUDA extension: refuse to load on a GPU architecture that was not built.

Copied into the built package by sim_build_backend; reads the node's GPU profile like the simulated nvidia-smi.
"""

import json
import os
import re
from pathlib import Path

BUILD_INFO = json.loads(Path(__file__).with_name("_build_info.json").read_text())


def _gpus():
    try:
        profile = json.loads(Path(os.environ.get("SIM_GPU_PROFILE", "/etc/sim-gpu/profile.json")).read_text())
    except (OSError, ValueError):
        return []
    return profile.get("gpus", [])


def check():
    built = {re.sub(r"\D", "", a) for a in BUILD_INFO["archs"]}
    for gpu in _gpus():
        cap = gpu["compute_cap"].replace(".", "")
        if cap not in built:
            raise ImportError(
                f"{BUILD_INFO['ext_module']}: CUDA error: no kernel image is available for execution on the device "
                f"({gpu['name']} is sm_{cap}; this build has sm_{', sm_'.join(sorted(built, key=int))})"
            )
