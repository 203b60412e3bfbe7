"""The planner's per-release rules, each checked by hand against the release source cited in sglang_release.py,
sglang_kv.py and sglang_memory.py (file:line of the PyPI wheels): default fraction and its reserves, speculative
decoding, DP attention, the request-to-token table, DSA with the trtllm backend, hybrid models."""

import json

import pytest
from test_sglang_memory import GLM5, LLAMA, STORY

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_kv as kv
from ansible_collections.llmops.sglang.plugins.module_utils import sglang_memory as mem
from ansible_collections.llmops.sglang.plugins.module_utils import sglang_model as model
from ansible_collections.llmops.sglang.plugins.module_utils import sglang_release as rel

RTX = 97887  # RTX PRO 6000, MiB
H100 = 81559
RTX5090 = 32607


@pytest.mark.parametrize(
    ("version", "spec", "expected"),
    [
        # 512 + 8192 x 1.5 + 512 x 2 + 8/8 x 1024 = 14 848 MiB (floor 10 GiB does not bite) -> 0.848
        ("0.5.9", None, 0.848),
        # 0.5.9: piecewise graphs are off by default; speculative +2 GiB, STANDALONE +6 GiB, NGRAM nothing
        ("0.5.9", "EAGLE", round((RTX - 14848 - 2048) / RTX, 3)),
        ("0.5.9", "STANDALONE", round((RTX - 14848 - 6144) / RTX, 3)),
        ("0.5.9", "NGRAM", 0.848),
        # 0.5.10: piecewise on by default, MLA reserves 1.5 GiB; speculative decoding switches it off, +4 GiB
        ("0.5.10", None, round((RTX - 14848 - 1536) / RTX, 3)),
        ("0.5.10", "EAGLE", round((RTX - 14848 - 4096) / RTX, 3)),
        ("0.5.13", "STANDALONE", round((RTX - 14848 - 6144) / RTX, 3)),
        # 0.5.14: prefill graphs (MLA 1.5 GiB), no speculative reserve (the draft pool is inside the budget)
        ("0.5.14", None, round((RTX - 14848 - 1536) / RTX, 3)),
        ("0.5.14", "EAGLE", 0.848),
    ],
)
def test_default_fraction_of_the_reference_card_by_release_and_speculative_algorithm(version, spec, expected):
    assert rel.default_mem_fraction_static(version, RTX, 8, mla=True, speculative=spec) == expected


def test_piecewise_reserve_counts_the_captured_token_sizes_for_dense_models():
    # 0.5.10, H100 TP1: chunked 8192 -> 58 token sizes (8 + 14 + 8 + 8 + 12 + 8) x 8 MiB = 464 MiB
    assert len(rel.prefill_graph_token_sizes(8192)) == 58
    reserved = 512 + 8192 * 1.5 + 256 * 2 + 1024 / 8 + 464
    assert rel.default_mem_fraction_static("0.5.10", H100, 1) == round((H100 - reserved) / H100, 3)
    assert rel.default_mem_fraction_static("0.5.9", H100, 1) == round((H100 - reserved + 464) / H100, 3)
    # PP > 1 switches piecewise graphs off: 512 + 12 288 + 512 + 2 x 2 / 8 x 1024 = 13 824 MiB
    assert rel.default_mem_fraction_static("0.5.10", H100, 2, 2) == round((H100 - 13824) / H100, 3)


def test_small_gpu_defaults_apply_to_every_architecture_from_0520():
    # < 35 GiB: 4096 / 48 from 0.5.20 whatever the arch; 2048 / 24 before (16 in 0.5.3-0.5.4)
    assert rel.default_graph_settings("0.5.20", RTX5090, 1) == (4096, 48)
    assert rel.default_graph_settings("0.5.20", RTX5090, 1, "sm_89") == (4096, 48)
    assert rel.default_graph_settings("0.5.18", RTX5090, 1) == (2048, 24)
    assert rel.default_graph_settings("0.5.4", RTX5090, 1) == (2048, 16)
    assert rel.default_graph_settings("0.5.9", None, 1) == (4096, 160)
    # 0.5.20: 512 + 4096 x 1.5 + 48 x 2 + 128 + 50 prefill sizes x 8 = 7280 MiB
    assert rel.default_mem_fraction_static("0.5.20", RTX5090, 1) == round((RTX5090 - 7280) / RTX5090, 3)


def test_request_to_token_table_by_release():
    # 0.5.9: clamp(tokens / context x 512, 2048, 4096) rows, or --max-running-requests as given
    assert kv.max_num_reqs("0.5.9", 425664, 202752) == 2048
    assert kv.max_num_reqs("0.5.9", 443351, 8192) == 4096
    assert kv.max_num_reqs("0.5.9", 1000, 8192, max_running_requests=300) == 300
    # 0.5.14: at most tokens // 2, and --max-running-requests is per DP worker
    assert kv.max_num_reqs("0.5.14", 1000, 8192) == 500
    assert kv.max_num_reqs("0.5.14", 100000, 8192, max_running_requests=256, dp=2) == 128
    # rows x (context + 4 + draft tokens) x int32
    assert kv.req_to_token_bytes("0.5.9", 425664, 202752) == 2048 * 202756 * 4
    assert kv.req_to_token_bytes("0.5.9", 425664, 202752, draft_tokens=4) == 2048 * 202760 * 4


