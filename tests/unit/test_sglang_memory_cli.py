"""bin/sglang-plan, run as a user runs it (subprocess)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "bin" / "sglang-plan"
GLM5 = ROOT / "tests" / "unit" / "fixtures" / "models" / "glm5-like"
LLAMA = ROOT / "tests" / "unit" / "fixtures" / "models" / "llama3-8b-like"
# the reference story's flags: 0.88 ran with --max-running-requests 64 (STORY), 0.95 with 8 (STORY_095)
STORY = [
    "--gpu-mem-mib",
    "97887",
    "--tp",
    "8",
    "--sglang-version",
    "0.5.9",
    "--gpu-arch",
    "sm_120",
    "--max-running-requests",
    "64",
]
STORY_095 = [*STORY[:-1], "8"]
HEAD_KEYS = [
    "kv_tokens",
    "kv_pool_gib",
    "avail_after_pool_gib",
    "cuda_graph_need_gib",
    "verdict",
    "recommended_mem_fraction_static",
    "recommended_cuda_graph_max_bs",
]


def run(*args, cwd=None, version="0.5.9"):
    """The CLI with args; version (the user's pin) is added unless the args name one or version is None."""
    env = dict(os.environ, PYTHONPATH="")  # the CLI must find module_utils on its own
    if version is not None and not {"--sglang-version", "--sglang-record"} & {str(a) for a in args}:
        args = (*args, "--sglang-version", version)
    return subprocess.run(
        [sys.executable, str(CLI), *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd or "/",
        env=env,
        check=False,
        timeout=60,
    )


def test_cli_is_executable():
    assert os.access(CLI, os.X_OK)


def test_json_story_at_088():
    r = run("--model", GLM5, *STORY, "--free-at-start-gib", "94.25", "--mem-fraction-static", "0.88", "--json")
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert list(d)[:7] == HEAD_KEYS
    assert abs(d["kv_tokens"] - 425664) / 425664 < 0.005
    assert d["kv_pool_gib"] == pytest.approx(24.37, abs=0.05)
    assert d["avail_after_pool_gib"] == pytest.approx(8.61, abs=0.05)
    assert d["verdict"] == "ok"
    assert d["weights_per_rank_gib"] == pytest.approx(61.05, abs=0.001)  # read from the index
    assert d["recommended_mem_fraction_static"] >= 0.88
    assert d["recommended_cuda_graph_max_bs"] is None


def test_json_story_at_095_and_strict_exit_code():
    common = ["--model", GLM5 / "config.json", "--free-at-start-gib", "94.25", "--weights-gib", "61.05"]
    args = [*common, *STORY_095]
    r = run(*args, "--mem-fraction-static", "0.95", "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["verdict"] == "oom_cuda_graph"
    assert json.loads(r.stdout)["cuda_graph_batch_sizes"] == [1, 2, 4, 8]
    r = run(*args, "--mem-fraction-static", "0.95", "--json", "--strict")
    assert r.returncode == 3
    r = run(*common, *STORY, "--mem-fraction-static", "0.88", "--json", "--strict")
    assert r.returncode == 0


def test_measured_free_after_weights():
    r = run(
        "--model",
        GLM5,
        *STORY,
        "--free-at-start-gib",
        "94.25",
        "--free-after-weights-gib",
        "33.2",
        "--mem-fraction-static",
        "0.88",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["kv_pool_gib"] == pytest.approx(24.37, abs=0.1)


def test_readable_output_without_fraction_recommends_one():
    r = run("--model", GLM5, *STORY)
    assert r.returncode == 0, r.stderr
    assert "recommended fraction" in r.stdout
    assert "SGLang default 0.848" in r.stdout
    assert "verdict                ok" in r.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "/nonexistent/model", "--gpu-mem-mib", "81559"], "no such file"),
        (["--model", LLAMA, "--gpu-mem-mib", "81559", "--weights-gib", "15", "--tp", "3"], "num_attention_heads"),
        (["--model", LLAMA, "--gpu-mem-mib", "81559", "--mem-fraction-static", "1.2"], "(0, 1)"),
        (["--model", LLAMA, "--gpu-mem-mib", "81559", "--mem-fraction-static", "0"], "(0, 1)"),
        (["--model", LLAMA, "--gpu-mem-mib", "81559", "--kv-cache-dtype", "int3", "--weights-gib", "15"], "int3"),
        (["--model", LLAMA, "--gpu-mem-mib", "81559"], "weights per rank"),
        (["--model", LLAMA], "--gpu-mem-mib"),
        (["--model", LLAMA, "--gpu-mem-mib", "81559", "--free-after-weights-gib", "60"], "--free-at-start-gib"),
        (["--model", LLAMA, "--gpu-mem-mib", "-5"], "expected a number > 0, got -5"),
        (["--gpu-mem-mib", "81559"], "--model"),
    ],
)
def test_bad_input_exits_2_with_a_clear_message(args, message):
    r = run(*args)
    assert r.returncode == 2
    assert message in r.stderr
    assert "Traceback" not in r.stderr


def test_missing_config_in_directory(tmp_path):
    r = run("--model", tmp_path, "--gpu-mem-mib", "81559", "--weights-gib", "15")
    assert r.returncode == 2
    assert "no model config" in r.stderr


def test_dense_model_with_weights_given():
    r = run(
        "--model",
        LLAMA,
        "--gpu-mem-mib",
        "81559",
        "--gpu-arch",
        "sm_90",
        "--free-at-start-gib",
        "78.5",
        "--weights-gib",
        "14.96",
        "--mem-fraction-static",
        "0.88",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    d = json.loads(r.stdout)
    assert d["kv_tokens"] == 443351
    assert d["cell_bytes_actual"] == 131072


def test_without_a_version_it_reads_the_build_record_and_never_assumes_one(tmp_path):
    record = tmp_path / "sglang.json"
    args = ["--model", GLM5, "--gpu-mem-mib", "97887", "--tp", "8", "--gpu-arch", "sm_120", "--json"]
    r = run(*args, "--sglang-record", record, version=None)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert r.stderr.strip() == (
        f"sglang-plan: error: which SGLang? expected the build record {record}, found no such file: run the build "
        "stage (--tags build) or pass the SGLang version"
    )
    record.write_text(json.dumps({"ref": "v0.5.14", "version": "0.5.14"}))
    r = run(*args, "--sglang-record", record, version=None)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["sglang_version"] == "0.5.14"
    # the user's pin wins over the record
    r = run(*args, "--sglang-record", record, "--sglang-version", "0.5.9", version=None)
    assert json.loads(r.stdout)["sglang_version"] == "0.5.9"
