"""The stand-in's serving speed: a model, not a measurement.

A request of ``input_len`` prompt tokens and ``output_len`` generated tokens takes, in the stand-in's model,
``ttft_ms`` until its first token and ``itl_ms`` between the next ones. The figures only have to move the way a real
server's do, so that a benchmark gate can be tested without timing anything:

* the base: ``BASE_TTFT_MS`` + ``PREFILL_MS_PER_TOKEN`` per prompt token, and ``BASE_ITL_MS`` per generated token;
* a PCIe link that trained down (the GPU faults file of ``sim/gpu/nvidia-smi``, ``pcie_gen_current`` below the GPU's
  maximum) slows a tensor-parallel server without NVLink: every decode step all-reduces over PCIe. The factor is
  ``1 + LINK_WEIGHT * (max / current - 1)`` for the slowest link of the server's GPUs (Gen5 to Gen2: 1.75);
* the fault ``slow percent=N`` (sim_faults.py; with ``release=`` it plants one build set, with ``model=`` one model
  revision) lowers the output throughput by N percent.

The server reports the model's figures with each /generate answer (``meta_info.sim_timing``), and the stand-in's
``sglang.bench_serving`` computes the benchmark's figures from them; nothing here depends on the machine's speed.
"""

from __future__ import annotations

import json
import os

BASE_TTFT_MS = 20.0
PREFILL_MS_PER_TOKEN = 0.05
BASE_ITL_MS = 12.0
LINK_WEIGHT = 0.5
GPU_FAULTS = "/etc/sim-gpu/faults.json"


def _pcie_gen_max(gpu) -> int:
    return 5 if gpu.capability >= (9, 0) else 4


def link_factor(gpus, tp: int, nvswitch: bool, env=None) -> float:
    """The slow-down of a degraded PCIe link on a TP server without NVLink (1.0 when none applies)."""
    env = os.environ if env is None else env
    if tp <= 1 or nvswitch:
        return 1.0
    try:
        with open(env.get("SIM_GPU_FAULTS") or GPU_FAULTS, encoding="utf-8") as fh:
            planted = json.load(fh).get("pcie_gen_current") or {}
    except (OSError, ValueError, AttributeError):
        return 1.0
    worst = 1.0
    for gpu in gpus[:tp]:
        current = planted.get(str(gpu.index)) if isinstance(planted, dict) else None
        if current:
            worst = max(worst, _pcie_gen_max(gpu) / max(1, int(current)))
    return 1.0 + LINK_WEIGHT * (worst - 1.0)


def slow_factor(faults, model_path: str) -> float:
    """1 / (1 - N/100) for a ``slow percent=N`` fault that applies to this release and model, else 1.0."""
    for f in faults:
        if f.kind == "slow" and f.applies() and f.serves(model_path):
            percent = float(f.params.get("percent", 30))
            return 1.0 / (1.0 - min(max(percent, 0.0), 95.0) / 100.0)
    return 1.0


def timing(input_len: int, *, gpus, tp: int, nvswitch: bool, faults, model_path: str, env=None) -> dict:
    """{ttft_ms, itl_ms} of one request, in the model above."""
    factor = link_factor(gpus, tp, nvswitch, env) * slow_factor(faults, model_path)
    return {
        "ttft_ms": round((BASE_TTFT_MS + PREFILL_MS_PER_TOKEN * input_len) * factor, 3),
        "itl_ms": round(BASE_ITL_MS * factor, 3),
    }
