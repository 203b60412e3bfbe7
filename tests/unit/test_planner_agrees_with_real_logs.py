"""The planner against real SGLang start-up logs from public bug reports, wherever a log states its inputs.

Each fixture under tests/unit/fixtures/real_logs cites its source. The figures are read from the log with a few
patterns here (not with the product's parser), the model's shape from its public config.json (cited below), and the
planner, fed the logged "Load weight begin/end" memory, must land within 0.5 % of the logged KV tokens and within
0.05 GB of the logged "Memory pool end".
"""

import re
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_memory as mem

FIXTURES = Path(__file__).parent / "fixtures" / "real_logs"

# meta-llama/Meta-Llama-3.1-8B-Instruct config.json (Hugging Face model card): the fields the KV cell depends on.
LLAMA31_8B = {
    "architectures": ["LlamaForCausalLM"],
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "hidden_size": 4096,
    "max_position_embeddings": 131072,
    "torch_dtype": "bfloat16",
}

CASES = [
    # fixture, model config, SGLang release of the run (the log's "Load weight end" without elapsed=: before 0.5.6)
    ("sglang_pr13023_llama31_8b.log", LLAMA31_8B, "0.5.5"),
]


def figures(text):
    def one(pattern, cast=float):
        m = re.search(pattern, text)
        assert m, pattern
        return cast(m.group(1))

    return {
        "fraction": one(r"mem_fraction_static=([\d.]+)"),
        "pre": one(r"Load weight begin\. avail mem=([\d.]+) GB"),
        "avail": one(r"Load weight end\..*avail mem=([\d.]+) GB"),
        "tokens": one(r"KV Cache is allocated\. (?:dtype: \S+, )?#tokens: (\d+)", int),
        "pool_end": one(r"Memory pool end\. avail mem=([\d.]+) GB"),
    }


@pytest.mark.parametrize(("fixture", "config", "version"), CASES, ids=[c[0] for c in CASES])
def test_planner_predicts_a_real_logs_pool_and_what_it_leaves(fixture, config, version):
    f = figures((FIXTURES / fixture).read_text())
    p = mem.plan(
        config,
        mem_fraction_static=f["fraction"],
        free_at_start_gib=f["pre"],
        free_after_weights_gib=f["avail"],
        sglang_version=version,
    )
    assert p.kv_tokens == pytest.approx(f["tokens"], rel=0.005), p.as_dict()
    # what is left after the pool includes the request-to-token table: 2048 rows x (131072 + 4) x 4 B = 1.0 GiB here
    assert p.avail_after_pool_gib == pytest.approx(f["pool_end"], abs=0.05), p.as_dict()
