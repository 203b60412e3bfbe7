"""Unit tests for plugins/module_utils/sglang_memory.py (SGLang's memory arithmetic, reference: sglang.md section c)."""

import json
import struct
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_kv as kv
from ansible_collections.llmops.sglang.plugins.module_utils import sglang_memory as mem
from ansible_collections.llmops.sglang.plugins.module_utils import sglang_model as model
from ansible_collections.llmops.sglang.plugins.module_utils import sglang_release as rel

FIXTURES = Path(__file__).parent / "fixtures" / "models"
GLM5 = FIXTURES / "glm5-like"
LLAMA = FIXTURES / "llama3-8b-like"
GLM47 = FIXTURES / "glm47-like"

# The reference deployment: 8 x RTX PRO 6000 (97 887 MiB), GLM-5-NVFP4, TP8, a main build between 0.5.8 and 0.5.9.
STORY = {
    "gpu_mem_mib": 97887,
    "tp": 8,
    "sglang_version": "0.5.9",
    "gpu_arch": "sm_120",
    "free_at_start_gib": 94.25,
    "weights_gib": 61.05,
    # the run's own flag: the 0.88 launch had --max-running-requests 64 (the 0.95 one had 8: STORY_095)
    "max_running_requests": 64,
}
STORY_095 = dict(STORY, max_running_requests=8)

KIMI_K2 = {
    "architectures": ["DeepseekV3ForCausalLM"],
    "num_hidden_layers": 61,
    "hidden_size": 7168,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 128,
    "v_head_dim": 128,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}


# --------------------------------------------------------------------------------------------------------------------
# The reference story (docs/memory.md)
# --------------------------------------------------------------------------------------------------------------------


def test_story_at_088_reproduces_the_logged_pool():
    p = mem.plan(GLM5, mem_fraction_static=0.88, **STORY)
    # logged: KV Cache is allocated. #tokens: 425664, KV size: 24.37 GB ; Memory pool end. avail mem=8.61 GB
    assert abs(p.kv_tokens - 425664) / 425664 < 0.005
    assert p.kv_tokens % 64 == 0
    assert p.kv_pool_gib == pytest.approx(24.37, abs=0.05)
    assert p.avail_after_pool_gib == pytest.approx(8.61, abs=0.05)
    # no constant for "the rest": a 64-row table (0.048 GiB) and the allocator's rounding of 156 pool tensors + the
    # table (0.16 GiB) are what lies between the KV size and "Memory pool end"
    assert p.req_to_token_gib == pytest.approx(64 * (202752 + 4) * 4 / mem.GIB)
    assert p.allocator_rounding_gib == pytest.approx(0.16, abs=0.01)
    parts = p.kv_pool_gib + p.req_to_token_gib + p.allocator_rounding_gib
    assert p.pool_reserved_gib == pytest.approx(parts, abs=1e-3)
    assert not hasattr(mem, "DEFAULT_POOL_EXTRA_GIB")
    assert p.cuda_graph_batch_sizes[-1] == 64  # captured up to the request table
    assert p.verdict == "ok"
    assert p.kv_cache_dtype == "fp8_e4m3"
    assert p.page_size == 64
    assert p.free_after_weights_gib == pytest.approx(33.20, abs=1e-9)
    # the profiler budgets 708 B/layer, the pool stores 788 B/layer
    assert (p.cell_bytes_budget, p.cell_bytes_actual) == (78 * 708, 78 * 788)
    assert p.kv_budget_gib == pytest.approx(21.89, abs=0.01)


def test_story_logged_token_count_gives_the_logged_pool_size_exactly():
    # (425664 + 64) slots x 78 layers x 788 B = 24.37 GiB ("KV size: 24.37 GB")
    assert (425664 + 64) * kv.cell_bytes(model.model_from_config(GLM5), 8, 1, "fp8_e4m3", "0.5.9") / model.GIB == (
        pytest.approx(24.37, abs=0.005)
    )


def test_story_at_095_dies_in_graph_capture():
    p = mem.plan(GLM5, mem_fraction_static=0.95, **STORY_095)
    assert p.verdict == "oom_cuda_graph"
    # sglang.md: ~554k tokens, a 31.7 GiB pool and ~1.3-1.5 GiB before capture
    assert p.kv_tokens == pytest.approx(554000, rel=0.005)
    assert p.kv_pool_gib == pytest.approx(31.7, abs=0.1)
    assert p.avail_after_pool_gib == pytest.approx(1.34, abs=0.05)
    assert p.cuda_graph_batch_sizes == [1, 2, 4, 8]  # graphs up to the 8-request table, and still too big
    assert p.avail_after_pool_gib < p.cuda_graph_need_gib
    assert p.headroom_gib < 0


