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

import json
import math
import os
import re
import struct
from dataclasses import asdict, dataclass, field

from ansible_collections.llmops.sglang.plugins.module_utils import gpu_arch

GIB = 1 << 30
MIB = 1 << 20

# ---------------------------------------------------------------------------------------------------------------------
# Documented constants (docs/memory.md explains each one)
# ---------------------------------------------------------------------------------------------------------------------

#: Version whose behaviour is assumed when none is given: the reference deployment (GLM-5, Feb 2026 main) sits between
#: 0.5.8 and 0.5.9, and 0.5.9 is the closest release.
DEFAULT_SGLANG_VERSION = "0.5.9"

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

#: CUDA-graph capture memory model: need = base(attention family) + PER_SIZE * number of captured batch sizes
#: + PER_BS * largest captured batch size (GiB). Calibrated on SGLang's logged "Capture cuda graph end ... mem usage":
#: 0.93 GB for 13 sizes (QwQ-32B TP4; model: 0.71), 1.0 GB for 36 sizes / bs 256 (model: 1.12), 1.44 GB for 52 sizes /
#: bs 512 (model: 1.53). MLA/DSA models carry bigger per-model buffers (DeepSeek ~5-6 GB with FA3, issue #16143);
#: for GLM-5 on an RTX PRO 6000 the reference story bounds the need between ~1.5 GiB (0.95 died with that much left)
#: and 8.6 GiB (0.88 started), and the DSA base puts the default-bs estimate at 3.03 GiB, inside that window.
GRAPH_BASE_GIB = {"mha": 0.5, "mla": 1.5, "dsa": 2.0}
GRAPH_PER_SIZE_GIB = 0.01
GRAPH_PER_BS_GIB = 0.001

#: Headroom kept above the estimated graph need when recommending a fraction (GiB).
DEFAULT_MARGIN_GIB = 1.0

#: A KV pool smaller than this is not a useful server: the recommendation never goes below it.
DEFAULT_MIN_KV_TOKENS = 8192

#: Lowest mem_fraction_static the recommendation will consider.
MIN_RECOMMENDED_FRACTION = 0.30

#: When a capture OOM only tells how much the graphs took before failing, the full need is assumed this much bigger
#: (the largest batch size is captured first, but the smaller ones still add memory).
OOM_NEED_GROWTH = 1.5

VERDICTS = ("ok", "oom_cuda_graph", "oom_kv_pool", "oom_weights")

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
DSA_ARCHITECTURES = ("DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM")


class PlanError(ValueError):
    """Bad or insufficient input: the message says what was expected and what was found."""


# ---------------------------------------------------------------------------------------------------------------------
# Versions and GPU arch
# ---------------------------------------------------------------------------------------------------------------------


def parse_version(version):
    """'0.5.9', 'v0.5.9.post1', '0.5.8+git123' -> (0, 5, 9). None -> DEFAULT_SGLANG_VERSION."""
    if version is None or version == "":
        version = DEFAULT_SGLANG_VERSION
    if isinstance(version, tuple):
        return tuple(int(p) for p in version[:3]) + (0,) * (3 - len(version[:3]))
    m = re.match(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?", str(version))
    if not m:
        raise PlanError("SGLang version %r is not of the form X.Y.Z (e.g. 0.5.9)" % (version,))
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))


def parse_gpu_arch(arch):
    """'sm_120', 'sm120a', '12.0', '120', 90 -> (major, minor); None -> None (spellings: gpu_arch.parse)."""
    if arch is None or arch == "":
        return None
    try:
        return gpu_arch.parse(arch)
    except gpu_arch.ArchError as exc:
        raise PlanError(str(exc)) from None


def context_overhead_gib(gpu_arch=None):
    """Default GiB lost before weights load (CUDA context, NCCL) for an arch; see CONTEXT_OVERHEAD_GIB."""
    cc = parse_gpu_arch(gpu_arch)
    if cc is None:
        return DEFAULT_CONTEXT_OVERHEAD_GIB
    return CONTEXT_OVERHEAD_GIB.get(cc[0], DEFAULT_CONTEXT_OVERHEAD_GIB)


# ---------------------------------------------------------------------------------------------------------------------
# Model description
# ---------------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ModelSpec:
    """What the memory arithmetic needs to know about a model (from its config.json)."""

    architecture: str
    family: str  # "mha" (MHA/GQA), "mla", "dsa" (MLA + DSA/NSA index cache)
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    v_head_dim: int
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    index_head_dim: int = 0
    dtype: str = "bf16"
    context_length: int | None = None
    quantization: str | None = None
    notes: tuple = ()

    def as_dict(self):
        return asdict(self)


