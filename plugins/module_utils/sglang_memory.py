# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""SGLang's GPU memory arithmetic: KV-pool size, default mem_fraction_static, CUDA-graph headroom.

This is the one place in the collection that knows how SGLang splits a GPU's memory. Pure functions and dataclasses,
standard library only, so it works as an Ansible module_util and from ``bin/sglang-plan``.

The arithmetic (see docs/memory.md for the worked example)::

    pre_load  = free GPU memory after torch.distributed init (GiB)      ~ total - context overhead
    avail     = free memory after the weights are loaded                 ~ pre_load - weights per rank
    rest      = avail - pre_load * (1 - mem_fraction_static)             the KV budget
    tokens    = floor(rest * 2**30 / budget_cell_bytes), capped, rounded down to the page size
    pool      = sum of the pool's tensors, (tokens + page_size) slots each  "KV Cache is allocated. ... KV size"
    left      = avail - segments(request table, each pool tensor, free list)  "Memory pool end. avail mem=..."
              (segments: PyTorch's caching allocator rounds every tensor on its own, torch_cuda_alloc)
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
    recommend_fraction,
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
    free_pages_bytes,
    kv_heads_per_rank,
    layers_per_rank,
    max_num_reqs,
    pool_tensor_bytes,
    req_to_token_bytes,
    resolve_kv_cache_dtype,
)
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_model import (
    GIB,
    ModelSpec,
    PlanError,
    as_model,
    checked_number,
    checkpoint_weight_bytes,
    weights_per_rank_gib,
)
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_release import (
    canonical_speculative_algorithm,
    captured_batch_sizes,
    default_graph_settings,
    context_overhead_gib,
    default_mem_fraction_static,
    parse_gpu_arch,
    parse_version,
)
from ansible_collections.llmops.sglang.plugins.module_utils.torch_cuda_alloc import CachingAllocator, reserved_bytes

# ---------------------------------------------------------------------------------------------------------------------
# Documented constants (docs/memory.md explains each one)
# ---------------------------------------------------------------------------------------------------------------------

#: A KV pool smaller than this is not a useful server: the recommendation never goes below it.
DEFAULT_MIN_KV_TOKENS = 8192

VERDICTS = ("ok", "oom_cuda_graph", "oom_kv_pool", "oom_weights", "oom_draft")


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

#: The largest --cuda-graph-max-bs the planner evaluates (a bound of the planner, not of SGLang: larger values only
#: make sense with a request pool of that size, and would take the planner seconds to list).
MAX_CUDA_GRAPH_BS = 65536


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
    req_to_token_gib: float = 0.0
    pool_reserved_gib: float = 0.0
    allocator_rounding_gib: float = 0.0
    draft_pool_gib: float = 0.0
    speculative_algorithm: str | None = None
    draft_layers: int = 0
    dp: int = 1
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
    req_to_token_gib: float = 0.0
    reserved_gib: float = 0.0
    rounding_gib: float = 0.0
    draft_pool_gib: float = 0.0