def test_story_at_095_with_the_default_request_table_does_not_even_build_the_pool():
    """Without --max-running-requests the table has 2048 rows of 202 756 tokens (1.55 GiB): at 0.95 the pool's
    tensors and the table do not fit next to the weights."""
    p = mem.plan(GLM5, mem_fraction_static=0.95, **dict(STORY, max_running_requests=None))
    assert p.verdict == "oom_kv_pool" and p.avail_after_pool_gib < 0


def test_story_recommendation_is_at_least_the_proven_088():
    p = mem.plan(GLM5, **STORY)
    assert p.recommended_mem_fraction_static >= 0.88
    assert p.recommended_cuda_graph_max_bs is None
    again = mem.plan(GLM5, mem_fraction_static=p.recommended_mem_fraction_static, **STORY)
    assert again.verdict == "ok"
    assert again.avail_after_pool_gib >= again.cuda_graph_need_gib + mem.DEFAULT_MARGIN_GIB
    # one step higher no longer keeps the margin
    higher = mem.plan(GLM5, mem_fraction_static=p.recommended_mem_fraction_static + 0.01, **STORY)
    assert higher.avail_after_pool_gib < higher.cuda_graph_need_gib + mem.DEFAULT_MARGIN_GIB


def test_story_graph_need_lies_in_the_window_the_story_implies():
    # 0.95 (graphs up to bs 8) died with ~1.3 GiB left; 0.88 (graphs up to bs 64) started with 8.61 GiB left
    p = mem.plan(GLM5, mem_fraction_static=0.88, **STORY)
    assert 1.34 < p.cuda_graph_need_gib < 8.6
    assert p.cuda_graph_max_bs == 512
    assert len(p.cuda_graph_batch_sizes) == 12
    small = mem.plan(GLM5, mem_fraction_static=0.95, **STORY_095)
    assert 1.34 < small.cuda_graph_need_gib < p.cuda_graph_need_gib


def test_story_without_fraction_uses_sglang_default_0848():
    p = mem.plan(GLM5, **STORY)
    assert p.mem_fraction_static == 0.848 == p.default_mem_fraction_static
    assert p.verdict == "ok"


def test_story_estimates_free_memory_and_weights_from_card_and_checkpoint():
    p = mem.plan(GLM5, gpu_mem_mib=97887, tp=8, sglang_version="0.5.9", gpu_arch="sm_120", mem_fraction_static=0.88)
    assert p.free_at_start_gib == pytest.approx(94.25, abs=0.01)
    assert p.weights_per_rank_gib == pytest.approx(61.05, abs=1e-6)  # from the index's metadata.total_size
    assert abs(p.kv_tokens - 425664) / 425664 < 0.005
    assert p.verdict == "ok"


def test_measured_free_after_weights_replaces_the_weight_estimate():
    p = mem.plan(
        GLM5,
        gpu_mem_mib=97887,
        tp=8,
        sglang_version="0.5.9",
        gpu_arch="sm_120",
        free_at_start_gib=94.25,
        free_after_weights_gib=33.20,
        mem_fraction_static=0.88,
    )
    assert p.weights_per_rank_gib == pytest.approx(61.05)
    assert p.kv_pool_gib == pytest.approx(24.37, abs=0.1)


def test_0518_budgets_the_real_dsa_cell_so_the_pool_keeps_its_headroom():
    story = dict(STORY, sglang_version="0.5.18")
    p = mem.plan(GLM5, mem_fraction_static=0.88, **story)
    assert p.cell_bytes_budget == p.cell_bytes_actual == 78 * 788
    assert p.kv_pool_gib == pytest.approx(p.kv_budget_gib, abs=0.01)
    # the whole (1 - 0.88) x 94.25 = 11.31 GiB stays free, minus the request table (65 rows from 0.5.11) and the
    # allocator's rounding
    assert p.req_to_token_gib == pytest.approx(65 * (202752 + 4) * 4 / mem.GIB)
    assert p.avail_after_pool_gib == pytest.approx(
        94.25 * 0.12 - p.req_to_token_gib - p.allocator_rounding_gib, abs=0.02
    )


# --------------------------------------------------------------------------------------------------------------------
# Dense GQA models, checked by hand
# --------------------------------------------------------------------------------------------------------------------


