"""The planner (plugins/module_utils/sglang_memory) and the SGLang stand-in (sim/sglang) are two independent
implementations of SGLang's KV-pool arithmetic (reference §c). Their agreement only means something because neither
imports the other: the stand-in's log is read with the project's own parser (sglang_log), and the planner predicts
from the model directory and the GPU profile.

For every combination the planner, given the free memory the log states at `Load weight begin` (how the planner is
fed after a real start-up), must predict the logged #tokens within 0.5 %; on the calibrated sm_120 profile it must
also do so from first principles (its own context-overhead estimate).
"""

from __future__ import annotations

import json
import time

import pytest
from conftest import PROFILES

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_log, sglang_memory

COMBOS = [
    # model, profile, tp, mem_fraction_static
    ("glm5-nvfp4", "rtx-pro-6000-x8.json", 8, 0.88),
    ("glm5-nvfp4", "rtx-pro-6000-x8.json", 8, 0.84),
    ("llama3-8b", "rtx-pro-6000-x8.json", 1, 0.88),
    ("llama3-8b", "rtx-pro-6000-x8.json", 2, 0.80),
    ("llama3-8b", "h100-80gb-x8.json", 4, 0.85),
    ("glm5-nvfp4", "h100-80gb-x8.json", 8, 0.90),
]


def pool_figures(server, tp: int, timeout: float = 30) -> dict:
    """Per-rank figures once every rank has logged `Memory pool end` (ranks log in their own order)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        log = sglang_log.StartupLog()
        log.feed(server.log)
        ranks = log.result()["ranks"]
        if sum(1 for r in ranks.values() if r["avail_after_pool_gb"] is not None) == tp:
            return ranks
        time.sleep(0.1)
    raise AssertionError(f"not every rank reached Memory pool end:\n{server.log}")


@pytest.mark.parametrize(
    ("model", "profile", "tp", "frac"), COMBOS, ids=[f"{m}-{p[:4]}-tp{t}-{f}" for m, p, t, f in COMBOS]
)
def test_planner_predicts_the_logged_kv_tokens(launch, models, fixed_tree, model, profile, tp, frac):  # noqa: PLR0917
    server = launch(
        ["--model-path", str(models[model]), "--tp-size", str(tp), "--mem-fraction-static", str(frac)],
        profile=profile,
        pythonpath=fixed_tree,
    )
    ranks = pool_figures(server, tp)
    assert len(ranks) == tp
    tokens = {r["kv_tokens"] for r in ranks.values()}
    assert len(tokens) == 1, ranks  # every rank sizes the same pool
    actual = tokens.pop()

    gpu = json.loads((PROFILES / profile).read_text())["gpus"][0]
    sm = "sm_" + gpu["compute_cap"].replace(".", "")
    common = {
        "gpu_mem_mib": gpu["memory_total_mib"],
        "tp": tp,
        "mem_fraction_static": frac,
        "gpu_arch": sm,
        "sglang_version": "0.5.9",
    }
    free_at_start = min(r["avail_after_weights_gb"] + r["weights_gb"] for r in ranks.values())
    fed = sglang_memory.plan(str(models[model]), free_at_start_gib=free_at_start, **common)
    assert fed.kv_tokens == pytest.approx(actual, rel=0.005), (fed.as_dict(), actual)

    if sm == "sm_120":
        predicted = sglang_memory.plan(str(models[model]), **common)
        assert predicted.kv_tokens == pytest.approx(actual, rel=0.005), (predicted.as_dict(), actual)