class _Planner:
    """Holds the resolved inputs; evaluates any (fraction, graph max bs) pair."""

    def __init__(self, model, a):
        self.notes = list(model.notes)
        self.model = model
        self.tp, self.pp, self.dp = a["tp"], a["pp"], a["dp"]
        if self.tp % self.dp:
            raise PlanError(
                "dp=%d does not divide tp=%d: DP attention needs tp / dp ranks per replica; use a dp that divides tp"
                % (a["dp"], a["tp"])
            )
        self.attn_tp = self.tp // self.dp
        self.version = parse_version(a["sglang_version"])
        self.version_str = "%d.%d.%d" % self.version
        cc = parse_gpu_arch(a["gpu_arch"])
        self.kv_dtype = resolve_kv_cache_dtype(model, a["kv_cache_dtype"], a["gpu_arch"])
        if model.family == "dsa" and canonical_kv_dtype(a["kv_cache_dtype"]) == "auto" and cc is None:
            self.notes.append(
                "GPU arch unknown: assumed kv-cache dtype %s (SGLang uses fp8_e4m3 on SM>=10)" % self.kv_dtype
            )
        if model.family == "dsa" and self.version < (0, 5, 9):
            self.notes.append("DSA models are supported by SGLang from 0.5.9 on")
        self.page_size = a["page_size"] if a["page_size"] is not None else default_page_size(model)
        nsa = a["nsa_backend"]
        self.cell_budget = cell_bytes(
            model, self.attn_tp, self.pp, self.kv_dtype, self.version, actual=False, nsa_backend=nsa
        )
        self.cell_actual = cell_bytes(
            model, self.attn_tp, self.pp, self.kv_dtype, self.version, actual=True, nsa_backend=nsa
        )
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
        # Speculative decoding: the draft model's KV pool holds as many tokens as the target's, draft_layers layers of
        # the same per-layer cell. Up to 0.5.13 the draft runner allocates it after the target has captured its
        # graphs, outside the budget (0.5.9 model_runner_kv_cache_mixin.py:125-130, :396-399); from 0.5.14 the
        # target's profiler scales its cell by (1 + draft_layers / num_layers) (0.5.14 pool_configurator.py:129-146).
        self.spec = a["speculative_algorithm"]
        self.draft_layers = 0
        self.draft_in_budget = False
        if self.spec in ("EAGLE", "EAGLE3", "NEXTN", "MTP", "STANDALONE"):
            self.draft_layers = a["draft_layers"] or model.draft_layers or 1
            nl = layers_per_rank(model, self.pp)
            if self.version >= (0, 5, 14):
                self.draft_in_budget = True
                self.cell_budget = int(self.cell_budget * (1 + self.draft_layers / nl))
                self.cell_actual = int(self.cell_actual * (1 + self.draft_layers / nl))
        self.pool_layers = layers_per_rank(model, self.pp) + (self.draft_layers if self.draft_in_budget else 0)
        self.draft_tokens = a["num_draft_tokens"] or 0
        self.gpu_mem_mib = a["gpu_mem_mib"]
        if a["free_at_start_gib"] is not None:
            self.free_at_start = a["free_at_start_gib"]
        else:
            if self.gpu_mem_mib is None:
                raise PlanError("need the GPU memory (gpu_mem_mib) or a measured free_at_start_gib")
            overhead = context_overhead_gib(a["gpu_arch"]) if a["context_overhead"] is None else a["context_overhead"]
            self.free_at_start = self.gpu_mem_mib / 1024.0 - overhead
        if self.free_at_start <= 0:
            raise PlanError("free memory at start must be > 0 GiB, got %.2f" % self.free_at_start)
        if a["free_after_weights_gib"] is not None:
            self.free_after_weights = a["free_after_weights_gib"]
            self.weights = (
                a["weights_gib"] if a["weights_gib"] is not None else self.free_at_start - self.free_after_weights
            )
        else:
            if a["weights_gib"] is None:
                raise PlanError(
                    "weights per rank unknown: pass a model directory with safetensors, weights_gib, "
                    "or a measured free_after_weights_gib"
                )
            self.weights = a["weights_gib"]
            self.free_after_weights = self.free_at_start - self.weights
        self.draft_weights = a["draft_weights_gib"] or 0.0
        self.nsa_backend = nsa
        self.max_total_tokens = a["max_total_tokens"]
        self.context_len = a["context_length"] or model.context_length or 4096
        self.max_running_requests = a["max_running_requests"]
        chunk, default_bs = default_graph_settings(self.version, self.gpu_mem_mib, self.tp)
        self.chunk = chunk
        self.max_bs = a["cuda_graph_max_bs"] if a["cuda_graph_max_bs"] is not None else default_bs
        self.disable_graph = bool(a["disable_cuda_graph"])
        self.disable_padding = bool(a["disable_cuda_graph_padding"])
        self.graph_base = a["graph_base_gib"]
        self.measured_need = a["cuda_graph_need"]

    def sizes(self, max_bs, reqs=None):
        """The decode batch sizes SGLang captures: its list cut at --cuda-graph-max-bs, then at the request table (which
        is added as a size when the list goes beyond it: 0.5.9 cuda_graph_runner.py:190-215)."""
        if self.disable_graph:
            return []
        return captured_batch_sizes(max_bs, reqs, self.disable_padding)

    def need(self, max_bs, reqs=None):
        if self.disable_graph:
            return 0.0
        family, base, pad = self.model.family, self.graph_base, self.disable_padding

        def model(bs):
            if reqs is not None and reqs < bs:
                return cuda_graph_need_gib(captured_batch_sizes(bs, reqs, pad), family, base)
            return cuda_graph_need_gib_for(bs, family, base, pad)

        if self.measured_need is not None:
            if max_bs == self.max_bs:
                return self.measured_need
            # scale a measured need by the model's shape when a smaller max bs is considered
            full = model(self.max_bs)
            return self.measured_need * model(max_bs) / full if full else 0.0
        return model(max_bs)

    def max_num_reqs(self, tokens):
        return max_num_reqs(
            self.version, tokens, self.context_len, max_running_requests=self.max_running_requests, dp=self.dp
        )

    def evaluate(self, fraction, max_bs):
        if self.free_after_weights <= 0:
            need = self.need(max_bs)
            return _Eval(0, 0.0, 0.0, self.free_after_weights, need, "oom_weights")
        budget = self.free_after_weights - self.free_at_start * (1.0 - fraction)
        tokens = int(budget * GIB) // self.cell_budget if budget > 0 else 0
        if self.max_total_tokens:
            tokens = min(tokens, int(self.max_total_tokens))
        tokens = tokens // self.page_size * self.page_size
        need = self.need(max_bs, self.max_num_reqs(tokens) if tokens > 0 else None)
        if tokens <= 0:
            return _Eval(0, budget, 0.0, self.free_after_weights, need, "oom_kv_pool")
        tensors = self.pool_tensors(tokens, self.pool_layers)
        req_bytes = req_to_token_bytes(
            self.version,
            tokens,
            self.context_len,
            max_running_requests=self.max_running_requests,
            dp=self.dp,
            draft_tokens=self.draft_tokens,
        )
        # what "Memory pool end" sees: the table, the pool's tensors and the free list, each rounded by the allocator
        alloc = CachingAllocator()
        alloc.malloc(req_bytes)
        alloc.malloc_all(tensors)
        alloc.malloc(free_pages_bytes(tokens, self.page_size))
        pool, req, reserved = sum(tensors) / GIB, req_bytes / GIB, alloc.reserved / GIB
        rounding = (alloc.reserved - alloc.requested) / GIB
        left = self.free_after_weights - reserved
        if reserved > self.free_after_weights:
            return _Eval(tokens, budget, pool, left, need, "oom_kv_pool", req, reserved, rounding)
        verdict = "ok" if left >= need else "oom_cuda_graph"
        draft = 0.0
        if self.draft_layers and not self.draft_in_budget:
            # up to 0.5.13 the draft weights and pool come after the target's graphs, from what they left
            draft = reserved_bytes(self.pool_tensors(tokens, self.draft_layers)) / GIB
            if verdict == "ok" and left - need < draft + self.draft_weights:
                verdict = "oom_draft"
        return _Eval(tokens, budget, pool, left, need, verdict, req, reserved, rounding, draft)

    def pool_tensors(self, tokens, layers):
        return pool_tensor_bytes(
            self.model,
            tokens,
            self.attn_tp,
            self.pp,
            self.kv_dtype,
            sglang_version=self.version,
            page_size=self.page_size,
            nsa_backend=self.nsa_backend,
            layers=layers,
        )