def test_llama3_8b_cell_sizes_by_tp():
    m = model.model_from_config(LLAMA)
    assert (m.family, m.num_layers, m.num_kv_heads, m.head_dim, m.v_head_dim) == ("mha", 32, 8, 128, 128)
    # 8 kv heads x (128 + 128) x 32 layers x 2 B = 131072 B/token
    assert kv.cell_bytes(m, 1, 1, "bf16") == 131072
    assert kv.cell_bytes(m, 2, 1, "bf16") == 65536
    assert kv.cell_bytes(m, 8, 1, "bf16") == 16384
    # TP16 > 8 kv heads: each rank keeps one (replicated) head
    assert kv.cell_bytes(m, 16, 1, "bf16") == 16384
    assert kv.cell_bytes(m, 1, 1, "fp8_e4m3") == 65536
    # fp4: half of the 1-byte cell plus one scale byte per 16 K/V elements
    assert kv.cell_bytes(m, 1, 1, "fp4_e2m1") == 32768 + 8 * 128 * 32 * 2 // 16
    # PP2: the biggest stage holds 16 layers
    assert kv.cell_bytes(m, 1, 2, "bf16") == 65536


def test_llama3_8b_plan_by_hand():
    # H100 80 GB, TP1, measured 78.5 GiB free at start, 8.03 B params in bf16 = 14.96 GiB, fraction 0.88:
    #   rest   = (78.5 - 14.96) - 78.5 x 0.12 = 63.54 - 9.42 = 54.12 GiB
    #   tokens = floor(54.12 x 2^30 / 131072) = floor(54.12 x 8192) = 443351          (page size 1)
    #   pool   = (443351 + 1) x 131072 / 2^30 = 54.1201 GiB
    #   table  = 4096 requests (443351 / 8192 x 512, clamped to 4096) x (8192 + 4) x 4 B = 0.12506 GiB
    #   segs   = table 128.06 MiB -> 130 MiB; 64 buffers of (443352 x 8 x 128 x 2) B = 865.92 MiB -> 866 MiB each
    #            (the 0.08 MiB rest of each is below 1 MiB: not split off); free list 3.38 MiB -> a 20 MiB segment
    #   left   = 63.54 - (130 + 64 x 866 + 20) / 1024 = 9.2587 GiB
    #   graphs: max bs 256 -> 36 sizes -> 0.5 + 0.36 + 0.256
    p = mem.plan(
        LLAMA,
        gpu_mem_mib=81559,
        tp=1,
        free_at_start_gib=78.5,
        weights_gib=14.96,
        mem_fraction_static=0.88,
        sglang_version="0.5.9",
        gpu_arch="sm_90",
    )
    assert p.kv_tokens == 443351
    assert p.kv_pool_gib == pytest.approx(54.1201, abs=1e-4)
    assert p.req_to_token_gib == pytest.approx(4096 * 8196 * 4 / 2**30)
    assert p.avail_after_pool_gib == pytest.approx(63.54 - (130 + 64 * 866 + 20) / 1024, abs=1e-3)
    assert p.cuda_graph_max_bs == 256
    assert p.cuda_graph_need_gib == pytest.approx(1.116)
    assert p.verdict == "ok"
    assert p.kv_cache_dtype == "bf16"
    assert p.page_size == 1


def test_glm47_tp8_cell_and_token_count():
    m = model.model_from_config(GLM47)
    # sglang.md c.1: 1 x (128 + 128) x 92 x 2 = 47104 B -> 864214 tokens predicted (864247 logged)
    assert kv.cell_bytes(m, 8, 1, "bf16") == 47104
    # The run's own memory figures are not in the reference; reconstructed inputs that give the same budget:
    # pre_load 139.0 GiB, fraction 0.9 -> slack 13.9 GiB; avail after weights 51.8136 GiB -> rest 37.9136 GiB
    # -> floor(37.9136 x 2^30 / 47104) = 864 246.
    p = mem.plan(
        GLM47,
        tp=8,
        gpu_mem_mib=143771,
        free_at_start_gib=139.0,
        free_after_weights_gib=51.8136,
        mem_fraction_static=0.9,
        sglang_version="0.5.9",
    )
    assert p.kv_tokens == int(37.9136 * model.GIB) // 47104
    assert p.kv_tokens == pytest.approx(864214, abs=50)


def test_mla_cell_kimi_k2_fp8():
    m = model.model_from_config(KIMI_K2)
    assert m.family == "mla"
    # (512 + 64) x 61 layers x 1 B = 35136 B; MLA KV is not split over TP
    assert kv.cell_bytes(m, 8, 1, "fp8_e4m3") == 35136
    assert kv.cell_bytes(m, 1, 1, "fp8_e4m3") == 35136
    assert kv.cell_bytes(m, 8, 1, "bf16") == 70272
    assert kv.default_page_size(m) == 1


