"""Helpers for the mirror tests (plain functions; fixtures live in conftest.py)."""

import json
import os
import shutil
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Shape of SGLang's extend_attention.py after PR #14311 (used when sim/sglang does not have the file yet).
EXTEND_ATTENTION = '''"""Extend attention (stand-in)."""

CUDA_CAPABILITY = (12, 0)
_is_cuda = True
is_hip_ = False


def block_sizes(Lq):
    if is_hip_:
        BLOCK_M, BLOCK_N = (64, 64)
    else:
        if _is_cuda and CUDA_CAPABILITY[0] == 12:
            # sm120 workstation Blackwell architecture (RTX Pro 6000) has a much smaller shared memory size (100K)
            if Lq <= 128:
                BLOCK_M, BLOCK_N = (64, 128)
            elif Lq <= 256:
                BLOCK_M, BLOCK_N = (64, 64)
            else:
                BLOCK_M, BLOCK_N = (32, 32)
        elif _is_cuda and CUDA_CAPABILITY[0] >= 9:
            if Lq <= 256:
                BLOCK_M, BLOCK_N = (128, 64)
            else:
                BLOCK_M, BLOCK_N = (32, 64)
        else:
            BLOCK_M, BLOCK_N = (64, 64)
    return BLOCK_M, BLOCK_N
'''
FIX_FILE = "python/sglang/srt/layers/attention/triton_ops/extend_attention.py"


def sglang_source(tmp: Path) -> Path:
    """A frozen copy of sim/sglang (others may be editing it), or a minimal tree with extend_attention.py."""
    src = tmp / "sglang-src"
    real = ROOT / "sim" / "sglang"
    if (real / FIX_FILE).exists():
        shutil.copytree(real, src, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        return src
    (src / FIX_FILE).parent.mkdir(parents=True)
    (src / FIX_FILE).write_text(EXTEND_ATTENTION)
    (src / "python" / "pyproject.toml").write_text('[project]\nname = "sglang"\nversion = "0.5.9"\n')
    return src


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "HF_", "SIM_", "PYTHON"))}
    env.update(PIP_CONFIG_FILE="/dev/null", PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_CACHE_DIR="1")
    env.update(extra)
    return env


def http(url, method="GET", data=None, headers=None):
    req = urllib.request.Request(url, method=method, data=data, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def control(server, what, method="GET", obj=None):
    data = json.dumps(obj).encode() if obj is not None else None
    status, _, body = http(f"{server['control']}{what}", method, data, {"Content-Type": "application/json"})
    assert status == 200, body
    return json.loads(body)
