# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""SGLang's KV-cache cell: bytes per token per rank of the pool, by attention family, dtype, TP/PP and release.
Standard library only (Ansible module_util and bin/sglang-plan); docs/memory.md has the table."""

from __future__ import absolute_import, annotations, division, print_function

__metaclass__ = type


from ansible_collections.llmops.sglang.plugins.module_utils.sglang_model import PlanError, as_model
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_release import parse_gpu_arch, parse_version

# KV element sizes in bytes by canonical kv-cache dtype. fp4_e2m1 is packed two per byte and handled by the cell
# formulas (SGLang's float4_e2m1fn_x2 has element size 1).
KV_ELEMENT_BYTES = {"fp32": 4, "bf16": 2, "fp16": 2, "fp8_e4m3": 1, "fp8_e5m2": 1, "fp4_e2m1": 1}
_KV_DTYPE_ALIASES = {
    "auto": "auto",
    "bf16": "bf16",
    "bfloat16": "bf16",
    "fp16": "fp16",
    "float16": "fp16",
    "half": "fp16",
    "fp32": "fp32",
    "float32": "fp32",
    "float": "fp32",
    "fp8": "fp8_e4m3",
    "fp8_e4m3": "fp8_e4m3",
    "float8_e4m3fn": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2",
    "float8_e5m2": "fp8_e5m2",
    "fp4": "fp4_e2m1",
    "fp4_e2m1": "fp4_e2m1",
    "float4_e2m1fn_x2": "fp4_e2m1",
}

# NSA (DSA) pool layout constants (NSATokenToKVPool): quant block 128, rope kept in bf16, index K fp8 + fp32 scale.
NSA_QUANT_BLOCK = 128
NSA_ROPE_BYTES = 2
DSA_PAGE_SIZE = 64


def canonical_kv_dtype(kv_cache_dtype):
    key = str(kv_cache_dtype or "auto").strip().lower().replace("torch.", "")
    if key not in _KV_DTYPE_ALIASES:
        raise PlanError(
            "kv-cache dtype %r is not known: use auto, bf16, fp16, fp8_e4m3, fp8_e5m2 or fp4_e2m1" % (kv_cache_dtype,)
        )
    return _KV_DTYPE_ALIASES[key]


def resolve_kv_cache_dtype(model, kv_cache_dtype="auto", gpu_arch=None):
    """The dtype SGLang's pool will use: 'auto' is the model dtype, except DSA models on SM>=10 get fp8_e4m3."""
    model = as_model(model)
    dt = canonical_kv_dtype(kv_cache_dtype)
    if dt != "auto":
        return dt
    cc = parse_gpu_arch(gpu_arch)
    if model.family == "dsa" and cc is not None and cc[0] >= 10:
        return "fp8_e4m3"
    return model.dtype


def kv_element_bytes(kv_dtype):
    dt = canonical_kv_dtype(kv_dtype)
    if dt == "auto":
        raise PlanError("resolve 'auto' first (resolve_kv_cache_dtype)")
    return KV_ELEMENT_BYTES[dt]


def default_page_size(model):
    """SGLang forces page size 64 for DSA models ("Setting page size to 64 for DeepSeek DSA."), else 1."""
    return DSA_PAGE_SIZE if as_model(model).family == "dsa" else 1