def test_dsa_cells_by_dtype_and_version():
    m = model.model_from_config(GLM5)
    assert m.family == "dsa"
    assert kv.cell_bytes(m, 8, 1, "fp8_e4m3", "0.5.9", actual=False) == 78 * (576 + 132)
    assert kv.cell_bytes(m, 8, 1, "fp8_e4m3", "0.5.16", actual=True) == 78 * (656 + 132)
    assert kv.cell_bytes(m, 8, 1, "fp8_e4m3", "0.5.18", actual=False) == 78 * (656 + 132)
    # bf16: no layout difference, index K stays fp8 + scales
    assert kv.cell_bytes(m, 8, 1, "bf16", "0.5.9", actual=False) == 78 * (576 * 2 + 132)
    assert kv.cell_bytes(m, 8, 1, "bf16", "0.5.9", actual=True) == 78 * (576 * 2 + 132)


# --------------------------------------------------------------------------------------------------------------------
# Model description
# --------------------------------------------------------------------------------------------------------------------


def test_model_from_config_glm5():
    m = model.model_from_config(GLM5 / "config.json")
    assert m.architecture == "GlmMoeDsaForCausalLM"
    assert (m.num_layers, m.kv_lora_rank, m.qk_rope_head_dim, m.index_head_dim, m.v_head_dim) == (78, 512, 64, 128, 256)
    assert m.context_length == 202752
    assert m.quantization == "modelopt:NVFP4"
    assert m.dtype == "bf16"


def test_model_from_config_derives_head_dim_and_reads_dicts():
    m = model.model_from_config(
        {"architectures": ["LlamaForCausalLM"], "num_hidden_layers": 2, "hidden_size": 2048, "num_attention_heads": 16}
    )
    assert (m.head_dim, m.num_kv_heads, m.family, m.dtype) == (128, 16, "mha", "bf16")
    m = model.model_from_config(
        {
            "architectures": ["LlamaForCausalLM"],
            "num_hidden_layers": 2,
            "hidden_size": 64,
            "num_attention_heads": 4,
            "torch_dtype": "float16",
        }
    )
    assert m.dtype == "fp16"


def test_deepseek_v32_is_dsa_by_architecture():
    cfg = dict(KIMI_K2, architectures=["DeepseekV32ForCausalLM"], index_topk=2048)
    assert model.model_from_config(cfg).family == "dsa"
    assert model.model_from_config(cfg).index_head_dim == 128


def test_multimodal_config_uses_text_config():
    cfg = {
        "architectures": ["Qwen2VLForConditionalGeneration"],
        "torch_dtype": "bfloat16",
        "text_config": {"num_hidden_layers": 4, "hidden_size": 512, "num_attention_heads": 8, "num_key_value_heads": 2},
    }
    m = model.model_from_config(cfg)
    assert (m.num_layers, m.num_kv_heads, m.head_dim) == (4, 2, 64)
    assert m.notes


def test_missing_config_is_a_clear_error(tmp_path):
    with pytest.raises(mem.PlanError, match="no model config"):
        model.model_from_config(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(mem.PlanError, match="JSON"):
        model.model_from_config(tmp_path)
    with pytest.raises(mem.PlanError, match="num_hidden_layers"):
        model.model_from_config({"architectures": ["LlamaForCausalLM"], "hidden_size": 64})
    with pytest.raises(mem.PlanError, match="names architecture 'FooForCausalLM', which no SGLang release registers"):
        model.model_from_config({"architectures": ["FooForCausalLM"], "num_hidden_layers": 2, "num_attention_heads": 4})


# --------------------------------------------------------------------------------------------------------------------
# KV dtype, TP checks
# --------------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("model", "dtype", "arch", "expected"),
    [
        (GLM5, "auto", "sm_120", "fp8_e4m3"),
        (GLM5, "auto", "sm_100", "fp8_e4m3"),
        (GLM5, "auto", "sm_90", "bf16"),
        (GLM5, "bfloat16", "sm_120", "bf16"),
        (LLAMA, "auto", "sm_120", "bf16"),
        (LLAMA, "fp8", None, "fp8_e4m3"),
        (LLAMA, "float8_e5m2", None, "fp8_e5m2"),
        (LLAMA, "fp4_e2m1", None, "fp4_e2m1"),
        (LLAMA, "fp16", None, "fp16"),
    ],
)
def test_resolve_kv_cache_dtype(model, dtype, arch, expected):
    assert kv.resolve_kv_cache_dtype(model, dtype, arch) == expected


