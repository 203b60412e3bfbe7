#!/usr/bin/env python3
"""Write a tiny but valid model directory that *declares* a full-size checkpoint.

    python3 sim/models/make_model.py KIND OUTDIR

KIND:
  glm5-nvfp4  GLM-5-like ``GlmMoeDsaForCausalLM`` (78 layers, MLA + DSA indexer, 256 experts, NVFP4 quantization
              config). ``model.safetensors.index.json`` declares total_size = 524 372 705 280 bytes, i.e.
              61.045 GiB per rank at TP 8 — the weight size of the reference GLM-5-NVFP4 deployment.
  llama3-8b   Llama-3-8B-like dense GQA model (32 layers, 32 heads, 8 KV heads, head_dim 128, hidden 4096),
              total_size 16 060 522 496 bytes (~16 GB bf16).

The shards are real safetensors files (8-byte little-endian header length + JSON header + data), with the tensor names
of the real checkpoint but tiny shapes. Output is byte-for-byte deterministic. Stdlib only.
"""

from __future__ import annotations

import json
import os
import struct
import sys

GLM5_TOTAL_SIZE = 524_372_705_280  # 8 x 65 546 588 160 B = 8 x 61.045 GiB
LLAMA3_8B_TOTAL_SIZE = 16_060_522_496