def plan(
    model,
    *,
    gpu_mem_mib=None,
    tp=1,
    pp=1,
    dp=1,
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
    max_total_tokens=None,
    max_running_requests=None,
    context_length=None,
    min_kv_tokens=DEFAULT_MIN_KV_TOKENS,
    speculative_algorithm=None,
    speculative_draft_model=None,
    speculative_draft_layers=None,
    speculative_num_draft_tokens=None,
    nsa_backend=None,
    attention=None,
):
    """Predict SGLang's start-up memory for one rank and recommend a mem_fraction_static.

    model: ModelSpec, config dict, config.json path, or model directory (a directory also yields the weights).
    gpu_mem_mib: nvidia-smi memory.total of the smallest GPU. weights_gib: weights per rank (GiB).
    free_at_start_gib / free_after_weights_gib: measured "Load weight begin/end avail mem" values (replace estimates).
    cuda_graph_need: measured capture memory (GiB) for cuda_graph_max_bs (replaces the estimate).
    dp: --dp with DP attention (KV heads split over tp / dp). speculative_*: --speculative-algorithm, the draft model
    directory (its layers and weights), draft layers (default: the draft config's or the model's
    num_nextn_predict_layers) and --speculative-num-draft-tokens. nsa_backend: --nsa-{prefill,decode}-backend.
    attention: "mha"/"mla"/"dsa" for an architecture no SGLang release registers. mem_fraction_static: None ->
    SGLang's default for the version. Every number must be finite and in range (PlanError). Returns a MemoryPlan.
    """
    a = dict(
        gpu_mem_mib=checked_number("gpu_mem_mib", gpu_mem_mib, minimum=0, exclusive=True),
        tp=checked_number("tp", tp, minimum=1, integer=True),
        pp=checked_number("pp", pp, minimum=1, integer=True),
        dp=checked_number("dp", dp, minimum=1, integer=True),
        mem_fraction_static=checked_number("mem_fraction_static", mem_fraction_static),
        page_size=checked_number("page_size", page_size, minimum=1, integer=True),
        weights_gib=checked_number("weights_gib", weights_gib, minimum=0),
        free_at_start_gib=checked_number("free_at_start_gib", free_at_start_gib, minimum=0, exclusive=True),
        free_after_weights_gib=checked_number("free_after_weights_gib", free_after_weights_gib),
        cuda_graph_max_bs=checked_number("cuda_graph_max_bs", cuda_graph_max_bs, minimum=1, integer=True),
        cuda_graph_need=checked_number("cuda_graph_need", cuda_graph_need, minimum=0),
        graph_base_gib=checked_number("graph_base_gib", graph_base_gib, minimum=0),
        margin_gib=checked_number("margin_gib", margin_gib, minimum=0),
        context_overhead=checked_number("context_overhead", context_overhead, minimum=0),
        max_total_tokens=checked_number("max_total_tokens", max_total_tokens, minimum=1, integer=True),
        max_running_requests=checked_number("max_running_requests", max_running_requests, minimum=1, integer=True),
        context_length=checked_number("context_length", context_length, minimum=1, integer=True),
        min_kv_tokens=checked_number("min_kv_tokens", min_kv_tokens, minimum=0, integer=True),
        draft_layers=checked_number("speculative_draft_layers", speculative_draft_layers, minimum=1, integer=True),
        num_draft_tokens=checked_number(
            "speculative_num_draft_tokens", speculative_num_draft_tokens, minimum=1, integer=True
        ),
        speculative_algorithm=canonical_speculative_algorithm(speculative_algorithm),
        kv_cache_dtype=kv_cache_dtype,
        sglang_version=sglang_version,
        gpu_arch=gpu_arch,
        nsa_backend=nsa_backend,
        disable_cuda_graph=disable_cuda_graph,
        disable_cuda_graph_padding=disable_cuda_graph_padding,
        draft_weights_gib=None,
    )
    if a["mem_fraction_static"] is not None and not 0.0 < a["mem_fraction_static"] < 1.0:
        raise PlanError("mem_fraction_static must be in (0, 1), got %s" % mem_fraction_static)
    if a["cuda_graph_max_bs"] is not None and a["cuda_graph_max_bs"] > MAX_CUDA_GRAPH_BS:
        raise PlanError(
            "cuda_graph_max_bs must be at most %d, got %d: use the largest batch size the server will run"
            % (MAX_CUDA_GRAPH_BS, a["cuda_graph_max_bs"])
        )
    version = parse_version(sglang_version)
    spec = as_model(model, attention)
    kv_heads_per_rank(spec, a["tp"] // a["dp"] if a["tp"] % a["dp"] == 0 else a["tp"])  # the split, before files
    layers_per_rank(spec, a["pp"])
    if speculative_draft_model is not None:
        if a["speculative_algorithm"] is None:
            raise PlanError(
                "a speculative draft model was given without a speculative algorithm: also give the algorithm "
                "(EAGLE, EAGLE3, STANDALONE ...)"
            )
        draft = as_model(speculative_draft_model)
        if a["draft_layers"] is None:
            # the draft config's num_nextn_predict_layers, else its layers (0.5.14 model_runner.py:436-456)
            a["draft_layers"] = draft.draft_layers or draft.num_layers
        if not isinstance(speculative_draft_model, (dict, ModelSpec)):
            path = os.fspath(speculative_draft_model)
            draft_dir = path if os.path.isdir(path) else os.path.dirname(path) or "."
            a["draft_weights_gib"] = weights_per_rank_gib(checkpoint_weight_bytes(draft_dir), a["tp"], 1)
    if a["weights_gib"] is None and a["free_after_weights_gib"] is None and not isinstance(model, (dict, ModelSpec)):
        path = os.fspath(model)
        model_dir = path if os.path.isdir(path) else os.path.dirname(path) or "."
        a["weights_gib"] = weights_per_rank_gib(checkpoint_weight_bytes(model_dir), a["tp"], a["pp"])
    p = _Planner(spec, a)
    default_frac = default_mem_fraction_static(
        version,
        p.gpu_mem_mib,
        p.tp,
        p.pp,
        cuda_graph_max_bs=a["cuda_graph_max_bs"],
        speculative=a["speculative_algorithm"],
        dp_size=p.dp,
        enable_dp_attention=p.dp > 1,
        mla=spec.family != "mha",
        multimodal=spec.multimodal,
        max_total_tokens=a["max_total_tokens"],
        context_length=a["context_length"],
    )
    if a["mem_fraction_static"] is None and default_frac <= 0:
        raise PlanError(
            "SGLang's default mem_fraction_static for these settings would be %.2f (its reserve for cuda_graph_max_bs "
            "%d and chunked prefill exceeds the %d MiB GPU): give a smaller cuda_graph_max_bs or a mem_fraction_static"
            % (default_frac, p.max_bs, p.gpu_mem_mib)
        )
    frac = a["mem_fraction_static"] if a["mem_fraction_static"] is not None else default_frac
    e = p.evaluate(frac, p.max_bs)
    margin, min_kv = a["margin_gib"], a["min_kv_tokens"]
    rec_frac, rec_bs = recommend_fraction(p, margin, min_kv)
    if rec_frac is None:
        p.notes.append(
            "no fraction >= %.2f leaves room for the CUDA graphs with a %d-token pool: use more GPUs (TP), a smaller "
            "kv-cache dtype, or --disable-cuda-graph" % (MIN_RECOMMENDED_FRACTION, min_kv)
        )
    if e.verdict == "oom_weights":
        p.notes.append("the weights (%.2f GiB/rank) do not fit in %.2f GiB free" % (p.weights, p.free_at_start))
    if e.verdict == "oom_draft":
        p.notes.append(
            "the target starts, but the draft model's %.2f GiB pool (+ %.2f GiB weights) does not fit after its graphs"
            % (e.draft_pool_gib, p.draft_weights)
        )
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
        cuda_graph_batch_sizes=p.sizes(p.max_bs, p.max_num_reqs(e.tokens) if e.tokens else None),
        margin_gib=margin,
        headroom_gib=e.avail_after_pool_gib - e.need_gib - margin,
        sglang_version=p.version_str,
        model_family=spec.family,
        req_to_token_gib=e.req_to_token_gib,
        pool_reserved_gib=e.reserved_gib,
        allocator_rounding_gib=e.rounding_gib,
        draft_pool_gib=e.draft_pool_gib,
        speculative_algorithm=p.spec,
        draft_layers=p.draft_layers,
        dp=p.dp,
        notes=p.notes,
    )