def test_kv_element_bytes():
    assert [kv.kv_element_bytes(d) for d in ("bf16", "bfloat16", "fp16", "fp8_e4m3", "fp8_e5m2")] == [2, 2, 2, 1, 1]
    with pytest.raises(mem.PlanError, match="not known"):
        kv.kv_element_bytes("int3")


@pytest.mark.parametrize(("arch", "cc"), [("sm_120", (12, 0)), ("sm120a", (12, 0)), ("12.0", (12, 0)), ("90", (9, 0))])
def test_parse_gpu_arch(arch, cc):
    assert rel.parse_gpu_arch(arch) == cc


def test_tp_must_divide_heads():
    with pytest.raises(mem.PlanError, match="num_attention_heads"):
        kv.cell_bytes(model.model_from_config(LLAMA), 3, 1, "bf16")
    odd = {
        "architectures": ["LlamaForCausalLM"],
        "num_hidden_layers": 2,
        "hidden_size": 1536,
        "num_attention_heads": 12,
        "num_key_value_heads": 3,
    }
    with pytest.raises(mem.PlanError, match="num_key_value_heads"):
        kv.cell_bytes(model.model_from_config(odd), 4, 1, "bf16")
    with pytest.raises(mem.PlanError, match="num_attention_heads"):
        mem.plan(GLM5, mem_fraction_static=0.88, **dict(STORY, tp=3))


def test_plan_rejects_bad_fraction_and_missing_weights():
    with pytest.raises(mem.PlanError, match=r"\(0, 1\)"):
        mem.plan(GLM5, mem_fraction_static=1.0, **STORY)
    with pytest.raises(mem.PlanError, match="weights per rank unknown"):
        mem.plan(
            {
                "architectures": ["LlamaForCausalLM"],
                "num_hidden_layers": 2,
                "hidden_size": 64,
                "num_attention_heads": 4,
            },
            gpu_mem_mib=24000,
            sglang_version="0.5.9",
        )
    with pytest.raises(mem.PlanError, match=r"no model\.safetensors\.index\.json"):
        mem.plan(LLAMA, gpu_mem_mib=81559, sglang_version="0.5.9")
    with pytest.raises(mem.PlanError, match=r"^which SGLang\? expected a version"):
        mem.plan(GLM5, mem_fraction_static=0.88, **dict(STORY, sglang_version=None))


# --------------------------------------------------------------------------------------------------------------------
# Weights from the checkpoint
# --------------------------------------------------------------------------------------------------------------------


def _write_safetensors(path, tensors):
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, nbytes in tensors.items():
        header[name] = {"dtype": "BF16", "shape": [nbytes // 2], "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * offset)


def test_weights_from_safetensors_headers(tmp_path):
    (tmp_path / "config.json").write_text((LLAMA / "config.json").read_text())
    _write_safetensors(tmp_path / "model-00001-of-00002.safetensors", {"a": 12, "b": 8})
    _write_safetensors(tmp_path / "model-00002-of-00002.safetensors", {"c": 100})
    assert model.safetensors_data_bytes(tmp_path / "model-00002-of-00002.safetensors") == 100
    assert model.checkpoint_weight_bytes(tmp_path) == 120
    assert model.weights_per_rank_gib(120 * model.GIB, tp=4, pp=2) == pytest.approx(15.0)


def test_weights_prefer_the_index_total_size(tmp_path):
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 4096}}))
    _write_safetensors(tmp_path / "model.safetensors", {"a": 12})
    assert model.checkpoint_weight_bytes(tmp_path) == 4096
    assert model.checkpoint_weight_bytes(GLM5) == round(61.05 * 8 * model.GIB)


def test_broken_safetensors_header(tmp_path):
    bad = tmp_path / "model.safetensors"
    bad.write_bytes(struct.pack("<Q", 10**9) + b"{}")
    with pytest.raises(mem.PlanError, match="header length"):
        model.checkpoint_weight_bytes(tmp_path)


# --------------------------------------------------------------------------------------------------------------------
# SGLang defaults: fraction, graph batch sizes
# --------------------------------------------------------------------------------------------------------------------


def test_default_fraction_rtx_pro_6000_tp8_059():
    # chunked 8192, max bs 512: reserved = 512 + 12288 + 1024 + 1024 = 14848 MiB -> (97887 - 14848) / 97887
    assert rel.default_mem_fraction_static("0.5.9", 97887, tp=8) == 0.848
    assert rel.default_graph_settings("0.5.9", 97887, tp=8) == (8192, 512)


