"""Unit tests of the stand-in's memory arithmetic (sglang/srt/sim_memory.py)."""

from __future__ import annotations

import pytest
from sglang.srt import sim_memory as sm

GIB = 1 << 30
MIB = 1 << 20
RTX_MIB = 97887
H100_MIB = 81559
GLM5_TOTAL = 524_372_705_280
LLAMA_TOTAL = 16_060_522_496

GLM5 = sm.ModelShape(
    architecture="GlmMoeDsaForCausalLM",
    attention="dsa",
    num_layers=78,
    hidden_size=6144,
    num_attention_heads=64,
    num_kv_heads=1,
    head_dim=256,
    v_head_dim=256,
    kv_lora_rank=512,
    qk_rope_head_dim=64,
    qk_nope_head_dim=192,
    index_head_dim=128,
    context_len=202752,
)
LLAMA = sm.ModelShape(
    architecture="LlamaForCausalLM",
    attention="mha",
    num_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_kv_heads=8,
    head_dim=128,
    v_head_dim=128,
    context_len=8192,
)


def glm5_plan(frac: float, **kw) -> sm.GroupPlan:
    return sm.plan_group(
        GLM5,
        [sm.GpuMem(RTX_MIB * MIB)] * 8,
        tp_size=8,
        weights_total_bytes=GLM5_TOTAL,
        mem_fraction_static=frac,
        kv_cache_dtype="fp8_e4m3",
        page_size=64,
        cuda_graph_bs=sm.default_cuda_graph_bs(512),
        **kw,
    )


def test_calibration_088():
    """The reference story's second launch: 0.88 with --max-running-requests 64."""
    plan = glm5_plan(0.88, max_running_requests=64)
    r = plan.ranks[0]
    assert r.free_pre_load / GIB == pytest.approx(94.25, abs=0.01)
    assert r.weights / GIB == pytest.approx(61.05, abs=0.01)
    assert r.free_after_weights / GIB == pytest.approx(33.2, abs=0.02)
    assert plan.max_total_num_tokens == pytest.approx(425664, rel=0.005)
    assert plan.max_total_num_tokens == 425664
    assert r.pool_total / GIB == pytest.approx(24.37, abs=0.1)
    assert f"{r.pool_total / GIB:.2f}" == "24.37"
    # logged 8.61: the 64-row request table and every tensor's allocator segments, no constant for the rest
    assert r.free_after_pool / GIB == pytest.approx(8.61, abs=0.05)
    assert r.req_table == 64 * (202752 + 4) * 4
    assert not plan.capture_oom and r.capture_oom is None
    assert all(x.max_total_num_tokens == 425664 for x in plan.ranks)
    # the budget is 708 B/layer but the pool is 788 B/layer (+ page slots)
    assert r.cell == 78 * 708
    assert 425664 * 78 * 708 / GIB == pytest.approx(21.89, abs=0.01)
    assert r.pool_total == (425664 + 64) * 78 * 788


def test_calibration_095_capture_oom():
    """The reference story's first launch: 0.95 with --max-running-requests 8 died in CUDA-graph capture."""
    plan = glm5_plan(0.95, max_running_requests=8)
    r = plan.ranks[0]
    assert plan.max_total_num_tokens == pytest.approx(554000, rel=0.01)
    assert r.pool_total / GIB == pytest.approx(31.7, abs=0.05)
    assert 1.0 < r.free_after_pool / GIB < 1.6  # "about 1.5 GB left after the pool"
    assert plan.capture_bs == [1, 2, 4, 8]  # cut at the 8-request table
    assert r.graph_need > r.free_after_pool
    assert plan.capture_oom
    oom = r.capture_oom
    assert oom.bs == 8 and oom.alloc > oom.free


def test_095_with_the_default_request_table_fails_building_the_pool():
    """Without --max-running-requests SGLang sizes the table for 2048 requests (1.55 GiB at 202 756 tokens): at 0.95
    the pool's last tensors no longer fit."""
    plan = glm5_plan(0.95)
    r = plan.ranks[0]
    assert plan.max_num_reqs == 2048 and r.req_table / GIB == pytest.approx(1.55, abs=0.01)
    assert plan.pool_oom and r.pool_oom.alloc > r.pool_oom.free and not plan.capture_oom