def _first(cfg, *keys, default=None):
    for k in keys:
        v = cfg.get(k)
        if v is not None:
            return v
    return default


def _canonical_model_dtype(value):
    s = str(value or "bfloat16").lower().replace("torch.", "")
    if s in ("bfloat16", "bf16"):
        return "bf16"
    if s in ("float16", "fp16", "half"):
        return "fp16"
    if s in ("float32", "fp32", "float"):
        # SGLang's --dtype auto serves float32 checkpoints in bfloat16.
        return "bf16"
    return "bf16"


def _quantization(cfg):
    q = cfg.get("quantization_config")
    if not isinstance(q, dict):
        return None
    method = q.get("quant_method") or q.get("quant_algo")
    algo = q.get("quant_algo") or q.get("fmt") or q.get("format")
    if method and algo and str(algo).lower() != str(method).lower():
        return "%s:%s" % (method, algo)
    return str(method) if method else None


def load_config(source):
    """A config dict from a dict, a config.json path, or a model directory."""
    if isinstance(source, dict):
        return source
    path = os.fspath(source)
    if os.path.isdir(path):
        path = os.path.join(path, "config.json")
    if not os.path.isfile(path):
        raise PlanError(
            "no model config at %s: pass a model directory containing config.json, or the file itself" % path
        )
    try:
        with open(path, encoding="utf-8") as fh:
            cfg = json.load(fh)
    except (OSError, ValueError) as exc:
        raise PlanError("cannot read %s as JSON: %s" % (path, exc)) from exc
    if not isinstance(cfg, dict):
        raise PlanError("%s does not hold a JSON object" % path)
    return cfg


def model_from_config(source):
    """Describe a model for the memory arithmetic from config.json (dict, file path, or model directory)."""
    cfg = load_config(source)
    notes = []
    top = cfg
    text = cfg.get("text_config") if isinstance(cfg.get("text_config"), dict) else None
    if text is not None and "num_hidden_layers" not in cfg:
        merged = dict(text)
        for k in ("architectures", "torch_dtype", "quantization_config"):
            if k in cfg and k not in merged:
                merged[k] = cfg[k]
        cfg = merged
        notes.append("multimodal config: sized from text_config; SGLang lowers the default fraction for VLMs")
    archs = _first(top, "architectures", default=None) or _first(cfg, "architectures", default=None) or ["unknown"]
    arch = archs[0] if isinstance(archs, list) and archs else str(archs)

    layers = _first(cfg, "num_hidden_layers", "n_layers", "num_layers", "n_layer")
    heads = _first(cfg, "num_attention_heads", "n_head", "n_heads")
    hidden = _first(cfg, "hidden_size", "d_model", "n_embd")
    missing = [n for n, v in (("num_hidden_layers", layers), ("num_attention_heads", heads)) if v is None]
    if missing:
        raise PlanError("config.json lacks %s: cannot size the KV cache" % ", ".join(missing))
    layers, heads = int(layers), int(heads)
    if layers <= 0 or heads <= 0:
        raise PlanError(
            "config.json has num_hidden_layers=%s, num_attention_heads=%s: both must be > 0" % (layers, heads)
        )
    kv_heads = int(_first(cfg, "num_key_value_heads", "num_kv_heads", "multi_query_group_num", default=heads))
    head_dim = _first(cfg, "head_dim")
    if head_dim is None:
        if hidden is None:
            raise PlanError("config.json has neither head_dim nor hidden_size: cannot derive the head size")
        head_dim = int(hidden) // heads
    head_dim = int(head_dim)
    kv_lora_rank = int(_first(cfg, "kv_lora_rank", default=0) or 0)
    rope = int(_first(cfg, "qk_rope_head_dim", default=0) or 0)
    index_head_dim = int(_first(cfg, "index_head_dim", default=0) or 0)
    if kv_lora_rank:
        family = "mla"
        if index_head_dim or arch in DSA_ARCHITECTURES or cfg.get("index_topk") is not None:
            family = "dsa"
            index_head_dim = index_head_dim or 128
        v_head_dim = int(_first(cfg, "v_head_dim", default=head_dim))
    else:
        family = "mha"
        v_head_dim = int(_first(cfg, "v_head_dim", default=head_dim))
    if cfg.get("layer_types") and any("sliding" in str(t) or "linear" in str(t) for t in cfg["layer_types"]):
        notes.append("hybrid sliding-window/linear layers: SGLang sizes those pools separately; this is an upper bound")
    if cfg.get("layers_block_type") or "mamba" in arch.lower():
        notes.append("Mamba/hybrid model: the mamba state cache is not modelled")
    ctx = _first(cfg, "max_position_embeddings", "seq_length", "max_sequence_length", "n_positions")
    return ModelSpec(
        architecture=arch,
        family=family,
        num_layers=layers,
        hidden_size=int(hidden) if hidden is not None else head_dim * heads,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=v_head_dim,
        kv_lora_rank=kv_lora_rank,
        qk_rope_head_dim=rope,
        index_head_dim=index_head_dim,
        dtype=_canonical_model_dtype(_first(cfg, "torch_dtype", "dtype", default=_first(top, "torch_dtype"))),
        context_length=int(ctx) if ctx is not None else None,
        quantization=_quantization(cfg) or _quantization(top),
        notes=tuple(notes),
    )


