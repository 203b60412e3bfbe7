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
import re

import pytest
from conftest import PROFILES
from events import wait_until

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


def pool_figures(server, tp: int) -> dict:
    """Per-rank figures once every rank has logged `Memory pool end` (ranks log in their own order)."""

    def ranks():
        alive = server.proc.poll() is None  # before the read: an exit after it still finds every line in the log
        log = sglang_log.StartupLog()
        log.feed(server.log)
        found = log.result()["ranks"]
        if sum(1 for r in found.values() if r["avail_after_pool_gb"] is not None) == tp:
            return found
        assert alive, f"the stand-in exited before every rank reached Memory pool end:\n{server.log}"
        return None

    return wait_until(ranks, f"every rank to reach Memory pool end:\n{server.log[-2000:]}")


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


READY = "The server is fired up and ready to roll!"


def test_the_auto_fraction_is_ready_on_the_first_launch_and_predicted(launch, models, fixed_tree):
    """mem_fraction_static auto on the lab's server (GLM-5-NVFP4, 8 x RTX PRO 6000, --max-running-requests 64): the
    server role launches once at the planner's recommendation (server_policy.choose_first), which survives the
    capture, and the planner's tokens at that fraction are the logged ones within 0.5 %."""
    gpu = json.loads((PROFILES / "rtx-pro-6000-x8.json").read_text())["gpus"][0]
    common = {"gpu_mem_mib": gpu["memory_total_mib"], "tp": 8, "gpu_arch": "sm_120", "sglang_version": "0.5.9",
              "max_running_requests": 64}  # fmt: skip
    auto = sglang_memory.plan(str(models["glm5-nvfp4"]), **common)
    frac = auto.recommended_mem_fraction_static
    assert frac is not None and 0.3 <= frac < 0.95, auto.as_dict()
    at = sglang_memory.plan(str(models["glm5-nvfp4"]), mem_fraction_static=frac, **common)
    server = launch(
        ["--model-path", str(models["glm5-nvfp4"]), "--tp-size", "8", "--mem-fraction-static", str(frac),
         "--max-running-requests", "64"],
        pythonpath=fixed_tree,
    )  # fmt: skip
    assert server.wait_for(READY), server.log[-3000:]
    tokens = {r["kv_tokens"] for r in pool_figures(server, 8).values()}
    assert len(tokens) == 1 and at.kv_tokens == pytest.approx(tokens.pop(), rel=0.005), at.as_dict()


# Speculative decoding, DP attention and a 0.5.14+ release. With a draft model each rank logs a second set of
# "Load weight begin/end", "KV Cache is allocated" and "Memory pool end" lines (the draft runner's) after its target
# graphs; the figures are read here by order (a rank's first line of each kind is the target's, the second the
# draft's), so this test does not depend on how the doctor tells target and draft apart.
_LINE = re.compile(
    r"\[[^\]]*? (?P<rank>(?:DP\d+ )?TP\d+)\] (?:(?P<begin>Load weight begin\. avail mem=(?P<pre>[\d.]+) GB)"
    r"|(?P<end>Load weight end\..*avail mem=(?P<avail>[\d.]+) GB)"
    r"|(?P<kv>KV Cache is allocated\. (?:dtype: \S+, )?#tokens: (?P<tokens>\d+), (?:K size: (?P<k>[\d.]+) GB, "
    r"V size: (?P<v>[\d.]+) GB|KV size: (?P<kvsize>[\d.]+) GB))"
    r"|(?P<pool>Memory pool end\. avail mem=(?P<pool_avail>[\d.]+) GB))"
)


def runner_figures(log: str) -> dict[str, list[dict]]:
    """{rank: [target figures, draft figures...]} from the stand-in's log, in the order the runners logged them."""
    out: dict[str, list[dict]] = {}
    for m in _LINE.finditer(log):
        runs = out.setdefault(m["rank"], [])
        if m["begin"]:
            runs.append({"pre": float(m["pre"])})
        elif m["end"]:
            runs[-1]["avail"] = float(m["avail"])
        elif m["kv"]:
            size = float(m["kvsize"]) if m["kvsize"] else float(m["k"]) + float(m["v"])
            runs[-1].update(tokens=int(m["tokens"]), kv_size=size)
        elif m["pool"]:
            runs[-1]["pool_end"] = float(m["pool_avail"])
    return out