@pytest.mark.parametrize(
    ("version", "gpu", "tp", "expected"),
    [
        ("0.2.7", 81559, 8, 0.83),
        ("0.3.6", 81559, 8, 0.82),
        ("0.4.5", 81559, 8, 0.81),
        ("0.4.5", 81559, 16, 0.79),
        ("0.4.5", 81559, 4, 0.85),
        ("0.4.5", 81559, 2, 0.87),
        ("0.4.5", 81559, 1, 0.88),
        ("0.4.6", 81559, 1, 0.88),  # <= 80 GiB keeps the table
        ("0.4.6", 97887, 1, round((97887 - 13 * 1024) / 97887, 3)),
        ("0.4.7", 81920, 8, 0.81),
        ("0.5.2", 81559, 1, round((81559 - 10 * 1024) / 81559, 3)),  # 9.5 + 1/2 GiB
        ("0.5.2", 24564, 1, round((24564 - 2.9 * 1024) / 24564, 3)),
        ("0.5.9", None, 1, 0.88),
        ("0.5.20", None, 1, 0.95),
        ("0.5.9", 81559, 1, round((81559 - (512 + 12288 + 512 + 128)) / 81559, 3)),
        # small GPU: reserved below the 10 GiB floor (which applies only above 60 GiB)
        ("0.5.9", 24564, 1, round((24564 - (512 + 3072 + 48 + 128)) / 24564, 3)),
    ],
)
def test_default_fraction_by_version(version, gpu, tp, expected):
    assert rel.default_mem_fraction_static(version, gpu, tp=tp) == expected


def test_default_fraction_10_gib_floor_above_60_gib():
    # small explicit chunk and graph sizes: reserved 512 + 3072 + 16 + 128 = 3728 MiB, raised to 10 GiB
    frac = rel.default_mem_fraction_static("0.5.9", 65536, tp=1, chunked_prefill_size=2048, cuda_graph_max_bs=8)
    assert frac == round((65536 - 10240) / 65536, 3)


def test_default_fraction_speculative_and_0520_blackwell_class():
    base = rel.default_mem_fraction_static("0.5.9", 97887, tp=8)
    assert rel.default_mem_fraction_static("0.5.9", 97887, tp=8, speculative="eagle") == round(
        (97887 - 14848 - 2048) / 97887, 3
    )
    assert rel.default_mem_fraction_static("0.5.9", 97887, tp=8, speculative="standalone") < base
    assert rel.default_graph_settings("0.5.20", 32607, tp=1, gpu_arch="sm_120") == (4096, 48)
    assert rel.default_graph_settings("0.5.9", 32607, tp=1, gpu_arch="sm_120") == (2048, 24)


def test_cuda_graph_batch_sizes():
    full = rel.cuda_graph_batch_sizes(512)
    assert full[:6] == [1, 2, 4, 8, 12, 16]
    assert len(full) == 52 and full[-1] == 512
    assert len(rel.cuda_graph_batch_sizes(256)) == 36
    assert rel.cuda_graph_batch_sizes(100)[-1] == 96
    assert rel.cuda_graph_batch_sizes(640)[-5:] == [512, 544, 576, 608, 640]
    assert rel.cuda_graph_batch_sizes(8, disable_padding=True) == list(range(1, 9))


def test_graph_need_model_matches_logged_figures():
    # 0.93 GB (13 sizes), 1.0 GB (36 sizes, bs 256), 1.44 GB (52 sizes, bs 512): the model stays within 0.25 GiB
    assert mem.cuda_graph_need_gib(rel.cuda_graph_batch_sizes(72)) == pytest.approx(0.93, abs=0.25)
    assert mem.cuda_graph_need_gib(rel.cuda_graph_batch_sizes(256)) == pytest.approx(1.0, abs=0.25)
    assert mem.cuda_graph_need_gib(rel.cuda_graph_batch_sizes(512)) == pytest.approx(1.44, abs=0.25)
    assert mem.cuda_graph_need_gib([]) == 0.0


def test_disable_cuda_graph_needs_no_capture_memory():
    p = mem.plan(GLM5, mem_fraction_static=0.95, disable_cuda_graph=True, **STORY)
    assert p.cuda_graph_need_gib == 0.0
    assert p.verdict == "ok"


# --------------------------------------------------------------------------------------------------------------------
# Other verdicts and the graph-bs recommendation
# --------------------------------------------------------------------------------------------------------------------


