"""Memory arithmetic of the SGLang stand-in (see sim/sglang/MODEL.md).

An independent implementation of SGLang 0.5.3-0.5.16's sizing rules (reference §c):

* free memory at start = total - memory used by other processes - CUDA context - NCCL/torch.distributed buffers
  (the last two are simulation constants, see ``Overheads``);
* weights per rank = ``metadata.total_size`` of ``model.safetensors.index.json`` / (tp * pp);
* ``rest = min_free_after_weights - min_free_at_start * (1 - mem_fraction_static)`` (GiB, min over the ranks);
* ``tokens = int(rest * 2**30) // cell_size``; capped by ``--max-total-tokens``; rounded down to the page size;
* the KV pool allocated is ``(tokens + page_size)`` slots of the *pool's* layout, which for DSA + FP8 is larger than
  the profiler's cell (656 + 132 B vs 576 + 132 B per layer: the ≤0.5.16 budget quirk), one tensor per layer (K and
  V apart for MHA, the indexer's K apart for DSA), after the request-to-token table and before the token free list;
  each of them takes whole allocator segments (``sim_alloc``), which is what "Memory pool end" sees;
* CUDA-graph capture memory: a simulation model (``graph_allocations``), captured largest batch first.

Everything here is pure arithmetic on plain values: no I/O apart from reading override constants from the environment.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from sglang.srt.sim_alloc import Segments

GiB = 1 << 30
MiB = 1 << 20

# ---------------------------------------------------------------------------------------------------------------------
# Simulation constants (documented in MODEL.md; each overridable by environment variable)
# ---------------------------------------------------------------------------------------------------------------------
CUDA_CONTEXT_MIB = 1088  # SGLANG_SIM_CUDA_CONTEXT_MIB: CUDA context + cuBLAS/cuDNN handles, every rank
NCCL_MIB = 288  # SGLANG_SIM_NCCL_MIB: torch.distributed/NCCL buffers, only when tp*pp > 1
GRAPH_WORKSPACE_MIB = 256  # SGLANG_SIM_GRAPH_WORKSPACE_MIB: first allocation of a capture (workspaces)
# SGLANG_SIM_DSA_GRAPH_WORKSPACE_MIB: the same for DSA models (indexer and sparse-attention buffers). The reference
# story bounds it: GLM-5 at 0.95 with --max-running-requests 8 (graphs of at most bs 8) died in capture with about
# 1.3 GiB free, at 0.88 with 64 it started with 8.61 GiB. Not measured: a value inside those bounds.
DSA_GRAPH_WORKSPACE_MIB = 2048
GRAPH_BYTES_PER_BS_LAYER_HIDDEN = 8  # SGLANG_SIM_GRAPH_ACT_BYTES: graph-pool activations per (bs * layer * hidden)
GRAPH_PER_GRAPH_MIB = 4  # SGLANG_SIM_GRAPH_PER_GRAPH_MIB: per captured batch size (graph exec + outputs)
RESERVED_UNALLOCATED_MIB = 18  # shown in OOM texts as "reserved by PyTorch but unallocated"


@dataclass(frozen=True)
class Overheads:
    cuda_context_mib: float = CUDA_CONTEXT_MIB
    nccl_mib: float = NCCL_MIB
    graph_workspace_mib: float = GRAPH_WORKSPACE_MIB
    dsa_graph_workspace_mib: float = DSA_GRAPH_WORKSPACE_MIB
    graph_act_bytes: float = GRAPH_BYTES_PER_BS_LAYER_HIDDEN
    graph_per_graph_mib: float = GRAPH_PER_GRAPH_MIB

    @classmethod
    def from_env(cls, env: dict | None = None) -> Overheads:
        env = os.environ if env is None else env

        def num(name: str, default: float) -> float:
            raw = env.get(name)
            if raw in (None, ""):
                return default
            return float(raw)

        return cls(
            cuda_context_mib=num("SGLANG_SIM_CUDA_CONTEXT_MIB", CUDA_CONTEXT_MIB),
            nccl_mib=num("SGLANG_SIM_NCCL_MIB", NCCL_MIB),
            graph_workspace_mib=num("SGLANG_SIM_GRAPH_WORKSPACE_MIB", GRAPH_WORKSPACE_MIB),
            dsa_graph_workspace_mib=num("SGLANG_SIM_DSA_GRAPH_WORKSPACE_MIB", DSA_GRAPH_WORKSPACE_MIB),
            graph_act_bytes=num("SGLANG_SIM_GRAPH_ACT_BYTES", GRAPH_BYTES_PER_BS_LAYER_HIDDEN),
            graph_per_graph_mib=num("SGLANG_SIM_GRAPH_PER_GRAPH_MIB", GRAPH_PER_GRAPH_MIB),
        )


# ---------------------------------------------------------------------------------------------------------------------
# Model shape
# ---------------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class ModelShape:
    """What the memory arithmetic needs from config.json."""

    architecture: str
    attention: str  # "mha" (MHA/GQA), "mla", "dsa" (MLA + DSA indexer)
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int = 0
    head_dim: int = 0
    v_head_dim: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    index_head_dim: int = 0
    context_len: int = 4096
    dtype: str = "bfloat16"


DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4}

KV_DTYPE_CHOICES = ["auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1"]

_KV_TORCH = {
    "fp8_e4m3": "torch.float8_e4m3fn",
    "fp8_e5m2": "torch.float8_e5m2",
    "bf16": "torch.bfloat16",
    "bfloat16": "torch.bfloat16",
    "fp4_e2m1": "torch.float4_e2m1fn_x2",
}


def kv_element_size(kv_cache_dtype: str, model_dtype: str = "bfloat16") -> float:
    if kv_cache_dtype == "auto":
        return DTYPE_BYTES.get(model_dtype, 2)
    if kv_cache_dtype.startswith("fp8"):
        return 1
    if kv_cache_dtype == "fp4_e2m1":
        return 0.5
    return 2


def kv_torch_dtype(kv_cache_dtype: str, model_dtype: str = "bfloat16") -> str:
    if kv_cache_dtype == "auto":
        return f"torch.{'float16' if model_dtype in ('float16', 'half') else model_dtype}"
    return _KV_TORCH[kv_cache_dtype]


# ---------------------------------------------------------------------------------------------------------------------
# Defaults (ServerArgs._handle_gpu_memory_settings, 0.5.3 - 0.5.16)
# ---------------------------------------------------------------------------------------------------------------------
def default_chunked_prefill_and_graph_bs(gpu_mem_mib: float | None, tp_size: int) -> tuple[int, int]:
    """(chunked_prefill_size, cuda_graph_max_bs) chosen by GPU memory class."""
    if gpu_mem_mib is None:
        return 8192, (256 if tp_size < 4 else 512)
    gib = gpu_mem_mib / 1024
    if gib < 20:
        return 2048, 8
    if gib < 35:
        return 2048, (24 if tp_size < 4 else 80)
    if gib < 60:
        return 4096, (32 if tp_size < 4 else 160)
    if gib < 160:
        return 8192, (256 if tp_size < 4 else 512)
    return 16384, 512


def default_mem_fraction_static(
    gpu_mem_mib: float | None,
    tp_size: int,
    pp_size: int,
    chunked_prefill_size: int,
    cuda_graph_max_bs: int,
    *,
    dp_attention_size: int = 0,
    speculative_algorithm: str | None = None,
) -> float:
    """The 0.5.3 - 0.5.9 rule (piecewise graphs off by default); 0.88 when the GPU memory is unknown.

    DP attention adds max_bs x dp x 3 MiB (x 1.5 more above bs 300); a draft model +2 GiB (+6 GiB STANDALONE, none
    for NGRAM), added after the 10 GiB floor (0.5.9 server_args.py, _handle_gpu_memory_settings)."""
    if gpu_mem_mib is None:
        return 0.88
    max_bs = cuda_graph_max_bs or 0
    reserved = 512 + max(chunked_prefill_size or 0, 2048) * 1.5 + max_bs * 2
    reserved += tp_size * pp_size / 8 * 1024
    if dp_attention_size:
        reserved += max_bs * dp_attention_size * 3
        if max_bs > 300:
            reserved += max_bs * dp_attention_size * 1.5
    if gpu_mem_mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    if speculative_algorithm == "STANDALONE":
        reserved += 6 * 1024
    elif speculative_algorithm not in (None, "NGRAM"):
        reserved += 2 * 1024
    return round((gpu_mem_mib - reserved) / gpu_mem_mib, 3)


def default_cuda_graph_bs(cuda_graph_max_bs: int) -> list[int]:
    """``_generate_cuda_graph_batch_sizes`` (0.5.9, no speculative decoding, with padding)."""
    bs = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, cuda_graph_max_bs + 1, 32)]
    return [b for b in bs if b <= cuda_graph_max_bs]


def capture_batch_sizes(cuda_graph_bs: list[int], max_num_reqs: int) -> list[int]:
    """What ``CudaGraphRunner`` really captures: cut at the request-pool size (ascending)."""
    bs = sorted(set(cuda_graph_bs))
    if bs and max(bs) > max_num_reqs:
        bs.append(max_num_reqs)
    return sorted({b for b in bs if b <= max_num_reqs})


def max_num_reqs_for(max_total_num_tokens: int, context_len: int, max_running_requests: int | None) -> int:
    if max_running_requests is not None:
        return max_running_requests
    return min(max(int(max_total_num_tokens / context_len * 512), 2048), 4096)


# ---------------------------------------------------------------------------------------------------------------------
# KV cell / pool sizes
# ---------------------------------------------------------------------------------------------------------------------
def kv_heads_per_rank(shape: ModelShape, tp_size: int) -> int:
    return max(1, shape.num_kv_heads // tp_size)


def index_k_bytes_per_layer(shape: ModelShape) -> int:
    """DSA indexer K cache: fp8 values + one fp32 scale per 128 (132 B for index_head_dim 128)."""
    return shape.index_head_dim + shape.index_head_dim // 128 * 4


def cell_size(shape: ModelShape, tp_size: int, kv_cache_dtype: str, num_layers: int | None = None) -> float:
    """Bytes per token per rank that the *profiler* budgets (``profile_max_num_token``)."""
    layers = shape.num_layers if num_layers is None else num_layers
    elt = kv_element_size(kv_cache_dtype, shape.dtype)
    if shape.attention == "mha":
        return kv_heads_per_rank(shape, tp_size) * (shape.head_dim + shape.v_head_dim) * layers * elt
    cell = (shape.kv_lora_rank + shape.qk_rope_head_dim) * layers * elt
    if shape.attention == "dsa":
        cell += index_k_bytes_per_layer(shape) * layers
    return cell


def pool_bytes_per_token_layer(shape: ModelShape, tp_size: int, kv_cache_dtype: str) -> tuple[float, float]:
    """Bytes per token slot per layer that the pool *allocates*: (K or KV, V or 0)."""
    elt = kv_element_size(kv_cache_dtype, shape.dtype)
    if shape.attention == "mha":
        heads = kv_heads_per_rank(shape, tp_size)
        return heads * shape.head_dim * elt, heads * shape.v_head_dim * elt
    if shape.attention == "dsa":
        if kv_cache_dtype.startswith("fp8"):
            # NSATokenToKVPool / calculate_mla_kv_cache_dim: nope part fp8 + fp32 scale per 128 + rope in bf16
            kv = shape.kv_lora_rank + shape.kv_lora_rank // 128 * 4 + shape.qk_rope_head_dim * 2
        else:
            kv = (shape.kv_lora_rank + shape.qk_rope_head_dim) * elt
        return kv + index_k_bytes_per_layer(shape), 0
    return (shape.kv_lora_rank + shape.qk_rope_head_dim) * elt, 0


def pool_sizes(
    shape: ModelShape, tp_size: int, kv_cache_dtype: str, tokens: int, *, page_size: int, num_layers: int | None = None
) -> tuple[int, int]:
    """(K or KV bytes, V bytes) of the pool holding ``tokens + page_size`` slots (slot 0..page-1 are padding)."""
    layers = shape.num_layers if num_layers is None else num_layers
    k, v = pool_bytes_per_token_layer(shape, tp_size, kv_cache_dtype)
    slots = tokens + page_size
    return int(slots * layers * k), int(slots * layers * v)


def pool_tensors(
    shape: ModelShape, tp_size: int, kv_cache_dtype: str, tokens: int, *, page_size: int, num_layers: int | None = None
) -> list[int]:
    """The pool's tensors in allocation order (bytes): every layer's K (or KV), then every layer's V (MHA) or
    indexer K (DSA: ``(slots + 1) // page`` pages of ``page x 132`` B)."""
    layers = shape.num_layers if num_layers is None else num_layers
    k, v = pool_bytes_per_token_layer(shape, tp_size, kv_cache_dtype)
    slots = tokens + page_size
    if shape.attention == "dsa":
        index = index_k_bytes_per_layer(shape)
        main = int(slots * (k - index))
        return [main] * layers + [(slots + 1) // page_size * page_size * index] * layers
    out = [int(slots * k)] * layers
    if v:
        out += [int(slots * v)] * layers
    return out


def req_table_bytes(max_num_reqs: int, context_len: int, *, spare_row: bool, draft_tokens: int = 0) -> int:
    """The request-to-token table (int32): one row per request (plus a spare row 0 from 0.5.11), each the context
    length + 4 (+ the draft tokens) wide."""
    return (max_num_reqs + (1 if spare_row else 0)) * (context_len + 4 + draft_tokens) * 4


def free_list_bytes(tokens: int, page_size: int) -> int:
    """The token allocator's free list on the GPU: one int64 per token, or per page when pages are > 1 token."""
    return (tokens // page_size if page_size > 1 else tokens) * 8


def profile_max_num_token(avail_gib: float, pre_load_gib: float, mem_fraction_static: float, cell: float) -> int:
    rest = avail_gib - pre_load_gib * (1 - mem_fraction_static)
    return int(rest * (1 << 30)) // math.ceil(cell)


def pp_layer_split(num_layers: int, pp_size: int) -> list[int]:
    base, extra = divmod(num_layers, pp_size)
    return [base + (1 if i < extra else 0) for i in range(pp_size)]


# ---------------------------------------------------------------------------------------------------------------------
# CUDA graph memory model
# ---------------------------------------------------------------------------------------------------------------------
def graph_allocations(
    shape: ModelShape, capture_bs: list[int], overheads: Overheads, num_layers: int | None = None
) -> list[tuple[int, list[int]]]:
    """Allocation sequence of a decode capture, largest batch size first: [(bs, [bytes, ...]), ...].

    The first (largest) graph allocates the workspaces and the graph-pool activations
    (``bs * layers * hidden * graph_act_bytes``); every graph also keeps ``graph_per_graph_mib`` (graph exec object,
    static outputs). Smaller graphs reuse the shared pool, so they add only their per-graph part.
    """
    layers = shape.num_layers if num_layers is None else num_layers
    order = sorted(capture_bs, reverse=True)
    steps: list[tuple[int, list[int]]] = []
    per_graph = int(overheads.graph_per_graph_mib * MiB)
    workspace = overheads.dsa_graph_workspace_mib if shape.attention == "dsa" else overheads.graph_workspace_mib
    for i, bs in enumerate(order):
        allocs = []
        if i == 0:
            allocs.append(int(workspace * MiB))
            allocs.append(int(bs * layers * shape.hidden_size * overheads.graph_act_bytes))
        allocs.append(per_graph)
        steps.append((bs, allocs))
    return steps


def graph_memory(shape: ModelShape, capture_bs: list[int], overheads: Overheads, num_layers: int | None = None) -> int:
    return sum(sum(a) for _, a in graph_allocations(shape, capture_bs, overheads, num_layers))


# ---------------------------------------------------------------------------------------------------------------------
# Whole-group plan
# ---------------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GpuMem:
    """Memory facts of one rank's GPU."""

    total_bytes: int
    used_bytes: int = 0


@dataclass
class OomEvent:
    phase: str  # "weights" | "capture"
    alloc: int  # bytes tried
    free: int  # bytes free at that moment
    allocated: int  # bytes allocated by "PyTorch" at that moment
    private_pools: int = 0
    bs: int | None = None


@dataclass
class RankMemory:
    rank: int  # rank inside the group: pp_rank * tp + tp_rank
    tp_rank: int
    pp_rank: int
    num_layers: int
    total: int
    used_by_others: int
    free_start: int  # after CUDA context (before torch.distributed init)
    nccl: int
    free_pre_load: int  # "Load weight begin. avail mem="
    weights: int
    free_after_weights: int = 0  # "Load weight end. avail mem="
    weights_oom: OomEvent | None = None
    pre_load_gib: float = 0.0  # min over ranks
    avail_gib: float = 0.0  # min over ranks after weights
    rest_gib: float = 0.0
    cell: float = 0.0
    profiled_tokens: int = 0
    max_total_num_tokens: int = 0
    pool_k: int = 0
    pool_v: int = 0
    req_table: int = 0
    pool_reserved: int = 0  # segments of the table, the pool's tensors and the free list
    pool_oom: OomEvent | None = None
    free_after_pool: int = 0  # "Memory pool end. avail mem="
    capture_bs: list[int] = field(default_factory=list)
    graph_steps: list[tuple[int, list[int]]] = field(default_factory=list)
    graph_need: int = 0
    graph_used: int = 0
    capture_oom: OomEvent | None = None
    free_after_graph: int = 0
    # speculative decoding: the draft runner, built after the target has captured its graphs
    draft_weights: int = 0
    draft_pool_k: int = 0
    draft_pool_v: int = 0
    free_after_draft_weights: int = 0
    free_after_draft_pool: int = 0
    draft_graph: int = 0
    free_after_draft_graph: int = 0
    draft_oom: OomEvent | None = None

    @property
    def pool_total(self) -> int:
        return self.pool_k + self.pool_v

    @property
    def allocated_before_graph(self) -> int:
        return self.weights + self.pool_reserved


@dataclass
class GroupPlan:
    ranks: list[RankMemory]
    mem_fraction_static: float
    kv_cache_dtype: str
    page_size: int
    max_total_num_tokens: int = 0
    profiled_tokens_min: int = 0
    max_num_reqs: int = 0
    max_running_requests: int = 0
    capture_bs: list[int] = field(default_factory=list)
    max_total_tokens_warning: tuple[int, int] | None = None
    not_enough_memory: bool = False
    weights_oom: bool = False
    pool_oom: bool = False
    capture_oom: bool = False
    draft_oom: bool = False


def plan_group(
    shape: ModelShape,
    gpus: list[GpuMem],
    *,
    tp_size: int,
    pp_size: int = 1,
    weights_total_bytes: int,
    mem_fraction_static: float,
    kv_cache_dtype: str,
    page_size: int,
    max_total_tokens: int | None = None,
    max_running_requests: int | None = None,
    cuda_graph_bs: list[int] | None = None,
    disable_cuda_graph: bool = False,
    overheads: Overheads | None = None,
    attn_tp_size: int | None = None,
    draft_layers: int = 0,
    draft_budgeted: bool = False,
    spare_req_row: bool = False,
    draft_tokens: int = 0,
) -> GroupPlan:
    """Memory of every rank of one TP x PP group, in start-up order. ``gpus[r]`` is rank r's GPU.

    attn_tp_size: ranks the KV heads are split over (tp / dp with DP attention). draft_layers: layers of a speculative
    draft model (EAGLE/MTP); its KV pool holds the target's token count and is allocated by the draft runner after the
    target's graphs. draft_budgeted: the profiler counts those layers in the cell (0.5.14+), else the draft pool comes
    on top of the budget (0.5.8 - 0.5.13). spare_req_row: the request table has a row 0 more (0.5.11+);
    draft_tokens: --speculative-num-draft-tokens, which widens every row."""
    ov = overheads or Overheads()
    world = tp_size * pp_size
    attn_tp = attn_tp_size or tp_size
    if len(gpus) < world:
        raise ValueError(f"need {world} GPUs, got {len(gpus)}")
    layers_split = pp_layer_split(shape.num_layers, pp_size)
    all_weights = weights_total_bytes // world
    # the draft (MTP) layers ship in the same checkpoint: the target loads the rest, the draft runner these
    draft_weights = all_weights * draft_layers // (shape.num_layers + draft_layers) if draft_layers else 0
    weights = all_weights - draft_weights
    ranks: list[RankMemory] = []
    for r in range(world):
        g = gpus[r]
        free_start = g.total_bytes - g.used_bytes - int(ov.cuda_context_mib * MiB)
        nccl = int(ov.nccl_mib * MiB) if world > 1 else 0
        ranks.append(
            RankMemory(
                rank=r,
                tp_rank=r % tp_size,
                pp_rank=r // tp_size,
                num_layers=layers_split[r // tp_size],
                total=g.total_bytes,
                used_by_others=g.used_bytes,
                free_start=free_start,
                nccl=nccl,
                free_pre_load=free_start - nccl,
                weights=weights,
                draft_weights=draft_weights,
            )
        )
    plan = GroupPlan(
        ranks=ranks, mem_fraction_static=mem_fraction_static, kv_cache_dtype=kv_cache_dtype, page_size=page_size
    )

    # weights
    for rm in ranks:
        rm.free_after_weights = rm.free_pre_load - rm.weights
        if rm.free_after_weights < 0:
            chunk = max(MiB, weights // 96)
            fit = max(0, rm.free_pre_load) // chunk
            loaded = fit * chunk
            rm.weights_oom = OomEvent("weights", alloc=chunk, free=rm.free_pre_load - loaded, allocated=loaded)
            plan.weights_oom = True
    if plan.weights_oom:
        return plan

    pre_load_gib = min(rm.free_pre_load for rm in ranks) / GiB
    avail_gib = min(rm.free_after_weights for rm in ranks) / GiB
    stage_tokens = []
    for rm in ranks:
        rm.pre_load_gib = pre_load_gib
        rm.avail_gib = avail_gib
        rm.rest_gib = avail_gib - pre_load_gib * (1 - mem_fraction_static)
        rm.cell = cell_size(shape, attn_tp, kv_cache_dtype, rm.num_layers)
        if draft_layers and draft_budgeted:
            rm.cell = int(rm.cell * (1 + draft_layers / rm.num_layers))
        rm.profiled_tokens = profile_max_num_token(avail_gib, pre_load_gib, mem_fraction_static, rm.cell)
        stage_tokens.append(rm.profiled_tokens)
    tokens = min(stage_tokens)  # all-reduce MIN across ranks / PP stages
    plan.profiled_tokens_min = tokens
    if max_total_tokens is not None:
        if max_total_tokens > tokens:
            plan.max_total_tokens_warning = (max_total_tokens, tokens)
        tokens = min(tokens, max_total_tokens)
    tokens = tokens // page_size * page_size
    plan.max_total_num_tokens = tokens
    if tokens <= 0:
        plan.not_enough_memory = True
        return plan

    plan.max_num_reqs = max_num_reqs_for(tokens, shape.context_len, max_running_requests)
    plan.max_running_requests = min(
        tokens // 2 if max_running_requests is None else max_running_requests, plan.max_num_reqs
    )
    if not disable_cuda_graph:
        plan.capture_bs = capture_batch_sizes(cuda_graph_bs or default_cuda_graph_bs(512), plan.max_num_reqs)

    for rm in ranks:
        rm.max_total_num_tokens = tokens
        rm.pool_k, rm.pool_v = pool_sizes(
            shape, attn_tp, kv_cache_dtype, tokens, page_size=page_size, num_layers=rm.num_layers
        )
        rm.req_table = req_table_bytes(
            plan.max_num_reqs, shape.context_len, spare_row=spare_req_row, draft_tokens=draft_tokens
        )
        seg = Segments()
        free = rm.free_after_weights
        for n in [
            rm.req_table,
            *pool_tensors(shape, attn_tp, kv_cache_dtype, tokens, page_size=page_size, num_layers=rm.num_layers),
            free_list_bytes(tokens, page_size),
        ]:
            opened = seg.take(n)
            if opened > free:
                rm.pool_oom = OomEvent("pool", alloc=n, free=max(free, 0), allocated=rm.weights + seg.reserved - opened)
                plan.pool_oom = True
                break
            free -= opened
        rm.pool_reserved = seg.reserved
        rm.free_after_pool = rm.free_after_weights - rm.pool_reserved
        if rm.pool_oom:
            continue
        rm.capture_bs = list(plan.capture_bs)
        rm.free_after_graph = rm.free_after_pool
        if disable_cuda_graph:
            continue
        rm.graph_steps = graph_allocations(shape, plan.capture_bs, ov, rm.num_layers)
        rm.graph_need = sum(sum(a) for _, a in rm.graph_steps)
        free = rm.free_after_pool
        used = 0
        for bs, allocs in rm.graph_steps:
            for a in allocs:
                if a > free:
                    rm.capture_oom = OomEvent(
                        "capture",
                        alloc=a,
                        free=max(free, 0),
                        allocated=rm.allocated_before_graph + used,
                        private_pools=used,
                        bs=bs,
                    )
                    break
                free -= a
                used += a
            if rm.capture_oom:
                plan.capture_oom = True
                break
        rm.graph_used = used
        rm.free_after_graph = free
    if draft_layers and not plan.capture_oom and not plan.pool_oom:
        for rm in ranks:
            _plan_draft(rm, shape, (attn_tp, kv_cache_dtype, tokens, page_size, draft_layers), plan.capture_bs, ov)
            plan.draft_oom = plan.draft_oom or rm.draft_oom is not None
    return plan


def _plan_draft(rm, shape, pool, capture_bs, ov) -> None:
    """The draft runner of one rank: its weights, a draft_layers-layer pool of the target's tokens, its graphs.
    pool: (attn_tp, kv_cache_dtype, tokens, page_size, draft_layers)."""
    attn_tp, kv_cache_dtype, tokens, page_size, draft_layers = pool
    free = rm.free_after_graph if rm.capture_bs else rm.free_after_pool
    rm.free_after_draft_weights = free - rm.draft_weights
    rm.draft_pool_k, rm.draft_pool_v = pool_sizes(
        shape, attn_tp, kv_cache_dtype, tokens, page_size=page_size, num_layers=draft_layers
    )
    need = rm.draft_pool_k + rm.draft_pool_v
    if need > rm.free_after_draft_weights:
        rm.draft_oom = OomEvent("draft_pool", alloc=need, free=max(rm.free_after_draft_weights, 0), allocated=0)
        return
    rm.free_after_draft_pool = rm.free_after_draft_weights - need
    rm.draft_graph = int(len(capture_bs) * ov.graph_per_graph_mib * MiB)
    rm.free_after_draft_graph = rm.free_after_draft_pool - rm.draft_graph
