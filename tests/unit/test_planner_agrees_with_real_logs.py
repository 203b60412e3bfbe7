"""The planner against real SGLang start-up logs from public bug reports, wherever a log states its inputs.

Each fixture under tests/unit/fixtures/real_logs and public_logs cites its source. The figures are read from the log
with a few patterns here (not with the product's parser), the model's shape from its public config.json (cited below),
and the planner, fed the logged "Load weight begin/end" memory (the minimum over the ranks, as SGLang's profiler takes
it) and the run's flags, must land within 0.5 % of the logged KV tokens and within 0.1 GB of the logged "Memory pool
end" of the tightest rank (issue 26; the Llama run is within 0.05). No constant stands for the pool phase's other
memory: the request table and PyTorch's allocator rounding of every tensor are computed.
"""

import re
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_memory as mem

FIXTURES = Path(__file__).parent / "fixtures" / "real_logs"
PUBLIC = Path(__file__).parent / "fixtures" / "public_logs"
GLM5 = Path(__file__).parent / "fixtures" / "models" / "glm5-like"  # GLM-5's shape: 78 layers, MLA 512+64, DSA 128

# Qwen/Qwen3-32B config.json (Hugging Face model card): the fields the KV cell and the request table depend on.
QWEN3_32B = {
    "architectures": ["Qwen3ForCausalLM"],
    "num_hidden_layers": 64,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "hidden_size": 5120,
    "head_dim": 128,
    "max_position_embeddings": 40960,
    "torch_dtype": "bfloat16",
}

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


def _all(text, pattern, cast=float):
    return [cast(x) for x in re.findall(pattern, text)]


def test_glm5_on_mi355x_rocm_pool_and_what_it_leaves():
    """GLM-5-FP8, 8 x MI355X, a build between 0.5.8.post1 and 0.5.9 (0.5.9's line formats), mem_fraction_static 0.908,
    fp8 KV, page size 1 on ROCm, 2048 requests by default (4096 rows at 202 752 tokens): 3 262 823 tokens, 186.77 GB,
    and 3.88 GB left on the ranks with the least memory after the weights."""
    text = (PUBLIC / "rocm_glm5_mi355x_capture_crash.log").read_text()
    pre = min(_all(text, r"Load weight begin\. avail mem=([\d.]+) GB"))
    after = _all(text, r"Load weight end\..*?avail mem=([\d.]+) GB")
    ranks_after = dict(re.findall(r"(TP\d)\] Load weight end\..*?avail mem=([\d.]+) GB", text))
    pool_end = dict(re.findall(r"(TP\d)\] Memory pool end\. avail mem=([\d.]+) GB", text))
    tokens = _all(text, r"KV Cache is allocated\. #tokens: (\d+)", int)[0]
    fraction = float(re.search(r"mem_fraction_static=([\d.]+)", text).group(1))
    page = int(re.search(r"page_size=(\d+)", text).group(1))
    p = mem.plan(
        GLM5,
        tp=8,
        mem_fraction_static=fraction,
        free_at_start_gib=pre,
        free_after_weights_gib=min(after),
        page_size=page,
        kv_cache_dtype="fp8_e4m3",
        sglang_version="0.5.9",
    )
    assert p.kv_tokens == pytest.approx(tokens, rel=0.005), p.as_dict()
    assert p.kv_pool_gib == pytest.approx(186.77, abs=0.05)
    tightest = [float(pool_end[r]) for r, a in ranks_after.items() if float(a) == min(after)]
    assert tightest and all(p.avail_after_pool_gib == pytest.approx(v, abs=0.1) for v in tightest), (tightest, p)


def test_qwen3_32b_on_b200_pool_accounting():
    """Qwen3-32B, TP4 on B200, 0.5.10 (pr22537): the excerpt has no "Load weight begin" and no fraction, so only the
    pool phase is checked: given the logged 2 206 208 tokens, what "Memory pool end" shows after the weights' 160.78."""
    text = (PUBLIC / "pr22537_qwen3_load_end_elapsed.log").read_text()
    avail = float(re.search(r"TP0\] Load weight end\..*?avail mem=([\d.]+) GB", text).group(1))
    tokens = int(re.search(r"TP0\] KV Cache is allocated\. #tokens: (\d+)", text).group(1))
    logged = float(re.search(r"TP0\] Memory pool end\. avail mem=([\d.]+) GB", text).group(1))
    p = mem.plan(
        QWEN3_32B,
        tp=4,
        free_at_start_gib=avail + 15.50,  # mem usage=15.50 GB: the budget only has to exceed the pinned tokens
        free_after_weights_gib=avail,
        mem_fraction_static=0.95,
        max_total_tokens=tokens,
        sglang_version="0.5.10",
    )
    assert p.kv_tokens == tokens
    assert p.kv_pool_gib == pytest.approx(2 * 67.33, abs=0.02)
    assert p.avail_after_pool_gib == pytest.approx(logged, abs=0.1), p.as_dict()


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