def test_oom_weights_and_oom_kv_pool():
    p = mem.plan(GLM5, mem_fraction_static=0.88, **dict(STORY, weights_gib=95.0))
    assert p.verdict == "oom_weights"
    assert p.kv_tokens == 0
    p = mem.plan(GLM5, mem_fraction_static=0.5, **STORY)
    assert p.verdict == "oom_kv_pool"  # 33.2 - 94.25 x 0.5 < 0
    # budget > 0 but the 11 % bigger pool no longer fits next to the weights
    p = mem.plan(GLM5, mem_fraction_static=0.99, **STORY)
    assert p.verdict == "oom_kv_pool"


def test_max_total_tokens_caps_the_pool():
    p = mem.plan(GLM5, mem_fraction_static=0.88, max_total_tokens=100000, **STORY)
    assert p.kv_tokens == 100000 // 64 * 64


def test_recommends_a_smaller_graph_batch_when_no_fraction_fits():
    # 20 GiB free at start, 14.96 GiB weights, capture measured at 4 GiB for bs 256: no fraction keeps >= 8192 tokens
    # and 5 GiB of headroom, so the planner lowers cuda_graph_max_bs.
    p = mem.plan(
        LLAMA,
        gpu_mem_mib=24564,
        free_at_start_gib=20.0,
        weights_gib=14.96,
        cuda_graph_max_bs=256,
        cuda_graph_need=4.0,
        sglang_version="0.5.9",
    )
    assert p.recommended_cuda_graph_max_bs is not None
    assert p.recommended_cuda_graph_max_bs < 256
    assert p.recommended_cuda_graph_max_bs in rel.cuda_graph_batch_sizes(256)
    assert p.recommended_mem_fraction_static >= 0.79


def test_no_recommendation_when_nothing_fits():
    p = mem.plan(LLAMA, gpu_mem_mib=24564, free_at_start_gib=16.0, weights_gib=14.96, sglang_version="0.5.9")
    assert p.recommended_mem_fraction_static is None
    assert any("no fraction" in n for n in p.notes)


def test_plan_as_dict_key_order():
    d = mem.plan(GLM5, mem_fraction_static=0.88, **STORY).as_dict()
    assert list(d)[:7] == [
        "kv_tokens",
        "kv_pool_gib",
        "avail_after_pool_gib",
        "cuda_graph_need_gib",
        "verdict",
        "recommended_mem_fraction_static",
        "recommended_cuda_graph_max_bs",
    ]
    json.dumps(d)


# --------------------------------------------------------------------------------------------------------------------
# Advice after a failed start-up (capture OOM, KV OOM)
# --------------------------------------------------------------------------------------------------------------------

# The reference 0.95 attempt as SGLang logged it (tests/unit/fixtures/logs/v0_5_9_glm5_capture_oom.log, TP3):
# Load weight begin 94.20, Load weight end 33.20, KV size 31.70, capture begin 1.50, "Tried to allocate 1.25 GiB ...
# of which 982.00 MiB is free", cuda_graph_max_bs=512.
STORY_OOM = dict(
    pre_load_free_gib=94.20,
    capture_free_gib=1.50,
    mem_fraction_static=0.95,
    tried_to_allocate_gib=1.25,
    free_at_oom_gib=982 / 1024,
    free_after_weights_gib=33.20,
    kv_pool_gib=31.70,
    cuda_graph_max_bs=512,
    family="dsa",
)


def test_capture_oom_advice_for_the_reference_attempt_is_092_and_the_plan_at_092_fits():
    a = mem.capture_oom_advice(**STORY_OOM)
    assert a.mem_fraction_static == 0.92 and a.cuda_graph_max_bs is None
    # the need is at least what capture used and then asked for: (1.50 - 0.96) + 1.25
    assert a.need_estimate_gib == pytest.approx(1.5 * (1.50 - 982 / 1024 + 1.25))
    # the pool ratio comes from the log itself: 31.70 / (33.20 - 94.20 x 0.05) = the 788/708 B/layer of DSA fp8
    assert a.pool_ratio == pytest.approx(788 / 708, rel=0.002)
    # the planner agrees: at 0.92 the left-over memory holds the advice's requirement and the verdict is ok
    retry = mem.plan(GLM5, mem_fraction_static=a.mem_fraction_static, **STORY_095)
    assert retry.verdict == "ok"
    assert retry.avail_after_pool_gib >= a.required_avail_gib
    # the planner, which knows the graphs stop at bs 8, allows one hundredth more than the log-only advice
    assert mem.plan(GLM5, mem_fraction_static=0.95, **STORY_095).recommended_mem_fraction_static == 0.93