def kv_heads_per_rank(model, tp=1):
    """max(1, kv_heads // tp): replicated when TP exceeds the KV heads. Raises when TP splits heads unevenly."""
    model = as_model(model)
    tp = int(tp)
    if tp < 1:
        raise PlanError("tp must be >= 1, got %d" % tp)
    if model.num_attention_heads % tp:
        raise PlanError(
            "tp=%d does not divide num_attention_heads=%d: SGLang refuses this split; use a TP size that divides it"
            % (tp, model.num_attention_heads)
        )
    if model.family == "mha":
        kv = model.num_kv_heads
        if (kv >= tp and kv % tp) or (kv < tp and tp % kv):
            raise PlanError(
                "tp=%d and num_key_value_heads=%d do not divide one another: the KV heads cannot be split evenly"
                % (tp, kv)
            )
    return max(1, model.num_kv_heads // tp)


def layers_per_rank(model, pp=1):
    pp = int(pp)
    if pp < 1:
        raise PlanError("pp must be >= 1, got %d" % pp)
    if pp > model.num_layers:
        raise PlanError("pp=%d exceeds the model's %d layers" % (pp, model.num_layers))
    # hybrid models keep KV only for their full-attention layers (0.5.9 model_runner_kv_cache_mixin.py:131-138)
    return -(-model.attention_layers // pp)  # the biggest pipeline stage


def _dsa_index_bytes_per_layer(model):
    return model.index_head_dim + model.index_head_dim // NSA_QUANT_BLOCK * 4


def cell_bytes(model, tp=1, pp=1, kv_dtype="bf16", sglang_version=None, *, actual=True, nsa_backend=None):
    """Bytes per token per rank of the KV pool (tp: the attention TP size, tp / dp under DP attention).

    actual=True: what the pool allocates per slot. actual=False: what the profiler budgets (the token count divisor).
    They differ only for DSA + fp8 KV before 0.5.18 (budget 576+132 B/layer, pool 656+132 B/layer:
    calculate_mla_kv_cache_dim, 0.5.9 model_runner_kv_cache_mixin.py:212-248, against get_cell_size_per_token
    :47-114); with the trtllm NSA backend the pool keeps the plain 576 B/layer layout (:224-231), so no gap.
    """
    model = as_model(model)
    dt = canonical_kv_dtype(kv_dtype)
    if dt == "auto":
        dt = resolve_kv_cache_dtype(model, dt)
    elt = KV_ELEMENT_BYTES[dt]
    layers = layers_per_rank(model, pp)
    fp4 = dt == "fp4_e2m1"
    if model.family == "mha":
        n = kv_heads_per_rank(model, tp)
        cell = n * (model.head_dim + model.v_head_dim) * layers * elt
        if fp4:
            cell = cell // 2 + (n * model.head_dim * layers * 2 * elt) // 16
        return cell
    kv_heads_per_rank(model, tp)  # validates the attention-head split
    dim = model.kv_lora_rank + model.qk_rope_head_dim
    cell = dim * layers * elt
    if fp4:
        cell = cell // 2 + (dim // 16) * layers * elt
    if model.family == "dsa":
        budget_fixed = parse_version(sglang_version) >= (0, 5, 18)
        if dt == "fp8_e4m3" and (actual or budget_fixed) and str(nsa_backend or "").lower() != "trtllm":
            stored = model.kv_lora_rank + model.kv_lora_rank // NSA_QUANT_BLOCK * 4
            stored += model.qk_rope_head_dim * NSA_ROPE_BYTES
            cell = stored * layers
        cell += _dsa_index_bytes_per_layer(model) * layers
    return cell


def max_num_reqs(sglang_version, tokens, context_len, *, max_running_requests=None, dp=1):
    """Requests the request-to-token table is sized for. Unset: clamp(tokens / context_len x 512, 2048, 4096) (0.5.9
    model_runner_kv_cache_mixin.py:344-352); from 0.5.14 also at most tokens // 2, and a given
    --max-running-requests is split over the DP workers (0.5.14 _resolve_max_num_reqs :981-995). SGLang neither rounds
    nor raises a given value: --max-running-requests 64 is a 64-request table."""
    v = parse_version(sglang_version)
    tokens, context_len = int(tokens), max(1, int(context_len))
    estimated = max(min(int(tokens / context_len * 512), 4096), 2048)
    if v < (0, 5, 14):
        return int(max_running_requests) if max_running_requests else estimated
    if max_running_requests:
        return min(int(max_running_requests) // max(1, int(dp)), tokens // 2)
    return min(estimated, tokens // 2)


def req_to_token_rows(sglang_version, reqs):
    """Rows of the table for ``reqs`` requests: one spare row (index 0) in 0.3.1.post2-0.4.6.post5
    (``ReqToTokenPool(size=max_num_reqs + 1, ...)``, 0.4.4 model_runner.py:720-722) and again from 0.5.11
    (``torch.zeros((size + 1, max_context_len))`` in the pool itself, 0.5.11 mem_cache/memory_pool.py); exactly
    ``reqs`` in 0.4.7-0.5.10 (0.5.9 mem_cache/memory_pool.py:144-146)."""
    v = parse_version(sglang_version)
    spare = (0, 4, 0) <= v < (0, 4, 7) or v >= (0, 5, 11)
    return int(reqs) + (1 if spare else 0)


def req_to_token_bytes(sglang_version, tokens, context_len, *, max_running_requests=None, dp=1, draft_tokens=0):
    """The request-to-token table: rows x (context_len + 4 + draft tokens) int32 (ReqToTokenPool, 0.5.9
    mem_cache/memory_pool.py:126-146, rows sized in model_runner_kv_cache_mixin.py:415-421; 0.5.14
    mem_cache/common.py:251-263). It is allocated with the KV pool, before "Memory pool end"."""
    reqs = max_num_reqs(sglang_version, tokens, context_len, max_running_requests=max_running_requests, dp=dp)
    return req_to_token_rows(sglang_version, reqs) * (int(context_len) + 4 + int(draft_tokens or 0)) * 4


def pool_tensor_bytes(model, tokens, tp=1, pp=1, kv_dtype="bf16", *, sglang_version=None, page_size=1,
                      nsa_backend=None, layers=None):  # fmt: skip
    """The KV pool's tensors, in the order SGLang allocates them: a list of byte sizes (one entry per tensor).

    Their sum is the "KV size" SGLang logs; each is rounded by PyTorch's allocator on its own (torch_cuda_alloc),
    which is why free memory drops by more. Shapes (S = tokens + page_size slots; the padded page absorbs dummy
    writes), 0.5.9 mem_cache/memory_pool.py unless said otherwise:

    * MHA/GQA: every layer's K buffer (S, heads, head_dim), then every layer's V buffer (S, heads, v_head_dim)
      (MHATokenToKVPool._create_buffers :801-826); from 0.5.23 one buffer per layer holding both halves when K and V
      have the same shape, (2, S rounded up to the page, heads, head_dim) (_create_buffers_normal :2580-2647);
      fp4: K and V at half a byte per value, then their scales, one byte per 16 values (MHATokenToKVPoolFP4 :1040-1090);
    * MLA: one buffer per layer (S, 1, kv_lora_rank + qk_rope_head_dim) (MLATokenToKVPool._create_buffers
      :1431-1447); fp4: half a byte per value, then a scale buffer (S, dim / 16) per layer (:1601-1630);
    * DSA (NSATokenToKVPool, from 0.5.13 DSATokenToKVPool): the MLA buffers (fp8 KV stores the 656 B layout of
      calculate_mla_kv_cache_dim unless the trtllm backend keeps 576 B), then one indexer buffer per layer of
      (S + 1) // page pages x page x (index_head_dim + index_head_dim / 128 x 4) bytes (:1784-1800; 0.5.23
      mem_cache/index_key_cache.py:22-45).

    layers: layers of this pool (default: the model's full-attention layers of the largest PP stage).
    """
    model = as_model(model)
    dt = canonical_kv_dtype(kv_dtype)
    if dt == "auto":
        dt = resolve_kv_cache_dtype(model, dt)
    elt = KV_ELEMENT_BYTES[dt]
    fp4 = dt == "fp4_e2m1"
    n_layers = layers_per_rank(model, pp) if layers is None else int(layers)
    page = int(page_size)
    slots = int(tokens) + page
    version = parse_version(sglang_version)
    if model.family == "mha":
        n = kv_heads_per_rank(model, tp)
        k_row, v_row = n * model.head_dim, n * model.v_head_dim
        if fp4:
            return [slots * k_row // 2] * n_layers + [slots * v_row // 2] * n_layers + \
                [slots * k_row // 16] * n_layers + [slots * v_row // 16] * n_layers  # fmt: skip
        if version >= (0, 5, 23) and k_row == v_row:
            return [2 * (-(-slots // page) * page) * k_row * elt] * n_layers
        return [slots * k_row * elt] * n_layers + [slots * v_row * elt] * n_layers
    kv_heads_per_rank(model, tp)  # validates the attention-head split
    dim = model.kv_lora_rank + model.qk_rope_head_dim
    if fp4:
        return [slots * dim // 2] * n_layers + [slots * (dim // 16)] * n_layers
    row = dim * elt
    if model.family == "dsa":
        if dt == "fp8_e4m3" and str(nsa_backend or "").lower() != "trtllm":
            row = model.kv_lora_rank + model.kv_lora_rank // NSA_QUANT_BLOCK * 4
            row += model.qk_rope_head_dim * NSA_ROPE_BYTES
        index = (slots + 1) // page * page * _dsa_index_bytes_per_layer(model)
        return [slots * row] * n_layers + [index] * n_layers
    return [slots * row] * n_layers


def free_pages_bytes(tokens, page_size=1):
    """The token allocator's free list, int64 on the GPU: one entry per token (page size 1,
    TokenToKVPoolAllocator.clear, 0.5.9 mem_cache/allocator.py:131-138) or per page (PagedTokenToKVPoolAllocator,
    :518-525). Allocated after the pool, before "Memory pool end"."""
    page = int(page_size)
    return (int(tokens) // page if page > 1 else int(tokens)) * 8