def wait_for(server, predicate):
    def figures():
        alive = server.proc.poll() is None
        found = runner_figures(server.log)
        if predicate(found):
            return found
        assert alive, f"the stand-in exited before the expected lines:\n{server.log[-4000:]}"
        return None

    return wait_until(figures, "the stand-in's expected lines")


SPEC_COMBOS = [
    # id, model, profile, tp, fraction, extra launch args, planner version, planner extras
    ("nextn-0.5.9", "glm5-nvfp4", "rtx-pro-6000-x8.json", 8, 0.88, ["--speculative-algorithm", "NEXTN"], "0.5.9",
     {"speculative_algorithm": "NEXTN"}),
    ("nextn-0.5.14", "glm5-nvfp4", "rtx-pro-6000-x8.json", 8, 0.88,
     ["--speculative-algorithm", "NEXTN", "--sim-log-format", "0.5.14"], "0.5.14", {"speculative_algorithm": "NEXTN"}),
    ("dp-attention", "llama3-8b", "h100-80gb-x8.json", 4, 0.85, ["--dp-size", "2", "--enable-dp-attention"], "0.5.9",
     {"dp": 2}),
    ("plain-0.5.14", "llama3-8b", "rtx-pro-6000-x8.json", 2, 0.80, ["--sim-log-format", "0.5.14"], "0.5.14", {}),
]  # fmt: skip


@pytest.mark.parametrize(
    ("model", "profile", "tp", "frac", "extra", "version", "planner_extra"),
    [c[1:] for c in SPEC_COMBOS],
    ids=[c[0] for c in SPEC_COMBOS],
)
def test_planner_predicts_target_and_draft_pools(  # noqa: PLR0917
    launch, models, fixed_tree, model, profile, tp, frac, extra, version, planner_extra
):
    drafting = "speculative_algorithm" in planner_extra
    server = launch(
        ["--model-path", str(models[model]), "--tp-size", str(tp), "--mem-fraction-static", str(frac), *extra],
        profile=profile,
        pythonpath=fixed_tree,
    )
    need = 2 if drafting else 1
    figures = wait_for(
        server, lambda f: len(f) == tp and all(len(r) >= need and "pool_end" in r[need - 1] for r in f.values())
    )
    target = [runs[0] for runs in figures.values()]
    tokens = {t["tokens"] for t in target}
    assert len(tokens) == 1, figures
    actual = tokens.pop()
    gpu = json.loads((PROFILES / profile).read_text())["gpus"][0]
    fed = sglang_memory.plan(
        str(models[model]),
        gpu_mem_mib=gpu["memory_total_mib"],
        tp=tp,
        mem_fraction_static=frac,
        gpu_arch="sm_" + gpu["compute_cap"].replace(".", ""),
        sglang_version=version,
        free_at_start_gib=min(t["pre"] for t in target),
        free_after_weights_gib=min(t["avail"] for t in target),
        **planner_extra,
    )
    assert fed.kv_tokens == pytest.approx(actual, rel=0.005), (fed.as_dict(), actual)
    if drafting:
        draft = [runs[1] for runs in figures.values()]
        assert {d["tokens"] for d in draft} == {actual}  # the draft pool holds the target's token count
        logged_draft_pool = max(d["kv_size"] for d in draft)
        if tuple(int(x) for x in version.split(".")) < (0, 5, 14):
            # outside the budget: the planner names the draft pool it will need after the target's graphs
            assert fed.draft_pool_gib == pytest.approx(logged_draft_pool, abs=0.01), fed.as_dict()
        else:
            # inside the budget: the cell grew by (1 + draft / target layers), the draft pool is its share
            assert fed.draft_pool_gib == 0.0
            share = fed.kv_pool_gib * fed.draft_layers / (78 + fed.draft_layers)
            assert share == pytest.approx(logged_draft_pool, abs=0.01), fed.as_dict()