GLM5_CONFIG = {
    "architectures": ["GlmMoeDsaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 0,
    "eos_token_id": [154820, 154827, 154829],
    "pad_token_id": 154820,
    "first_k_dense_replace": 3,
    "hidden_act": "silu",
    "hidden_size": 6144,
    "index_head_dim": 128,
    "index_n_heads": 32,
    "index_topk": 2048,
    "initializer_range": 0.02,
    "intermediate_size": 12288,
    "kv_lora_rank": 512,
    "max_position_embeddings": 202752,
    "model_type": "glm_moe_dsa",
    "moe_intermediate_size": 2048,
    "n_group": 1,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "norm_topk_prob": True,
    "num_attention_heads": 64,
    "num_experts_per_tok": 8,
    "num_hidden_layers": 78,
    "num_key_value_heads": 64,
    "num_nextn_predict_layers": 1,
    "q_lora_rank": 2048,
    "qk_nope_head_dim": 192,
    "qk_rope_head_dim": 64,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 1000000,
    "routed_scaling_factor": 2.5,
    "scoring_func": "sigmoid",
    "tie_word_embeddings": False,
    "topk_group": 1,
    "topk_method": "noaux_tc",
    "torch_dtype": "bfloat16",
    "transformers_version": "5.0.0",
    "use_cache": True,
    "v_head_dim": 256,
    "vocab_size": 154880,
    "quantization_config": {
        "quant_method": "modelopt",
        "quant_algo": "NVFP4",
        "kv_cache_quant_algo": None,
        "group_size": 16,
        "exclude_modules": ["lm_head", "model.embed_tokens", "model.layers.*.self_attn*", "model.layers.*.mlp.gate"],
        "producer": {"name": "modelopt", "version": "0.41.0"},
    },
}

LLAMA3_8B_CONFIG = {
    "architectures": ["LlamaForCausalLM"],
    "attention_bias": False,
    "attention_dropout": 0.0,
    "bos_token_id": 128000,
    "eos_token_id": 128009,
    "hidden_act": "silu",
    "hidden_size": 4096,
    "initializer_range": 0.02,
    "intermediate_size": 14336,
    "max_position_embeddings": 8192,
    "mlp_bias": False,
    "model_type": "llama",
    "num_attention_heads": 32,
    "num_hidden_layers": 32,
    "num_key_value_heads": 8,
    "pretraining_tp": 1,
    "rms_norm_eps": 1e-05,
    "rope_scaling": None,
    "rope_theta": 500000.0,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
    "transformers_version": "4.40.0.dev0",
    "use_cache": True,
    "vocab_size": 128256,
}

_DTYPE_SIZE = {"BF16": 2, "F32": 4, "U8": 1, "F8_E4M3": 1}


def _glm5_tensors() -> list[tuple[str, str, list[int]]]:
    """(name, dtype, tiny shape) in checkpoint order."""
    out = [("model.embed_tokens.weight", "BF16", [4, 8])]
    for layer in range(GLM5_CONFIG["num_hidden_layers"] + 1):  # + 1 MTP layer
        p = f"model.layers.{layer}"
        out += [
            (f"{p}.input_layernorm.weight", "BF16", [8]),
            (f"{p}.self_attn.q_a_proj.weight", "BF16", [4, 8]),
            (f"{p}.self_attn.kv_a_proj_with_mqa.weight", "BF16", [4, 8]),
            (f"{p}.self_attn.indexer.wk.weight", "BF16", [2, 8]),
            (f"{p}.post_attention_layernorm.weight", "BF16", [8]),
        ]
        if layer < GLM5_CONFIG["first_k_dense_replace"]:
            out.append((f"{p}.mlp.down_proj.weight", "BF16", [8, 4]))
        else:
            out += [
                (f"{p}.mlp.gate.weight", "BF16", [4, 8]),
                (f"{p}.mlp.experts.0.down_proj.weight", "U8", [8, 2]),
                (f"{p}.mlp.experts.0.down_proj.weight_scale", "F8_E4M3", [8, 1]),
                (f"{p}.mlp.experts.0.down_proj.weight_scale_2", "F32", []),
                (f"{p}.mlp.experts.0.down_proj.input_scale", "F32", []),
            ]
    out += [("model.norm.weight", "BF16", [8]), ("lm_head.weight", "BF16", [4, 8])]
    return out


def _llama_tensors() -> list[tuple[str, str, list[int]]]:
    out = [("model.embed_tokens.weight", "BF16", [4, 8])]
    for layer in range(LLAMA3_8B_CONFIG["num_hidden_layers"]):
        p = f"model.layers.{layer}"
        for name in (
            "self_attn.q_proj",
            "self_attn.k_proj",
            "self_attn.v_proj",
            "self_attn.o_proj",
            "mlp.gate_proj",
            "mlp.up_proj",
            "mlp.down_proj",
        ):
            out.append((f"{p}.{name}.weight", "BF16", [4, 8]))
        out += [(f"{p}.input_layernorm.weight", "BF16", [8]), (f"{p}.post_attention_layernorm.weight", "BF16", [8])]
    out += [("model.norm.weight", "BF16", [8]), ("lm_head.weight", "BF16", [4, 8])]
    return out


def _numel(shape: list[int]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def safetensors_bytes(tensors: list[tuple[str, str, list[int]]], seed: int) -> bytes:
    """Serialize tensors (deterministic pseudo-random data) in the safetensors format."""
    header: dict = {"__metadata__": {"format": "pt"}}
    blobs = []
    offset = 0
    state = seed & 0xFFFFFFFF or 1
    for name, dtype, shape in tensors:
        size = _numel(shape) * _DTYPE_SIZE[dtype]
        data = bytearray()
        for _ in range(size):
            state = (1103515245 * state + 12345) & 0x7FFFFFFF
            data.append((state >> 16) & 0x3F)  # small values: valid numbers in every dtype
        blobs.append(bytes(data))
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + b"".join(blobs)


def _write(path: str, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)


def _write_json(path: str, obj) -> None:
    _write(path, (json.dumps(obj, indent=2, sort_keys=False) + "\n").encode())


def make_model(kind: str, outdir: str) -> None:
    if kind == "glm5-nvfp4":
        config, tensors, total, shards = GLM5_CONFIG, _glm5_tensors(), GLM5_TOTAL_SIZE, 8
        gen = {
            "_from_model_config": True,
            "eos_token_id": [154820, 154827, 154829],
            "pad_token_id": 154820,
            "temperature": 1.0,
            "top_p": 0.95,
            "transformers_version": "5.0.0",
        }
        tok = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": 202752,
            "eos_token": "<|endoftext|>",
            "pad_token": "<|endoftext|>",
            "padding_side": "left",
            "clean_up_tokenization_spaces": False,
            "chat_template": "[gMASK]<sop>{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>{% endif %}",
        }
        extra = {
            "hf_quant_config.json": {
                "producer": {"name": "modelopt", "version": "0.41.0"},
                "quantization": {
                    "quant_algo": "NVFP4",
                    "kv_cache_quant_algo": None,
                    "group_size": 16,
                    "exclude_modules": config["quantization_config"]["exclude_modules"],
                },
            }
        }
    elif kind == "llama3-8b":
        config, tensors, total, shards = LLAMA3_8B_CONFIG, _llama_tensors(), LLAMA3_8B_TOTAL_SIZE, 4
        gen = {
            "_from_model_config": True,
            "bos_token_id": 128000,
            "eos_token_id": 128009,
            "transformers_version": "4.40.0.dev0",
        }
        tok = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "model_max_length": 1000000000000000019884624838656,
            "bos_token": "<|begin_of_text|>",
            "eos_token": "<|eot_id|>",
            "clean_up_tokenization_spaces": True,
            "chat_template": "{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>\n\n"
            "{{ m.content }}<|eot_id|>{% endfor %}",
        }
        extra = {}
    else:
        raise SystemExit(f"unknown kind {kind!r}; kinds: glm5-nvfp4, llama3-8b")
    os.makedirs(outdir, exist_ok=True)
    _write_json(os.path.join(outdir, "config.json"), config)
    _write_json(os.path.join(outdir, "generation_config.json"), gen)
    _write_json(os.path.join(outdir, "tokenizer_config.json"), tok)
    for name, obj in extra.items():
        _write_json(os.path.join(outdir, name), obj)
    per = -(-len(tensors) // shards)
    weight_map = {}
    for i in range(shards):
        part = tensors[i * per : (i + 1) * per]
        fname = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        _write(os.path.join(outdir, fname), safetensors_bytes(part, seed=i + 1))
        for name, _, _ in part:
            weight_map[name] = fname
    _write_json(
        os.path.join(outdir, "model.safetensors.index.json"),
        {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))},
    )


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    make_model(argv[0], argv[1])
    print(argv[1])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
