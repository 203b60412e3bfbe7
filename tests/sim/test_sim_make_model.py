"""The model-directory generator (sim/models/make_model.py)."""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys
from pathlib import Path

import pytest

MAKE_MODEL = Path(__file__).resolve().parents[2] / "sim" / "models" / "make_model.py"


def digest(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir())}


@pytest.mark.parametrize("kind", ["glm5-nvfp4", "llama3-8b"])
def test_deterministic_and_valid(tmp_path, kind):
    for out in ("a", "b"):
        subprocess.run([sys.executable, str(MAKE_MODEL), kind, str(tmp_path / out)], check=True, capture_output=True)
    assert digest(tmp_path / "a") == digest(tmp_path / "b")
    d = tmp_path / "a"
    index = json.loads((d / "model.safetensors.index.json").read_text())
    for shard in sorted(set(index["weight_map"].values())):
        raw = (d / shard).read_bytes()
        (n,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8 : 8 + n])
        assert n % 8 == 0 and header["__metadata__"] == {"format": "pt"}
        end = max(v["data_offsets"][1] for k, v in header.items() if k != "__metadata__")
        assert len(raw) == 8 + n + end
        assert all(index["weight_map"][k] == shard for k in header if k != "__metadata__")
    for name in ("config.json", "generation_config.json", "tokenizer_config.json"):
        json.loads((d / name).read_text())


def test_glm5_declares_61_gib_per_rank_at_tp8(models):
    index = json.loads((models["glm5-nvfp4"] / "model.safetensors.index.json").read_text())
    assert index["metadata"]["total_size"] / 8 / 2**30 == pytest.approx(61.05, abs=0.01)
    cfg = json.loads((models["glm5-nvfp4"] / "config.json").read_text())
    assert cfg["architectures"] == ["GlmMoeDsaForCausalLM"] and cfg["num_hidden_layers"] == 78
    assert (cfg["kv_lora_rank"], cfg["qk_rope_head_dim"], cfg["index_head_dim"]) == (512, 64, 128)
    assert cfg["quantization_config"]["quant_algo"] == "NVFP4"
    llama = json.loads((models["llama3-8b"] / "model.safetensors.index.json").read_text())
    assert llama["metadata"]["total_size"] == 16_060_522_496
