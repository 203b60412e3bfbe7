"""Model configuration (config.json) as the stand-in needs it."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field

from sglang.srt.sim_memory import ModelShape

DSA_ARCHITECTURES = {"GlmMoeDsaForCausalLM", "DeepseekV32ForCausalLM"}
_QUANT_ALIASES = {("modelopt", "NVFP4"): "modelopt_fp4", ("modelopt", "FP8"): "modelopt_fp8"}


def _hf_config_error(path: str) -> OSError:
    return OSError(
        f"Can't load the configuration of '{path}'. If you were trying to load it from "
        "'https://huggingface.co/models', make sure you don't have a local directory with the same name. "
        f"Otherwise, make sure '{path}' is the correct path to a directory containing a config.json file"
    )


@dataclass
class ModelConfig:
    model_path: str
    hf_config: dict
    architectures: list[str]
    model_type: str
    shape: ModelShape
    context_len: int
    dtype: str
    quantization: str | None
    vocab_size: int
    is_dsa: bool = False
    is_mla: bool = False
    extra: dict = field(default_factory=dict)

    @property
    def architecture(self) -> str:
        return self.architectures[0] if self.architectures else "LlamaForCausalLM"


def load_model_config(model_path: str, context_length: int | None = None, dtype: str = "auto") -> ModelConfig:
    cfg_file = os.path.join(model_path, "config.json")
    if not os.path.isfile(cfg_file):
        raise _hf_config_error(model_path)
    with open(cfg_file, encoding="utf-8") as fh:
        cfg = json.load(fh)
    archs = list(cfg.get("architectures") or ["LlamaForCausalLM"])
    is_dsa = bool(set(archs) & DSA_ARCHITECTURES) or "index_topk" in cfg
    is_mla = is_dsa or bool(cfg.get("kv_lora_rank"))
    heads = int(cfg.get("num_attention_heads", 32))
    hidden = int(cfg.get("hidden_size", 4096))
    model_dtype = cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"
    if dtype not in (None, "auto"):
        model_dtype = {"half": "float16", "float": "float32"}.get(dtype, dtype)
    ctx = int(context_length or cfg.get("max_position_embeddings") or 4096)
    if is_mla:
        shape = ModelShape(
            architecture=archs[0],
            attention="dsa" if is_dsa else "mla",
            num_layers=int(cfg["num_hidden_layers"]),
            hidden_size=hidden,
            num_attention_heads=heads,
            num_kv_heads=1,
            head_dim=int(cfg.get("qk_nope_head_dim", 128)) + int(cfg.get("qk_rope_head_dim", 64)),
            v_head_dim=int(cfg.get("v_head_dim", 128)),
            kv_lora_rank=int(cfg.get("kv_lora_rank", 512)),
            qk_rope_head_dim=int(cfg.get("qk_rope_head_dim", 64)),
            qk_nope_head_dim=int(cfg.get("qk_nope_head_dim", 128)),
            index_head_dim=int(cfg.get("index_head_dim", 128)) if is_dsa else 0,
            context_len=ctx,
            dtype=model_dtype,
        )
    else:
        head_dim = int(cfg.get("head_dim") or hidden // heads)
        shape = ModelShape(
            architecture=archs[0],
            attention="mha",
            num_layers=int(cfg["num_hidden_layers"]),
            hidden_size=hidden,
            num_attention_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=head_dim,
            v_head_dim=head_dim,
            context_len=ctx,
            dtype=model_dtype,
        )
    quant = None
    qc = cfg.get("quantization_config")
    if isinstance(qc, dict):
        method = str(qc.get("quant_method", ""))
        algo = str(qc.get("quant_algo", "")).upper()
        quant = _QUANT_ALIASES.get((method, algo), method or None)
    return ModelConfig(
        model_path=model_path,
        hf_config=cfg,
        architectures=archs,
        model_type=str(cfg.get("model_type", "")),
        shape=shape,
        context_len=ctx,
        dtype=model_dtype,
        quantization=quant,
        vocab_size=int(cfg.get("vocab_size", 32000)),
        is_dsa=is_dsa,
        is_mla=is_mla,
    )