def test_each_pool_tensor_is_rounded_by_the_allocator():
    """78 KV buffers of 279 277 568 B and 78 indexer buffers of 56 196 096 B (0.88, 425 664 tokens) each take whole
    2 MiB segments: 1 740 800 + 427 008 B more per layer than the logged "KV size" counts."""
    plan = glm5_plan(0.88, max_running_requests=64)
    r = plan.ranks[0]
    tensors = sm.pool_tensors(GLM5, 8, "fp8_e4m3", 425664, page_size=64)
    assert tensors == [425728 * 656] * 78 + [6652 * 64 * 132] * 78
    assert sum(tensors) == r.pool_total
    req = -(-r.req_table // (2 * MIB)) * 2 * MIB
    free_list = 2 * MIB  # 6651 pages x 8 B: one small segment
    assert r.pool_reserved == req + 78 * (281_018_368 + 56_623_104) + free_list
    assert r.pool_reserved - r.pool_total - r.req_table == pytest.approx(0.16 * GIB, abs=0.01 * GIB)


def test_glm5_graph_need_range():
    """Inside the bounds of the reference story: more than the ~1.34 GiB the 0.95 launch had for graphs of at most bs
    8, less than the 8.61 GiB the 0.88 launch (graphs up to bs 64) started with."""
    small = sm.graph_memory(GLM5, sm.capture_batch_sizes(sm.default_cuda_graph_bs(512), 8), sm.Overheads())
    story = sm.graph_memory(GLM5, sm.capture_batch_sizes(sm.default_cuda_graph_bs(512), 64), sm.Overheads())
    assert 1.34 * GIB < small < story < 8.6 * GIB
    # grows with the captured batch sizes
    assert story < sm.graph_memory(GLM5, sm.default_cuda_graph_bs(512), sm.Overheads())


def test_default_mem_fraction_rtx_pro_6000_tp8():
    chunked, max_bs = sm.default_chunked_prefill_and_graph_bs(RTX_MIB, 8)
    assert (chunked, max_bs) == (8192, 512)
    # reserved = 512 + 8192*1.5 + 512*2 + 8/8*1024 = 14848 MiB
    assert sm.default_mem_fraction_static(RTX_MIB, 8, 1, chunked, max_bs) == 0.848
    assert sm.default_mem_fraction_static(None, 8, 1, chunked, max_bs) == 0.88


def test_default_mem_fraction_h100_tp1():
    chunked, max_bs = sm.default_chunked_prefill_and_graph_bs(H100_MIB, 1)
    assert (chunked, max_bs) == (8192, 256)
    reserved = 512 + 8192 * 1.5 + 256 * 2 + 1 / 8 * 1024
    assert sm.default_mem_fraction_static(H100_MIB, 1, 1, chunked, max_bs) == round((H100_MIB - reserved) / H100_MIB, 3)
    assert sm.default_mem_fraction_static(H100_MIB, 1, 1, chunked, max_bs) == 0.835


def test_dense_gqa_by_hand():
    """Llama-3-8B on one H100 at 0.85, computed step by step without the module's helpers."""
    plan = sm.plan_group(
        LLAMA,
        [sm.GpuMem(H100_MIB * MIB)],
        tp_size=1,
        weights_total_bytes=LLAMA_TOTAL,
        mem_fraction_static=0.85,
        kv_cache_dtype="auto",
        page_size=1,
        cuda_graph_bs=sm.default_cuda_graph_bs(256),
    )
    pre_load = (H100_MIB - 1088) * MIB  # CUDA context; no NCCL buffers at world size 1
    avail = pre_load - LLAMA_TOTAL
    rest_gib = avail / GIB - pre_load / GIB * (1 - 0.85)
    cell = 8 * (128 + 128) * 32 * 2  # kv heads * (k + v head dim) * layers * bf16
    assert cell == 131072
    tokens = int(rest_gib * GIB) // cell
    assert plan.max_total_num_tokens == tokens
    r = plan.ranks[0]
    assert r.pool_k == (tokens + 1) * 8 * 128 * 32 * 2
    assert r.pool_v == r.pool_k
    # the table (4096 requests of 8192 + 4 tokens), 64 tensors of 869.7 MB rounded to 2 MiB, the free list (3.4 MB in
    # a 20 MiB segment)
    table = -(-4096 * 8196 * 4 // (2 * MIB)) * 2 * MIB
    per_tensor = -(-(tokens + 1) * 8 * 128 * 2 // (2 * MIB)) * 2 * MIB
    assert r.free_after_pool == avail - table - 64 * per_tensor - 20 * MIB
    # 78.59 GiB free at start, 63.63 after 14.96 GiB of weights, rest 51.84 GiB, 128 KiB per token
    assert tokens == 424670
    assert f"{r.pool_k / GIB:.2f}" == "25.92"


def test_gqa_heads_replicated_when_tp_exceeds_kv_heads():
    assert sm.kv_heads_per_rank(LLAMA, 16) == 1
    assert sm.cell_size(LLAMA, 16, "auto") == 1 * 256 * 32 * 2
    assert sm.cell_size(LLAMA, 4, "fp8_e4m3") == 2 * 256 * 32 * 1


def test_mla_and_dsa_cells():
    mla = sm.ModelShape("DeepseekV3ForCausalLM", "mla", 61, 7168, 64, kv_lora_rank=512, qk_rope_head_dim=64)
    assert sm.cell_size(mla, 8, "fp8_e4m3") == 576 * 61  # Kimi-K2 example: 35 136 B
    assert sm.cell_size(GLM5, 8, "fp8_e4m3") == (576 + 132) * 78
    assert sm.pool_bytes_per_token_layer(GLM5, 8, "fp8_e4m3") == (656 + 132, 0)
    assert sm.cell_size(GLM5, 8, "bf16") == (1152 + 132) * 78
    assert sm.pool_bytes_per_token_layer(GLM5, 8, "bf16") == (1152 + 132, 0)


def test_default_cuda_graph_bs():
    bs = sm.default_cuda_graph_bs(512)
    assert len(bs) == 52 and bs[:6] == [1, 2, 4, 8, 12, 16] and bs[-3:] == [480, 496, 512]
    assert max(sm.default_cuda_graph_bs(100)) == 96
    assert sm.capture_batch_sizes(bs, 64)[-1] == 64
    assert sm.capture_batch_sizes([1, 2, 4, 48], 40) == [1, 2, 4, 40]


def test_max_total_tokens_cap_and_page_rounding():
    plan = glm5_plan(0.88, max_total_tokens=100_001)
    assert plan.max_total_num_tokens == 100_001 // 64 * 64
    assert plan.max_total_tokens_warning is None
    plan = glm5_plan(0.88, max_total_tokens=10_000_000)
    assert plan.max_total_tokens_warning == (10_000_000, plan.profiled_tokens_min)  # before page rounding
    assert plan.profiled_tokens_min // 64 * 64 == 425664
    assert plan.max_total_num_tokens == 425664


def test_not_enough_memory_and_weights_oom():
    assert glm5_plan(0.5).not_enough_memory
    plan = sm.plan_group(
        GLM5,
        [sm.GpuMem(RTX_MIB * MIB)] * 2,
        tp_size=2,
        weights_total_bytes=GLM5_TOTAL,
        mem_fraction_static=0.88,
        kv_cache_dtype="fp8_e4m3",
        page_size=64,
    )
    assert plan.weights_oom and plan.ranks[0].weights_oom.alloc > plan.ranks[0].weights_oom.free


def test_memory_used_by_others_and_min_over_ranks():
    gpus = [sm.GpuMem(RTX_MIB * MIB)] * 7 + [sm.GpuMem(RTX_MIB * MIB, used_bytes=2 * GIB)]
    plan = sm.plan_group(
        GLM5,
        gpus,
        tp_size=8,
        weights_total_bytes=GLM5_TOTAL,
        mem_fraction_static=0.88,
        kv_cache_dtype="fp8_e4m3",
        page_size=64,
    )
    assert plan.max_total_num_tokens < 425664
    assert plan.ranks[7].free_after_pool < plan.ranks[0].free_after_pool


def test_overheads_from_env():
    ov = sm.Overheads.from_env({"SGLANG_SIM_CUDA_CONTEXT_MIB": "2000", "SGLANG_SIM_NCCL_MIB": "0"})
    assert ov.cuda_context_mib == 2000 and ov.nccl_mib == 0
    assert ov.dsa_graph_workspace_mib == sm.DSA_GRAPH_WORKSPACE_MIB