def test_capture_oom_advice_is_reproduced_from_its_own_inputs():
    a = mem.capture_oom_advice(**STORY_OOM)
    assert mem.capture_oom_advice(**a.inputs) == a
    json.dumps(a.as_dict())


def test_capture_oom_advice_ignores_pool_ratios_that_are_not_one_attempts():
    # KV size larger than twice the budget: figures from different attempts; the ratio falls back to 1
    a = mem.capture_oom_advice(**dict(STORY_OOM, kv_pool_gib=80.0))
    assert a.pool_ratio == 1.0


def test_capture_oom_advice_always_steps_down():
    a = mem.capture_oom_advice(
        pre_load_free_gib=94.25, capture_free_gib=5.0, mem_fraction_static=0.9, observed_need_gib=0.5, margin_gib=0
    )
    assert a.mem_fraction_static == 0.89
    assert a.alternative_cuda_graph_max_bs == 496  # the failed fraction with the next smaller graph size list


def test_capture_oom_advice_lowers_graph_bs_at_the_floor():
    a = mem.capture_oom_advice(
        pre_load_free_gib=94.25,
        capture_free_gib=1.27,
        mem_fraction_static=0.95,
        observed_need_gib=3.03,
        cuda_graph_max_bs=512,
        family="dsa",
        margin_gib=0.2,
        min_fraction=0.94,
    )
    assert a.mem_fraction_static == 0.94
    assert a.cuda_graph_max_bs is not None and a.cuda_graph_max_bs < 512
    # the KV pool must stay positive: free after weights bounds the fraction from below
    a = mem.capture_oom_advice(
        pre_load_free_gib=94.25,
        capture_free_gib=1.27,
        mem_fraction_static=0.95,
        observed_need_gib=100.0,
        free_after_weights_gib=33.2,
    )
    assert a.mem_fraction_static is None and a.cuda_graph_max_bs is None
    assert "disable CUDA graphs" in a.reason


@pytest.mark.parametrize(
    "override, message",
    [
        ({"mem_fraction_static": 1.5}, "mem_fraction_static must be in (0, 1), got 1.5"),
        ({"pre_load_free_gib": float("nan")}, "pre_load_free_gib must be a finite number, got nan"),
        ({"capture_free_gib": float("inf")}, "capture_free_gib must be a finite number, got inf"),
        ({"pre_load_free_gib": 0}, "pre_load_free_gib must be > 0, got 0"),
        ({"tried_to_allocate_gib": "x"}, "tried_to_allocate_gib must be a number, got 'x'"),
    ],
)
def test_capture_oom_advice_rejects_bad_figures(override, message):
    with pytest.raises(mem.PlanError) as err:
        mem.capture_oom_advice(**dict(STORY_OOM, **override))
    assert str(err.value) == message


def test_kv_oom_advice_raises_the_fraction_above_the_zero_budget_point():
    a = mem.kv_oom_advice(pre_load_free_gib=94.2, free_after_weights_gib=20.0, mem_fraction_static=0.7, tp_size=8)
    # budget 20.0 - 94.2 x (1 - f) is zero at f = 0.7877; + 0.03 -> 0.8177 -> 0.82
    assert a.action == "raise_mem_fraction_static"
    assert a.minimum_fraction == pytest.approx(1 - 20.0 / 94.2)
    assert a.mem_fraction_static == 0.82
    measured = dict(gpu_mem_mib=97887, free_at_start_gib=94.2, free_after_weights_gib=20.0, sglang_version="0.5.9")
    assert mem.plan(LLAMA, mem_fraction_static=0.82, **measured).kv_tokens > 0
    assert mem.plan(LLAMA, mem_fraction_static=0.78, **measured).verdict == "oom_kv_pool"


def test_kv_oom_advice_uses_sglangs_logged_minimum_and_asks_for_gpus_when_no_fraction_is_sane():
    a = mem.kv_oom_advice(logged_min_fraction=0.8123, mem_fraction_static=0.8)
    assert (a.action, a.mem_fraction_static) == ("raise_mem_fraction_static", 0.85)
    a = mem.kv_oom_advice(pre_load_free_gib=94.2, free_after_weights_gib=3.0, tp_size=8)
    assert a.action == "add_gpus" and a.tp_size == 16 and "--tp-size 16" in a.reason
    with pytest.raises(mem.PlanError):
        mem.kv_oom_advice(pre_load_free_gib=94.2)