def _as_model(model):
    if isinstance(model, ModelSpec):
        return model
    return model_from_config(model)


# ---------------------------------------------------------------------------------------------------------------------
# KV cache dtype, page size, cell sizes
# ---------------------------------------------------------------------------------------------------------------------


def canonical_kv_dtype(kv_cache_dtype):
    key = str(kv_cache_dtype or "auto").strip().lower().replace("torch.", "")
    if key not in _KV_DTYPE_ALIASES:
        raise PlanError(
            "kv-cache dtype %r is not known: use auto, bf16, fp16, fp8_e4m3, fp8_e5m2 or fp4_e2m1" % (kv_cache_dtype,)
        )
    return _KV_DTYPE_ALIASES[key]


def resolve_kv_cache_dtype(model, kv_cache_dtype="auto", gpu_arch=None):
    """The dtype SGLang's pool will use: 'auto' is the model dtype, except DSA models on SM>=10 get fp8_e4m3."""
    model = _as_model(model)
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
    return DSA_PAGE_SIZE if _as_model(model).family == "dsa" else 1


def kv_heads_per_rank(model, tp=1):
    """max(1, kv_heads // tp): replicated when TP exceeds the KV heads. Raises when TP splits heads unevenly."""
    model = _as_model(model)
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


def _layers_per_rank(model, pp=1):
    pp = int(pp)
    if pp < 1:
        raise PlanError("pp must be >= 1, got %d" % pp)
    if pp > model.num_layers:
        raise PlanError("pp=%d exceeds the model's %d layers" % (pp, model.num_layers))
    return -(-model.num_layers // pp)  # the biggest pipeline stage


def _dsa_index_bytes_per_layer(model):
    return model.index_head_dim + model.index_head_dim // NSA_QUANT_BLOCK * 4


def cell_bytes(model, tp=1, pp=1, kv_dtype="bf16", sglang_version=None, *, actual=True):
    """Bytes per token per rank of the KV pool.

    actual=True: what the pool allocates per slot. actual=False: what the profiler budgets (the token count divisor).
    They differ only for DSA + fp8 KV before 0.5.18 (budget 576+132 B/layer, pool 656+132 B/layer).
    """
    model = _as_model(model)
    dt = canonical_kv_dtype(kv_dtype)
    if dt == "auto":
        dt = resolve_kv_cache_dtype(model, dt)
    elt = KV_ELEMENT_BYTES[dt]
    layers = _layers_per_rank(model, pp)
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
        if dt == "fp8_e4m3" and (actual or budget_fixed):
            stored = model.kv_lora_rank + model.kv_lora_rank // NSA_QUANT_BLOCK * 4
            stored += model.qk_rope_head_dim * NSA_ROPE_BYTES
            cell = stored * layers
        cell += _dsa_index_bytes_per_layer(model) * layers
    return cell


# ---------------------------------------------------------------------------------------------------------------------
# Weights from the checkpoint
# ---------------------------------------------------------------------------------------------------------------------


def read_safetensors_header(path):
    """The JSON header of a .safetensors file (8-byte little-endian length, then that many bytes of JSON)."""
    with open(path, "rb") as fh:
        raw = fh.read(8)
        if len(raw) != 8:
            raise PlanError("%s is too short to be a safetensors file" % path)
        (length,) = struct.unpack("<Q", raw)
        size = os.fstat(fh.fileno()).st_size
        if length > size - 8 or length > 512 * MIB:
            raise PlanError("%s: header length %d does not fit the file (%d bytes)" % (path, length, size))
        try:
            header = json.loads(fh.read(length).decode("utf-8"))
        except ValueError as exc:
            raise PlanError("%s: header is not JSON: %s" % (path, exc)) from exc
    if not isinstance(header, dict):
        raise PlanError("%s: header is not a JSON object" % path)
    return header


def safetensors_data_bytes(path):
    """Bytes of tensor data in one .safetensors file (sum of data_offsets spans)."""
    total = 0
    for name, meta in read_safetensors_header(path).items():
        if name == "__metadata__" or not isinstance(meta, dict):
            continue
        begin, end = meta["data_offsets"]
        total += int(end) - int(begin)
    return total


def checkpoint_weight_bytes(model_dir):
    """Total checkpoint bytes: model.safetensors.index.json metadata.total_size, else the safetensors headers."""
    model_dir = os.fspath(model_dir)
    if not os.path.isdir(model_dir):
        raise PlanError("%s is not a model directory" % model_dir)
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.isfile(index):
        try:
            with open(index, encoding="utf-8") as fh:
                total = json.load(fh).get("metadata", {}).get("total_size")
        except (OSError, ValueError) as exc:
            raise PlanError("cannot read %s: %s" % (index, exc)) from exc
        if total:
            return int(total)
    files = sorted(f for f in os.listdir(model_dir) if f.endswith(".safetensors"))
    if not files:
        raise PlanError(
            "%s has no model.safetensors.index.json and no *.safetensors files: pass the weights per rank instead"
            % model_dir
        )
    return sum(safetensors_data_bytes(os.path.join(model_dir, f)) for f in files)


def weights_per_rank_gib(total_bytes, tp=1, pp=1):
    """Checkpoint bytes spread evenly over TP x PP ranks, in GiB (replicated norms/embeddings are ignored)."""
    return float(total_bytes) / (int(tp) * int(pp)) / GIB


# ---------------------------------------------------------------------------------------------------------------------
# SGLang defaults: mem_fraction_static, chunked prefill, CUDA-graph batch sizes
# ---------------------------------------------------------------------------------------------------------------------


def _tp_table_fraction(n, version):
    if n >= 16:
        return 0.79
    if n >= 8:
        if version < (0, 3, 0):
            return 0.83
        if version < (0, 4, 0):
            return 0.82
        return 0.81
    if n >= 4:
        return 0.85
    if n >= 2:
        return 0.87
    return 0.88


def default_graph_settings(sglang_version, gpu_mem_mib, tp=1, gpu_arch=None):
    """(chunked_prefill_size, cuda_graph_max_bs) SGLang picks when neither flag is given.

    0.5.3+: by GPU memory class (c.2). Before 0.5.3 the decode list default ended at 160 (8/80 on GPUs under 25 GB),
    chunked prefill 8192 (2048 under 35 GiB) -- an approximation, the reference does not state it.
    """
    v = parse_version(sglang_version)
    tp = int(tp)
    if gpu_mem_mib is None:
        return (8192, 160) if v < (0, 5, 3) else (8192, 256 if tp < 4 else 512)
    g = float(gpu_mem_mib)
    if v < (0, 5, 3):
        if g < 25000:
            return (2048, 8 if tp < 4 else 80)
        return (2048 if g < 35 * 1024 else 8192, 160)
    cc = parse_gpu_arch(gpu_arch)
    if g < 20 * 1024:
        return (2048, 8)
    if g < 35 * 1024:
        if v >= (0, 5, 20) and cc is not None and cc[0] >= 10:
            return (4096, 48 if tp < 4 else 160)
        return (2048, 24 if tp < 4 else 80)
    if g < 60 * 1024:
        return (4096, 32 if tp < 4 else 160)
    if g < 160 * 1024:
        return (8192, 256 if tp < 4 else 512)
    return (16384, 512)


def default_mem_fraction_static(
    sglang_version,
    gpu_mem_mib,
    tp=1,
    pp=1,
    *,
    gpu_arch=None,
    chunked_prefill_size=None,
    cuda_graph_max_bs=None,
    speculative=None,
    dp_size=1,
    enable_dp_attention=False,
    piecewise_cuda_graph_sizes=0,
    mla=False,
    prefill_cuda_graph_sizes=0,
    deepep=False,
    post_capture_kv_sizing=False,
):
    """SGLang's default --mem-fraction-static (ServerArgs._handle_gpu_memory_settings), by version.

    gpu_mem_mib is the smallest card's nvidia-smi memory.total (MiB). speculative: None, "eagle" (and other draft
    algorithms, +2 GiB) or "standalone" (+6 GiB). VLM scaling and the AMD aiter rule are not modelled.
    """
    v = parse_version(sglang_version)
    tp, pp = int(tp), int(pp)
    if gpu_mem_mib is None:
        return 0.95 if v >= (0, 5, 20) else 0.88
    g = float(gpu_mem_mib)
    gib = 1024.0
    if v < (0, 4, 6):
        return _tp_table_fraction(tp, v)
    if v < (0, 4, 7):
        if g <= 80 * gib:
            return _tp_table_fraction(tp, v)
        return round((g - 13 * gib) / g, 3)
    if v < (0, 4, 8):
        if g <= 80 * gib:
            return _tp_table_fraction(tp * pp, v)
        if g > 180 * gib:
            return 0.79
        if g > 96 * gib:
            return round((g - 18 * gib) / g, 3)
        return 0.88
    if v < (0, 5, 3):
        if g < 35 * gib:
            reserved = (2.8 + tp * pp / 10.0) * gib
        elif g < 90 * gib:
            reserved = (9.5 + tp * pp / 2.0) * gib
        else:
            reserved = (12 + tp * pp / 2.0) * gib
        return round((g - reserved) / g, 3)
    chunk, max_bs = default_graph_settings(v, g, tp, gpu_arch)
    chunk = chunked_prefill_size if chunked_prefill_size is not None else chunk
    max_bs = cuda_graph_max_bs if cuda_graph_max_bs is not None else max_bs
    if v >= (0, 5, 20) and post_capture_kv_sizing and not mla:
        reserved = 1536 + tp * pp / 8.0 * 1024
    else:
        reserved = 512 + max(chunk, 2048) * 1.5 + tp * pp / 8.0 * 1024
        graph = max_bs * 2
        if v >= (0, 5, 20):
            if prefill_cuda_graph_sizes:
                graph += 1536 if mla else 8 * prefill_cuda_graph_sizes
            if deepep:
                graph += 2048
        reserved += graph
        if enable_dp_attention:
            reserved += max_bs * dp_size * 3
            if max_bs > 300:
                reserved += max_bs * dp_size * 1.5
        reserved += piecewise_cuda_graph_sizes * 8
        if g > 60 * gib:
            reserved = max(reserved, 10 * gib)
    if speculative:
        reserved += 6 * gib if str(speculative).lower() == "standalone" else 2 * gib
    return round((g - reserved) / g, 3)


def cuda_graph_batch_sizes(max_bs, disable_padding=False):
    """Decode batch sizes SGLang captures (0.5.9 _generate_cuda_graph_batch_sizes), cut at max_bs, ascending."""
    max_bs = int(max_bs)
    if max_bs < 1:
        return []
    if disable_padding:
        return list(range(1, max_bs + 1))
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    return [bs for bs in sizes if bs <= max_bs]


def _count_in_range(start, stop_incl, step, limit):
    """How many of range(start, stop_incl + 1, step) are <= limit."""
    top = min(stop_incl, limit)
    return 0 if top < start else (top - start) // step + 1


def cuda_graph_size_stats(max_bs, disable_padding=False):
    """(number of captured sizes, largest captured size) of cuda_graph_batch_sizes(max_bs) in O(1)."""
    max_bs = int(max_bs)
    if max_bs < 1:
        return 0, 0
    if disable_padding:
        return max_bs, max_bs
    count = sum(1 for b in (1, 2, 4, 8, 12) if b <= max_bs)
    count += _count_in_range(16, 256, 8, max_bs) + _count_in_range(272, 496, 16, max_bs)
    count += _count_in_range(512, max_bs, 32, max_bs)
    if max_bs >= 512:
        largest = 512 + (max_bs - 512) // 32 * 32
    elif max_bs >= 272:
        largest = min(272 + (max_bs - 272) // 16 * 16, 496)
    elif max_bs >= 16:
        largest = min(16 + (max_bs - 16) // 8 * 8, 256)
    else:
        largest = max(b for b in (1, 2, 4, 8, 12) if b <= max_bs)
    return count, largest


def cuda_graph_need_gib_for(max_bs, family="mha", base_gib=None, disable_padding=False):
    """cuda_graph_need_gib(cuda_graph_batch_sizes(max_bs)) without building the list (any max_bs in O(1))."""
    count, largest = cuda_graph_size_stats(max_bs, disable_padding)
    if not count:
        return 0.0
    base = GRAPH_BASE_GIB.get(family, GRAPH_BASE_GIB["mha"]) if base_gib is None else float(base_gib)
    return base + GRAPH_PER_SIZE_GIB * count + GRAPH_PER_BS_GIB * largest


def cuda_graph_need_gib(batch_sizes, family="mha", base_gib=None):
    """Estimated decode-graph capture memory (GiB): base(family) + PER_SIZE x len(sizes) + PER_BS x max(sizes)."""
    sizes = list(batch_sizes)
    if not sizes:
        return 0.0
    base = GRAPH_BASE_GIB.get(family, GRAPH_BASE_GIB["mha"]) if base_gib is None else float(base_gib)
    return base + GRAPH_PER_SIZE_GIB * len(sizes) + GRAPH_PER_BS_GIB * max(sizes)


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
    spec = _as_model(model)
    kv_heads_per_rank(spec, tp)  # validate the parallel split before touching the checkpoint
    _layers_per_rank(spec, pp)
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


# ---------------------------------------------------------------------------------------------------------------------
# Advice after a failed start-up: the only place these numbers are computed (diagnosis text, sglang-plan and the
# server role's retry all call these two functions; docs/memory.md "After a failed start-up" explains the choice)
# ---------------------------------------------------------------------------------------------------------------------

#: KV-OOM advice: the fraction suggested is the minimum viable one plus this share of the pre-load memory, so the pool
#: holds a useful number of tokens rather than a handful.
KV_OOM_HEADROOM_FRACTION = 0.03

#: KV-OOM advice: above this fraction the (1 - fraction) slack cannot hold CUDA graphs and activations any more;
#: the advice is then more GPUs (or a smaller checkpoint) instead of a fraction.
KV_OOM_MAX_FRACTION = 0.93


def _round_floats(d, ndigits):
    out = {}
    for k, v in d.items():
        if isinstance(v, float):
            out[k] = round(v, ndigits)
        elif isinstance(v, dict):
            out[k] = _round_floats(v, ndigits)
        else:
            out[k] = v
    return out


def _finite(name, value, *, positive=False, allow_none=True):
    if value is None:
        if allow_none:
            return None
        raise PlanError("%s is required" % name)
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise PlanError("%s must be a number, got %r" % (name, value)) from None
    if not math.isfinite(f):
        raise PlanError("%s must be a finite number, got %r" % (name, value))
    if positive and f <= 0:
        raise PlanError("%s must be > 0, got %s" % (name, value))
    return f


@dataclass
class CaptureOomAdvice:
    """What to relaunch with after 'Capture cuda graph failed: CUDA out of memory'.

    mem_fraction_static: the fraction to use (None: no fraction helps). cuda_graph_max_bs: a lower graph max batch
    size when the fraction alone cannot make room (None: keep it). alternative_cuda_graph_max_bs: the largest captured
    batch size that would fit at the failed fraction (the other way out; None when none does). inputs: the figures the
    advice was computed from (feeding them back to capture_oom_advice gives the same advice)."""

    mem_fraction_static: float | None
    cuda_graph_max_bs: int | None
    alternative_cuda_graph_max_bs: int | None
    need_estimate_gib: float
    required_avail_gib: float
    free_more_gib: float
    pool_ratio: float
    reason: str
    inputs: dict = field(default_factory=dict)

    def as_dict(self, ndigits=3):
        return _round_floats(asdict(self), ndigits)


def _pool_ratio(pre, fraction, free_after_weights, kv_pool):
    """Actual pool bytes per budgeted byte, from the failed attempt's own figures (1.0 when they do not tell)."""
    if free_after_weights is None or kv_pool is None:
        return 1.0
    budget = free_after_weights - pre * (1.0 - fraction)
    if budget <= 0 or kv_pool <= 0:
        return 1.0
    # The pool also holds one page of padding; a ratio below 1 or above 2 means the figures are not one attempt's.
    ratio = kv_pool / budget
    return ratio if 1.0 <= ratio <= 2.0 else 1.0


def _scaled_graph_need(need, max_bs, bs, family):
    full = cuda_graph_need_gib_for(max_bs, family)
    return need * cuda_graph_need_gib_for(bs, family) / full if full else 0.0


def capture_oom_advice(
    *,
    pre_load_free_gib,
    capture_free_gib,
    mem_fraction_static,
    tried_to_allocate_gib=None,
    free_at_oom_gib=None,
    free_after_weights_gib=None,
    kv_pool_gib=None,
    observed_need_gib=None,
    cuda_graph_max_bs=None,
    family="mha",
    margin_gib=DEFAULT_MARGIN_GIB,
    min_fraction=MIN_RECOMMENDED_FRACTION,
    growth=OOM_NEED_GROWTH,
):
    """The fraction (or graph max batch size) that should survive a CUDA-graph capture that ran out of memory.

    Every input is a figure SGLang logged for the failed attempt (all GiB, as SGLang prints "GB"), taken from the
    rank that failed (or the smallest over ranks):

    pre_load_free_gib       "Load weight begin. avail mem=" (what mem_fraction_static is a fraction of)
    capture_free_gib        "Capture cuda graph begin ... avail mem=" (else "Memory pool end. avail mem=")
    mem_fraction_static     the fraction the attempt ran with (server_args)
    tried_to_allocate_gib   torch's "Tried to allocate X" in the OOM message
    free_at_oom_gib         torch's "of which Y is free"
    free_after_weights_gib  "Load weight end. avail mem=" (bounds the fraction from below: the pool must stay > 0)
    kv_pool_gib             "KV Cache is allocated ... KV size:" (with free_after_weights_gib gives the pool ratio)
    observed_need_gib       a capture need measured by a successful run ("Capture cuda graph end ... mem usage=")
    cuda_graph_max_bs       the captured maximum batch size (server_args; default 512)
    family                  "mha", "mla" or "dsa" (only shapes the scaling to a smaller batch size)

    The capture needed at least (capture_free - free_at_oom) + tried_to_allocate, and more than capture_free; that
    lower bound is grown by ``growth`` (the failed capture had more sizes to go), the margin is added, and the fraction
    is lowered until the pool shrinks by the deficit: 0.01 of fraction frees pre_load x 0.01 x pool_ratio GiB, where
    pool_ratio = kv_pool / (free_after_weights - pre_load x (1 - fraction)) is what the pool really takes per budgeted
    byte (1.11 for DSA + fp8 KV before 0.5.18). Returns a CaptureOomAdvice.
    """
    f = _finite("mem_fraction_static", mem_fraction_static, allow_none=False)
    if not 0.0 < f < 1.0:
        raise PlanError("mem_fraction_static must be in (0, 1), got %s" % mem_fraction_static)
    pre = _finite("pre_load_free_gib", pre_load_free_gib, positive=True, allow_none=False)
    avail = _finite("capture_free_gib", capture_free_gib, allow_none=False)
    tried = _finite("tried_to_allocate_gib", tried_to_allocate_gib)
    free = _finite("free_at_oom_gib", free_at_oom_gib)
    after_weights = _finite("free_after_weights_gib", free_after_weights_gib)
    kv_pool = _finite("kv_pool_gib", kv_pool_gib)
    observed = _finite("observed_need_gib", observed_need_gib)
    margin = _finite("margin_gib", margin_gib, allow_none=False)
    max_bs = int(cuda_graph_max_bs) if cuda_graph_max_bs else 512
    if max_bs < 1:
        raise PlanError("cuda_graph_max_bs must be >= 1, got %s" % cuda_graph_max_bs)
    inputs = dict(
        pre_load_free_gib=pre,
        capture_free_gib=avail,
        mem_fraction_static=f,
        tried_to_allocate_gib=tried,
        free_at_oom_gib=free,
        free_after_weights_gib=after_weights,
        kv_pool_gib=kv_pool,
        observed_need_gib=observed,
        cuda_graph_max_bs=max_bs,
        family=family,
        margin_gib=margin,
    )
    if observed is not None:
        need = observed
        how = "observed need %.2f GiB" % need
    else:
        used = max(avail - free, 0.0) if free is not None else avail
        lower = max(used + (tried or 0.0), avail)
        need = lower * float(growth)
        how = "capture needed > %.2f GiB (used %.2f, then asked %.2f); assumed %.2f" % (lower, used, tried or 0.0, need)
    ratio = _pool_ratio(pre, f, after_weights, kv_pool)
    required = need + margin
    deficit = required - avail
    per_hundredth = pre * ratio / 100.0  # GiB the pool gives back per 0.01 of fraction
    f_h = math.floor(f * 100 + 1e-9)  # fractions are handled in hundredths
    steps = max(math.ceil(deficit / per_hundredth - 1e-9), 1)
    floor_h = math.ceil(float(min_fraction) * 100 - 1e-9)
    if after_weights is not None:
        # the KV budget after_weights - pre x (1 - f) must stay > 0
        floor_h = max(floor_h, math.floor((1.0 - after_weights / pre) * 100) + 1)
    # the other way out: the largest captured batch size that fits at the failed fraction
    alternative = None
    for bs in reversed(cuda_graph_batch_sizes(max_bs)):
        if bs < max_bs and avail >= _scaled_graph_need(need, max_bs, bs, family) + margin:
            alternative = bs
            break
    new_h = f_h - steps
    if new_h >= floor_h:
        return CaptureOomAdvice(
            new_h / 100.0,
            None,
            alternative,
            need,
            required,
            max(deficit, 0.0),
            ratio,
            how + "; lower the fraction by %d hundredths to free %.2f GiB" % (steps, steps * per_hundredth),
            inputs,
        )
    # The fraction alone cannot make room: go to the floor and lower the graph max batch size.
    h = min(floor_h, f_h)
    avail_at = avail + (f_h - h) * per_hundredth
    for bs in reversed(cuda_graph_batch_sizes(max_bs)):
        if bs >= max_bs:
            continue
        scaled = _scaled_graph_need(need, max_bs, bs, family)
        if avail_at >= scaled + margin:
            return CaptureOomAdvice(
                h / 100.0,
                bs,
                alternative,
                scaled,
                scaled + margin,
                max(avail_at - avail, 0.0),
                ratio,
                how + "; at fraction %.2f %.2f GiB is left: lower cuda_graph_max_bs to %d" % (h / 100.0, avail_at, bs),
                inputs,
            )
    return CaptureOomAdvice(
        None,
        None,
        None,
        need,
        required,
        max(deficit, 0.0),
        ratio,
        how + "; even bs 1 at fraction %.2f does not fit: disable CUDA graphs or add GPUs" % (h / 100.0),
        inputs,
    )


@dataclass
class KvOomAdvice:
    """What to relaunch with when the KV pool could not be sized after the weights loaded.

    action: "raise_mem_fraction_static" (mem_fraction_static is the value to use) or "add_gpus" (tp_size is the next
    TP size when the current one is known; mem_fraction_static is what a fraction alone would need, for reference).
    minimum_fraction: the fraction at which the KV budget is zero (SGLang's own "Raise above" figure when logged)."""

    action: str
    mem_fraction_static: float
    minimum_fraction: float
    tp_size: int | None
    reason: str
    inputs: dict = field(default_factory=dict)

    def as_dict(self, ndigits=4):
        return _round_floats(asdict(self), ndigits)


def kv_oom_advice(
    *,
    pre_load_free_gib=None,
    free_after_weights_gib=None,
    mem_fraction_static=None,
    logged_min_fraction=None,
    tp_size=None,
    headroom_fraction=KV_OOM_HEADROOM_FRACTION,
    max_fraction=KV_OOM_MAX_FRACTION,
):
    """The fraction (or more GPUs) that lets the KV pool be sized after the weights loaded.

    Inputs are the failed attempt's logged figures (GiB): pre_load_free_gib ("Load weight begin. avail mem="),
    free_after_weights_gib ("Load weight end. avail mem="), the fraction it ran with, and logged_min_fraction when
    SGLang printed one ("Raise --mem-fraction-static above X" / "Not enough memory ... Current value"). The KV budget
    is free_after_weights - pre_load x (1 - fraction), so it is zero at 1 - free_after_weights / pre_load; the advice
    is that minimum plus headroom_fraction of pre-load memory, rounded up to 0.01. Above max_fraction the slack left
    for graphs and activations is too small: the advice becomes more GPUs (tp_size x 2). Returns a KvOomAdvice.
    """
    pre = _finite("pre_load_free_gib", pre_load_free_gib, positive=True)
    after = _finite("free_after_weights_gib", free_after_weights_gib)
    frac = _finite("mem_fraction_static", mem_fraction_static)
    logged = _finite("logged_min_fraction", logged_min_fraction)
    inputs = dict(
        pre_load_free_gib=pre,
        free_after_weights_gib=after,
        mem_fraction_static=frac,
        logged_min_fraction=logged,
        tp_size=int(tp_size) if tp_size else None,
    )
    if logged is not None:
        minimum = logged
        how = "SGLang asks for more than %.4f" % minimum
    elif pre is not None and after is not None:
        minimum = 1.0 - after / pre
        how = "the KV budget is zero at 1 - %.2f/%.2f GiB = %.4f" % (after, pre, minimum)
    else:
        raise PlanError(
            "KV-OOM advice needs the logged minimum fraction or both pre_load_free_gib and free_after_weights_gib"
        )
    value = math.ceil((minimum + float(headroom_fraction)) * 100 - 1e-9) / 100.0
    next_tp = int(tp_size) * 2 if tp_size else None
    if value > float(max_fraction):
        return KvOomAdvice(
            "add_gpus",
            value,
            minimum,
            next_tp,
            how + "; a fraction of %.2f leaves no room for graphs and activations: spread the model over more GPUs%s "
            "or use a smaller checkpoint" % (value, " (--tp-size %d)" % next_tp if next_tp else ""),
            inputs,
        )
    return KvOomAdvice(
        "raise_mem_fraction_static",
        value,
        minimum,
        None,
        how + "; raise --mem-fraction-static%s to %.2f" % (" from %.2f" % frac if frac is not None else "", value),
        inputs,
    )
