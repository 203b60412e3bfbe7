# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""SGLang's GPU memory arithmetic: KV-pool size, default mem_fraction_static, CUDA-graph headroom.

This is the one place in the collection that knows how SGLang splits a GPU's memory. Pure functions and dataclasses,
standard library only, so it works as an Ansible module_util and from ``bin/sglang-plan``.

The arithmetic (see docs/memory.md for the worked example)::

    pre_load  = free GPU memory after torch.distributed init (GiB)      ~ total - context overhead
    avail     = free memory after the weights are loaded                 ~ pre_load - weights per rank
    rest      = avail - pre_load * (1 - mem_fraction_static)             the KV budget
    tokens    = floor(rest * 2**30 / budget_cell_bytes), capped, rounded down to the page size
    pool      = (tokens + page_size) * actual_cell_bytes                 what the pool really allocates
    left      = avail - pool - other pool-phase buffers                  "Memory pool end. avail mem=..."
    left must hold the decode CUDA graphs captured next (plus a margin), or start-up dies in capture.

Units: "GiB" everywhere is 2**30 bytes (SGLang's log says "GB" but divides by 2**30); GPU totals are MiB as
``nvidia-smi --query-gpu=memory.total`` prints them.
"""

from __future__ import absolute_import, annotations, division, print_function

__metaclass__ = type

import os
from dataclasses import asdict, dataclass, field

# The advice after a failed start-up is public through this module (the planner's interface to the diagnosis, the
# sglang_plan module and the server role); its code lives in sglang_advice.
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_advice import (  # noqa: F401
    DEFAULT_MARGIN_GIB,
    MIN_RECOMMENDED_FRACTION,
    OOM_NEED_GROWTH,
    CaptureOomAdvice,
    KvOomAdvice,
    capture_oom_advice,
    kv_oom_advice,
)
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_graphs import (  # noqa: F401
    GRAPH_BASE_GIB,
    cuda_graph_need_gib,
    cuda_graph_need_gib_for,
)
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_kv import (
    canonical_kv_dtype,
    cell_bytes,
    default_page_size,
    kv_heads_per_rank,
    layers_per_rank,
    resolve_kv_cache_dtype,
)
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_model import (
    GIB,
    ModelSpec,
    PlanError,
    as_model,
    checkpoint_weight_bytes,
    weights_per_rank_gib,
)
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_release import (
    cuda_graph_batch_sizes,
    default_graph_settings,
    default_mem_fraction_static,
    parse_gpu_arch,
    parse_version,
)

# ---------------------------------------------------------------------------------------------------------------------
# Documented constants (docs/memory.md explains each one)
# ---------------------------------------------------------------------------------------------------------------------

#: GPU memory that is gone before SGLang's "Load weight begin. avail mem=" (CUDA context, NCCL and torch.distributed
#: buffers), in GiB, by compute-capability major. Only sm_120 is measured (reference: a 97 887 MiB RTX PRO 6000
#: reports 94.25 GiB free at start, TP8 -> 95.593 - 94.25 = 1.34 GiB); the others are estimates. Measured values
#: (free_at_start_gib) always replace these.
CONTEXT_OVERHEAD_GIB = {12: 1.34, 11: 1.34, 10: 1.34, 9: 1.0, 8: 0.9, 7: 0.8}
#: Used when the GPU arch is unknown: the one measured value.
DEFAULT_CONTEXT_OVERHEAD_GIB = 1.34

#: Memory allocated between "Load weight end" and "Memory pool end" besides the KV pool itself (req_to_token pool,
#: allocator free lists, allocator slack). Calibrated on the reference run: avail after weights 33.20 GiB, pool
#: 24.37 GiB, "Memory pool end. avail mem=8.61 GB" -> 0.22 GiB.
DEFAULT_POOL_EXTRA_GIB = 0.22

#: A KV pool smaller than this is not a useful server: the recommendation never goes below it.
DEFAULT_MIN_KV_TOKENS = 8192

VERDICTS = ("ok", "oom_cuda_graph", "oom_kv_pool", "oom_weights")


def context_overhead_gib(gpu_arch=None):
    """Default GiB lost before weights load (CUDA context, NCCL) for an arch; see CONTEXT_OVERHEAD_GIB."""
    cc = parse_gpu_arch(gpu_arch)
    if cc is None:
        return DEFAULT_CONTEXT_OVERHEAD_GIB
    return CONTEXT_OVERHEAD_GIB.get(cc[0], DEFAULT_CONTEXT_OVERHEAD_GIB)


# ---------------------------------------------------------------------------------------------------------------------
# The plan
# ---------------------------------------------------------------------------------------------------------------------

_FIRST_KEYS = (
    "kv_tokens",
    "kv_pool_gib",
    "avail_after_pool_gib",
    "cuda_graph_need_gib",
    "verdict",
    "recommended_mem_fraction_static",
    "recommended_cuda_graph_max_bs",
)


@dataclass
class MemoryPlan:
    """Predicted start-up memory of one SGLang rank (the tightest one) and a recommendation."""

    kv_tokens: int
    kv_pool_gib: float
    avail_after_pool_gib: float
    cuda_graph_need_gib: float
    verdict: str
    recommended_mem_fraction_static: float | None
    recommended_cuda_graph_max_bs: int | None
    mem_fraction_static: float
    default_mem_fraction_static: float
    free_at_start_gib: float
    weights_per_rank_gib: float
    free_after_weights_gib: float
    kv_budget_gib: float
    cell_bytes_budget: int
    cell_bytes_actual: int
    kv_cache_dtype: str
    page_size: int
    cuda_graph_max_bs: int
    cuda_graph_batch_sizes: list
    margin_gib: float
    headroom_gib: float
    sglang_version: str
    model_family: str
    notes: list = field(default_factory=list)

    def as_dict(self, ndigits=3):
        """JSON-ready dict; the seven headline keys come first."""
        d = asdict(self)
        for k, v in d.items():
            if isinstance(v, float):
                d[k] = round(v, ndigits)
        out = {k: d.pop(k) for k in _FIRST_KEYS}
        out.update(d)
        return out


@dataclass
class _Eval:
    tokens: int
    budget_gib: float
    pool_gib: float
    avail_after_pool_gib: float
    need_gib: float
    verdict: str


class _Planner:
    """Holds the resolved inputs; evaluates any (fraction, graph max bs) pair."""

    def __init__(
        self,
        model,
        *,
        gpu_mem_mib,
        tp,
        pp,
        kv_cache_dtype,
        page_size,
        sglang_version,
        gpu_arch,
        weights_gib,
        free_at_start_gib,
        free_after_weights_gib,
        cuda_graph_max_bs,
        disable_cuda_graph,
        disable_cuda_graph_padding,
        cuda_graph_need,
        graph_base_gib,
        context_overhead,
        pool_extra_gib,
        max_total_tokens,
    ):
        self.notes = list(model.notes)
        self.model = model
        self.tp, self.pp = int(tp), int(pp)
        self.version = parse_version(sglang_version)
        self.version_str = "%d.%d.%d" % self.version
        self.gpu_arch = gpu_arch
        cc = parse_gpu_arch(gpu_arch)
        self.kv_dtype = resolve_kv_cache_dtype(model, kv_cache_dtype, gpu_arch)
        if model.family == "dsa" and canonical_kv_dtype(kv_cache_dtype) == "auto" and cc is None:
            self.notes.append(
                "GPU arch unknown: assumed kv-cache dtype %s (SGLang uses fp8_e4m3 on SM>=10)" % self.kv_dtype
            )
        if model.family == "dsa" and self.version < (0, 5, 9):
            self.notes.append("DSA models are supported by SGLang from 0.5.9 on")
        self.page_size = int(page_size) if page_size else default_page_size(model)
        if self.page_size < 1:
            raise PlanError("page size must be >= 1, got %d" % self.page_size)
        self.cell_budget = cell_bytes(model, tp, pp, self.kv_dtype, self.version, actual=False)
        self.cell_actual = cell_bytes(model, tp, pp, self.kv_dtype, self.version, actual=True)
        if self.cell_budget != self.cell_actual:
            self.notes.append(
                "SGLang %s budgets %d B/token but the DSA fp8 pool stores %d B/token: the pool is %.1f %% bigger than "
                "its budget and eats the (1 - fraction) headroom (fixed in 0.5.18)"
                % (
                    self.version_str,
                    self.cell_budget,
                    self.cell_actual,
                    100.0 * (self.cell_actual / self.cell_budget - 1),
                )
            )
        self.gpu_mem_mib = float(gpu_mem_mib) if gpu_mem_mib is not None else None
        if free_at_start_gib is not None:
            self.free_at_start = float(free_at_start_gib)
        else:
            if self.gpu_mem_mib is None:
                raise PlanError("need the GPU memory (gpu_mem_mib) or a measured free_at_start_gib")
            overhead = context_overhead_gib(gpu_arch) if context_overhead is None else float(context_overhead)
            self.free_at_start = self.gpu_mem_mib / 1024.0 - overhead
        if self.free_at_start <= 0:
            raise PlanError("free memory at start must be > 0 GiB, got %.2f" % self.free_at_start)
        if free_after_weights_gib is not None:
            self.free_after_weights = float(free_after_weights_gib)
            self.weights = (
                float(weights_gib) if weights_gib is not None else self.free_at_start - self.free_after_weights
            )
        else:
            if weights_gib is None:
                raise PlanError(
                    "weights per rank unknown: pass a model directory with safetensors, weights_gib, "
                    "or a measured free_after_weights_gib"
                )
            self.weights = float(weights_gib)
            self.free_after_weights = self.free_at_start - self.weights
        self.pool_extra = float(pool_extra_gib)
        self.max_total_tokens = max_total_tokens
        chunk, default_bs = default_graph_settings(self.version, self.gpu_mem_mib, self.tp, gpu_arch)
        self.chunk = chunk
        self.max_bs = int(cuda_graph_max_bs) if cuda_graph_max_bs else default_bs
        self.disable_graph = bool(disable_cuda_graph)
        self.disable_padding = bool(disable_cuda_graph_padding)
        self.graph_base = graph_base_gib
        self.measured_need = None if cuda_graph_need is None else float(cuda_graph_need)

    def sizes(self, max_bs):
        if self.disable_graph:
            return []
        return cuda_graph_batch_sizes(max_bs, self.disable_padding)

    def need(self, max_bs):
        if self.disable_graph:
            return 0.0
        if self.measured_need is not None:
            if max_bs == self.max_bs:
                return self.measured_need
            # scale a measured need by the model's shape when a smaller max bs is considered
            full = cuda_graph_need_gib(self.sizes(self.max_bs), self.model.family, self.graph_base)
            part = cuda_graph_need_gib(self.sizes(max_bs), self.model.family, self.graph_base)
            return self.measured_need * part / full if full else 0.0
        return cuda_graph_need_gib(self.sizes(max_bs), self.model.family, self.graph_base)

    def evaluate(self, fraction, max_bs):
        need = self.need(max_bs)
        if self.free_after_weights <= 0:
            return _Eval(0, 0.0, 0.0, self.free_after_weights, need, "oom_weights")
        budget = self.free_after_weights - self.free_at_start * (1.0 - fraction)
        tokens = int(budget * GIB) // self.cell_budget if budget > 0 else 0
        if self.max_total_tokens:
            tokens = min(tokens, int(self.max_total_tokens))
        tokens = tokens // self.page_size * self.page_size
        if tokens <= 0:
            return _Eval(0, budget, 0.0, self.free_after_weights, need, "oom_kv_pool")
        pool = (tokens + self.page_size) * self.cell_actual / GIB
        if pool > self.free_after_weights:
            return _Eval(tokens, budget, pool, self.free_after_weights - pool, need, "oom_kv_pool")
        left = self.free_after_weights - pool - self.pool_extra
        verdict = "ok" if left >= need else "oom_cuda_graph"
        return _Eval(tokens, budget, pool, left, need, verdict)


def _recommend(p, margin, min_kv_tokens):
    """(fraction, max_bs or None): the largest fraction (0.01 steps) whose post-pool headroom holds the graphs plus
    the margin; if none above the lowest useful fraction does, the largest captured bs that fits at that fraction."""

    def fits(hundredths, max_bs):
        e = p.evaluate(hundredths / 100.0, max_bs)
        return e.verdict == "ok" and e.tokens >= min_kv_tokens and e.avail_after_pool_gib >= e.need_gib + margin

    lowest = round(MIN_RECOMMENDED_FRACTION * 100)
    for h in range(99, lowest - 1, -1):
        if fits(h, p.max_bs):
            return h / 100.0, None
    if p.disable_graph:
        return None, None
    # Lowest fraction that still gives a useful pool: headroom is largest there.
    floor_h = None
    for h in range(lowest, 100):
        e = p.evaluate(h / 100.0, p.max_bs)
        if e.tokens >= min_kv_tokens and e.verdict != "oom_kv_pool":
            floor_h = h
            break
    if floor_h is None:
        return None, None
    for bs in sorted(p.sizes(p.max_bs), reverse=True):
        if bs >= p.max_bs:
            continue
        for h in range(99, floor_h - 1, -1):
            if fits(h, bs):
                return h / 100.0, bs
    return None, None


def plan(
    model,
    *,
    gpu_mem_mib=None,
    tp=1,
    pp=1,
    mem_fraction_static=None,
    kv_cache_dtype="auto",
    page_size=None,
    sglang_version=None,
    gpu_arch=None,
    weights_gib=None,
    free_at_start_gib=None,
    free_after_weights_gib=None,
    cuda_graph_max_bs=None,
    disable_cuda_graph=False,
    disable_cuda_graph_padding=False,
    cuda_graph_need=None,
    graph_base_gib=None,
    margin_gib=DEFAULT_MARGIN_GIB,
    context_overhead=None,
    pool_extra_gib=DEFAULT_POOL_EXTRA_GIB,
    max_total_tokens=None,
    min_kv_tokens=DEFAULT_MIN_KV_TOKENS,
    speculative=None,
):
    """Predict SGLang's start-up memory for one rank and recommend a mem_fraction_static.

    model: ModelSpec, config dict, config.json path, or model directory (a directory also yields the weights).
    gpu_mem_mib: nvidia-smi memory.total of the smallest GPU. weights_gib: weights per rank (GiB).
    free_at_start_gib / free_after_weights_gib: measured "Load weight begin/end avail mem" values (replace estimates).
    cuda_graph_need: measured capture memory (GiB) for cuda_graph_max_bs (replaces the estimate).
    mem_fraction_static: None -> SGLang's default for the version. Returns a MemoryPlan.
    """
    if mem_fraction_static is not None and not 0.0 < float(mem_fraction_static) < 1.0:
        raise PlanError("mem_fraction_static must be in (0, 1), got %s" % mem_fraction_static)
    if gpu_mem_mib is not None and float(gpu_mem_mib) <= 0:
        raise PlanError("gpu_mem_mib must be > 0, got %s" % gpu_mem_mib)
    spec = as_model(model)
    kv_heads_per_rank(spec, tp)  # validate the parallel split before touching the checkpoint
    layers_per_rank(spec, pp)
    if weights_gib is None and free_after_weights_gib is None and not isinstance(model, (dict, ModelSpec)):
        path = os.fspath(model)
        model_dir = path if os.path.isdir(path) else os.path.dirname(path) or "."
        weights_gib = weights_per_rank_gib(checkpoint_weight_bytes(model_dir), tp, pp)
    p = _Planner(
        spec,
        gpu_mem_mib=gpu_mem_mib,
        tp=tp,
        pp=pp,
        kv_cache_dtype=kv_cache_dtype,
        page_size=page_size,
        sglang_version=sglang_version,
        gpu_arch=gpu_arch,
        weights_gib=weights_gib,
        free_at_start_gib=free_at_start_gib,
        free_after_weights_gib=free_after_weights_gib,
        cuda_graph_max_bs=cuda_graph_max_bs,
        disable_cuda_graph=disable_cuda_graph,
        disable_cuda_graph_padding=disable_cuda_graph_padding,
        cuda_graph_need=cuda_graph_need,
        graph_base_gib=graph_base_gib,
        context_overhead=context_overhead,
        pool_extra_gib=pool_extra_gib,
        max_total_tokens=max_total_tokens,
    )
    default_frac = default_mem_fraction_static(
        p.version,
        p.gpu_mem_mib,
        tp,
        pp,
        gpu_arch=gpu_arch,
        cuda_graph_max_bs=cuda_graph_max_bs,
        speculative=speculative,
        mla=spec.family != "mha",
    )
    frac = float(mem_fraction_static) if mem_fraction_static is not None else default_frac
    e = p.evaluate(frac, p.max_bs)
    rec_frac, rec_bs = _recommend(p, float(margin_gib), int(min_kv_tokens))
    if rec_frac is None:
        p.notes.append(
            "no fraction >= %.2f leaves room for the CUDA graphs with a %d-token pool: use more GPUs (TP), a smaller "
            "kv-cache dtype, or --disable-cuda-graph" % (MIN_RECOMMENDED_FRACTION, min_kv_tokens)
        )
    if e.verdict == "oom_weights":
        p.notes.append("the weights (%.2f GiB/rank) do not fit in %.2f GiB free" % (p.weights, p.free_at_start))
    return MemoryPlan(
        kv_tokens=e.tokens,
        kv_pool_gib=e.pool_gib,
        avail_after_pool_gib=e.avail_after_pool_gib,
        cuda_graph_need_gib=e.need_gib,
        verdict=e.verdict,
        recommended_mem_fraction_static=rec_frac,
        recommended_cuda_graph_max_bs=rec_bs,
        mem_fraction_static=frac,
        default_mem_fraction_static=default_frac,
        free_at_start_gib=p.free_at_start,
        weights_per_rank_gib=p.weights,
        free_after_weights_gib=p.free_after_weights,
        kv_budget_gib=e.budget_gib,
        cell_bytes_budget=p.cell_budget,
        cell_bytes_actual=p.cell_actual,
        kv_cache_dtype=p.kv_dtype,
        page_size=p.page_size,
        cuda_graph_max_bs=0 if p.disable_graph else p.max_bs,
        cuda_graph_batch_sizes=p.sizes(p.max_bs),
        margin_gib=float(margin_gib),
        headroom_gib=e.avail_after_pool_gib - e.need_gib - float(margin_gib),
        sglang_version=p.version_str,
        model_family=spec.family,
        notes=p.notes,
    )