def test_default_request_table_of_the_reference_model_takes_1_55_gib():
    p = mem.plan(GLM5, mem_fraction_static=0.88, **dict(STORY, max_running_requests=None))
    assert p.req_to_token_gib == pytest.approx(2048 * 202756 * 4 / 2**30)  # 1.55 GiB
    with_64 = mem.plan(GLM5, mem_fraction_static=0.88, **STORY)
    assert with_64.kv_tokens == p.kv_tokens  # the table is not in the budget: same tokens, less headroom
    # both tables are rounded up to 2 MiB segments by the allocator
    seg = 2 * 2**20
    table = [-(-rows * 202756 * 4 // seg) * seg for rows in (2048, 64)]
    assert with_64.avail_after_pool_gib - p.avail_after_pool_gib == pytest.approx((table[0] - table[1]) / 2**30)


def test_speculative_draft_pool_outside_the_budget_up_to_0513():
    base = mem.plan(GLM5, mem_fraction_static=0.88, **STORY)
    p = mem.plan(GLM5, mem_fraction_static=0.88, speculative_algorithm="NEXTN", **STORY)
    # GLM-5 ships one NextN layer (num_nextn_predict_layers); same tokens, a one-layer pool after the graphs
    assert p.draft_layers == 1 and p.kv_tokens == base.kv_tokens
    # one KV buffer and one indexer buffer, each rounded up to 2 MiB segments
    seg = 2 * 2**20
    kv_buf, index_buf = (p.kv_tokens + 64) * 656, (p.kv_tokens + 64 + 1) // 64 * 64 * 132
    assert p.draft_pool_gib == pytest.approx(sum(-(-b // seg) * seg for b in (kv_buf, index_buf)) / 2**30)
    assert p.verdict == "ok"
    assert p.default_mem_fraction_static == round((RTX - 14848 - 2048) / RTX, 3)


def test_speculative_draft_layers_scale_the_cell_from_0514():
    story = dict(STORY, sglang_version="0.5.14")
    base = mem.plan(GLM5, mem_fraction_static=0.88, **story)
    p = mem.plan(GLM5, mem_fraction_static=0.88, speculative_algorithm="EAGLE", **story)
    assert p.cell_bytes_budget == int(base.cell_bytes_budget * (1 + 1 / 78))
    assert p.draft_pool_gib == 0.0
    assert p.kv_tokens < base.kv_tokens
    assert p.kv_tokens == pytest.approx(base.kv_tokens * 78 / 79, rel=0.001)
    # NGRAM has no draft model
    assert mem.plan(GLM5, mem_fraction_static=0.88, speculative_algorithm="NGRAM", **story).kv_tokens == base.kv_tokens


def test_speculative_draft_model_config_gives_the_draft_layers():
    draft = json.loads((LLAMA / "config.json").read_text())
    p = mem.plan(
        LLAMA,
        gpu_mem_mib=H100,
        free_at_start_gib=78.5,
        weights_gib=14.96,
        mem_fraction_static=0.80,
        sglang_version="0.5.14",
        speculative_algorithm="STANDALONE",
        speculative_draft_model=draft,
    )
    # a draft config without num_nextn_predict_layers counts its layers: cell x (1 + 32/32)
    assert p.draft_layers == 32 and p.cell_bytes_budget == 2 * 131072


def test_dp_attention_splits_kv_heads_over_tp_over_dp():
    m = model.model_from_config(LLAMA)
    assert kv.cell_bytes(m, 8, 1, "bf16") == 16384  # 8 kv heads / TP8: 1 per rank
    p = mem.plan(LLAMA, gpu_mem_mib=H100, tp=8, dp=2, free_at_start_gib=78.5, weights_gib=2.0, sglang_version="0.5.9")
    assert p.cell_bytes_budget == 32768 and p.dp == 2  # attention TP 4: 2 kv heads per rank
    # DP attention reserve: 512 x 2 x 3 + 512 x 2 x 1.5 on top of 14 848 - 1024 + 1024 (tp 8)
    reserved = 512 + 8192 * 1.5 + 512 * 2 + 1024 + 512 * 2 * 3 + 512 * 2 * 1.5
    assert p.default_mem_fraction_static == round((H100 - reserved) / H100, 3)


def test_dsa_with_the_trtllm_backend_stores_what_it_budgets():
    p = mem.plan(GLM5, mem_fraction_static=0.88, nsa_backend="trtllm", **STORY)
    assert p.cell_bytes_budget == p.cell_bytes_actual == 78 * (576 + 132)


def test_hybrid_model_sizes_only_full_attention_layers():
    cfg = {
        "architectures": ["Qwen3NextForCausalLM"],
        "num_hidden_layers": 48,
        "num_attention_heads": 16,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "hidden_size": 2048,
        "full_attention_interval": 4,
        "max_position_embeddings": 262144,
    }
    m = model.model_from_config(cfg)
    assert m.attention_layers == 12
    assert kv.cell_bytes(m, 1, 1, "bf16") == 2 * 512 * 12 * 2
    assert any("hybrid model: 12 of 48 layers" in n for n in m.notes)
    swa = dict(cfg, layer_types=["sliding_attention"] * 5 + ["full_attention"], num_hidden_layers=6)
    del swa["full_attention_interval"]
    assert model.model_from_config(swa).attention_layers == 1


def test_an_unknown_architecture_needs_its_attention_family():
    cfg = {"architectures": ["FooForCausalLM"], "num_hidden_layers": 2, "num_attention_heads": 4, "hidden_size": 64}
    with pytest.raises(model.PlanError, match="no SGLang release registers"):
        model.model_from_config(cfg)
    assert model.model_from_config(cfg, attention="mha").family == "mha"
    with pytest.raises(model.PlanError, match="needs kv_lora_rank"):
        model.model_from_config(cfg, attention="mla")
