# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""What the memory planner needs to know about a model, read from its directory: config.json (ModelSpec) and the
checkpoint's size (safetensors index or headers). Standard library only (Ansible module_util and bin/sglang-plan)."""

from __future__ import absolute_import, annotations, division, print_function

__metaclass__ = type

import json
import math
import os
import struct
from dataclasses import asdict, dataclass

from ansible_collections.llmops.sglang.plugins.module_utils.sglang_architectures import KNOWN_ARCHITECTURES

GIB = 1 << 30
MIB = 1 << 20

#: Architectures SGLang serves with DSA (NSA) sparse attention: MLA plus an index-K cache.
DSA_ARCHITECTURES = ("DeepseekV32ForCausalLM", "GlmMoeDsaForCausalLM")


class PlanError(ValueError):
    """Bad or insufficient input: the message says what was expected and what was found."""


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
    attention_layers: int = 0  # layers that keep KV (hybrid models: only the full-attention ones); 0 = num_layers
    draft_layers: int = 0  # num_nextn_predict_layers (MTP/NextN draft layers shipped in the checkpoint)
    multimodal: bool = False

    def __post_init__(self):
        if not self.attention_layers:
            object.__setattr__(self, "attention_layers", self.num_layers)

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


ATTENTION_FAMILIES = ("mha", "mla", "dsa")


def _full_attention_layers(cfg, layers):
    """Layers that keep a KV cache: all, except in hybrid models (sliding-window / linear / mamba layers)."""
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        full = sum(1 for t in types if str(t) in ("full_attention", "attention", "full"))
        return full or layers
    interval = cfg.get("full_attention_interval")
    if isinstance(interval, int) and interval > 0:
        return layers // interval
    pattern = cfg.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        return pattern.count("*") or layers
    return layers


def model_from_config(source, attention=None):
    """Describe a model for the memory arithmetic from config.json (dict, file path, or model directory).

    An architecture no SGLang release registers (KNOWN_ARCHITECTURES) is refused unless ``attention`` says how it
    stores its KV cache ("mha", "mla" or "dsa"); the planner never guesses it."""
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
    archs = _first(top, "architectures", default=None) or _first(cfg, "architectures", default=None) or [None]
    arch = archs[0] if isinstance(archs, list) and archs else str(archs)
    if attention is not None and attention not in ATTENTION_FAMILIES:
        raise PlanError("attention %r is not one of %s" % (attention, ", ".join(ATTENTION_FAMILIES)))
    if attention is None and arch not in KNOWN_ARCHITECTURES:
        raise PlanError(
            "config.json names architecture %r, which no SGLang release registers: the planner cannot tell how it "
            "stores its KV cache; check the model, or give the attention family (mha, mla or dsa) if you know it"
            % (arch,)
        )
    arch = arch or "unknown"

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
    if attention is not None:
        family = attention
    elif kv_lora_rank:
        family = "mla"
        if index_head_dim or arch in DSA_ARCHITECTURES or cfg.get("index_topk") is not None:
            family = "dsa"
    else:
        family = "mha"
    if family != "mha" and not kv_lora_rank:
        raise PlanError("attention %s needs kv_lora_rank in config.json, found none" % family)
    if family == "dsa":
        index_head_dim = index_head_dim or 128
    v_head_dim = int(_first(cfg, "v_head_dim", default=head_dim))
    full_layers = _full_attention_layers(cfg, layers)
    if full_layers != layers:
        notes.append(
            "hybrid model: %d of %d layers keep a full KV cache and are sized; SGLang sizes the sliding-window pool "
            "(whose token count is a lower bound, not an upper one) and any mamba state share separately, which "
            "this plan does not model" % (full_layers, layers)
        )
    elif cfg.get("layers_block_type") or "mamba" in arch.lower():
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
        attention_layers=full_layers,
        draft_layers=int(_first(cfg, "num_nextn_predict_layers", default=0) or 0),
        multimodal=text is not None,
    )


def as_model(model, attention=None):
    if isinstance(model, ModelSpec):
        return model
    return model_from_config(model, attention)


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


def checked_number(name, value, *, minimum=None, integer=False, exclusive=False):
    """value as a finite float (or int); PlanError with what was expected otherwise. None stays None."""
    if value is None:
        return None
    kind = "a whole number" if integer else "a finite number"
    if minimum is not None:
        kind += " %s %s" % (">" if exclusive else ">=", minimum)
    bad = "%s must be %s, got %r: give %s" % (name, kind, value, kind)
    if isinstance(value, bool):
        raise PlanError(bad)
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise PlanError(bad) from None
    if not math.isfinite(f) or (integer and f != int(f)):
        raise PlanError(bad)
    if minimum is not None and (f <= minimum if exclusive else f < minimum):
        raise PlanError(bad)
    return int(f) if integer else f
