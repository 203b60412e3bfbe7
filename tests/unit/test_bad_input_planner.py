"""Bad input to the memory planner: bin/sglang-plan and the sglang_plan module, one row per case.

Every row proves: the exact one-line answer (what was expected, what was found, what to do), the exit status or the
failed flag, no Python traceback, nothing changed (the planner only reads: the model directory, the build record and
the working directory are fingerprinted before and after), and an end within a time bound (a hang kills the process
group and fails the row instead of hanging the suite).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "bin" / "sglang-plan"
MODULE = ROOT / "plugins" / "modules" / "sglang_plan.py"
FIXTURES = ROOT / "tests" / "unit" / "fixtures" / "models"
BOUND_SECONDS = 30.0


def run_bounded(args, seconds=BOUND_SECONDS, stdin=None):
    """(rc, stdout, stderr, seconds); the process group is killed and the row fails when it does not end in time."""
    t0 = time.monotonic()
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen(
        [str(a) for a in args],
        stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(stdin, timeout=seconds)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, 9)
        proc.communicate()
        pytest.fail(f"{args} did not end within {seconds:.0f} s")
    return proc.returncode, out, err, time.monotonic() - t0


def fingerprint(*paths):
    """Hash of every file under paths (name, mode, content): equal before and after means nothing changed."""
    h = hashlib.sha256()
    for name in paths:
        top = Path(name)
        files = sorted(p for p in top.rglob("*")) if top.is_dir() else [top]
        for f in files:
            if f.is_file():
                h.update(str(f.relative_to(top.parent)).encode())
                h.update(oct(f.stat().st_mode).encode())
                h.update(f.read_bytes())
    return h.hexdigest()


@pytest.fixture
def workspace(tmp_path):
    """A copy of the GLM-5-like model, a build record, a model with an architecture no SGLang knows."""
    glm5 = tmp_path / "glm5"
    shutil.copytree(FIXTURES / "glm5-like", glm5)
    llama = tmp_path / "llama"
    shutil.copytree(FIXTURES / "llama3-8b-like", llama)
    foo = tmp_path / "foo"
    foo.mkdir()
    cfg = json.loads((llama / "config.json").read_text())
    cfg["architectures"] = ["FooForCausalLM"]
    (foo / "config.json").write_text(json.dumps(cfg))
    (tmp_path / "not-json.json").write_text("{version: 0.5.9")
    return tmp_path


GLM5_ARGS = ["--model", "{glm5}", "--gpu-mem-mib", "97887", "--tp", "8", "--gpu-arch", "sm_120"]
V = ["--sglang-version", "0.5.9"]

# (row id, arguments after bin/sglang-plan, the exact stderr line)
CLI_ROWS = [
    ("gpu-mem-nan", [*GLM5_ARGS, *V, "--gpu-mem-mib", "nan"],
     "argument --gpu-mem-mib: expected a finite number, got 'nan': give a plain decimal number"),
    ("gpu-mem-inf", [*GLM5_ARGS, *V, "--gpu-mem-mib", "inf"],
     "argument --gpu-mem-mib: expected a finite number, got 'inf': give a plain decimal number"),
    ("weights-inf", [*GLM5_ARGS, *V, "--weights-gib", "inf"],
     "argument --weights-gib: expected a finite number, got 'inf': give a plain decimal number"),
    ("free-at-start-nan", [*GLM5_ARGS, *V, "--free-at-start-gib", "nan"],
     "argument --free-at-start-gib: expected a finite number, got 'nan': give a plain decimal number"),
    ("free-after-weights-nan", [*GLM5_ARGS, *V, "--free-at-start-gib", "94", "--free-after-weights-gib", "nan"],
     "argument --free-after-weights-gib: expected a finite number, got 'nan': give a plain decimal number"),
    ("margin-nan", [*GLM5_ARGS, *V, "--margin-gib", "nan"],
     "argument --margin-gib: expected a finite number, got 'nan': give a plain decimal number"),
    ("margin-negative", [*GLM5_ARGS, *V, "--margin-gib", "-1"],
     "argument --margin-gib: expected a number >= 0, got -1: give 0 or more"),
    ("overhead-inf", [*GLM5_ARGS, *V, "--context-overhead-gib", "inf"],
     "argument --context-overhead-gib: expected a finite number, got 'inf': give a plain decimal number"),
    ("graph-need-nan", [*GLM5_ARGS, *V, "--cuda-graph-need-gib", "nan"],
     "argument --cuda-graph-need-gib: expected a finite number, got 'nan': give a plain decimal number"),
    ("fraction-nan", [*GLM5_ARGS, *V, "--mem-fraction-static", "nan"],
     "argument --mem-fraction-static: expected a finite number, got 'nan': give a plain decimal number"),
    ("fraction-1", [*GLM5_ARGS, *V, "--mem-fraction-static", "1"],
     "argument --mem-fraction-static: expected a fraction in (0, 1), got 1: give e.g. 0.88"),
    ("graph-bs-100000", [*GLM5_ARGS, *V, "--cuda-graph-max-bs", "100000"],
     "cuda_graph_max_bs must be at most 65536, got 100000: use the largest batch size the server will run"),
    ("graph-bs-default-fraction-negative", [*GLM5_ARGS, *V, "--cuda-graph-max-bs", "60000"],
     "SGLang's default mem_fraction_static for these settings would be -0.37 (its reserve for cuda_graph_max_bs "
     "60000 and chunked prefill exceeds the 97887 MiB GPU): give a smaller cuda_graph_max_bs or a "
     "mem_fraction_static"),
    ("graph-bs-negative", [*GLM5_ARGS, *V, "--cuda-graph-max-bs", "-5"],
     "argument --cuda-graph-max-bs: expected a whole number >= 1, got -5: give e.g. 8"),
    ("graph-bs-zero", [*GLM5_ARGS, *V, "--cuda-graph-max-bs", "0"],
     "argument --cuda-graph-max-bs: expected a whole number >= 1, got 0: give e.g. 8"),
    ("page-size-zero", [*GLM5_ARGS, *V, "--page-size", "0"],
     "argument --page-size: expected a whole number >= 1, got 0: give e.g. 8"),
    ("tp-text", [*GLM5_ARGS, *V, "--tp", "eight"],
     "argument --tp: expected a whole number >= 1, got 'eight': give e.g. 8"),
    ("max-running-zero", [*GLM5_ARGS, *V, "--max-running-requests", "0"],
     "argument --max-running-requests: expected a whole number >= 1, got 0: give e.g. 8"),
    ("context-negative", [*GLM5_ARGS, *V, "--context-length", "-1"],
     "argument --context-length: expected a whole number >= 1, got -1: give e.g. 8"),
    ("dp-not-dividing-tp", [*GLM5_ARGS, *V, "--dp", "3"],
     "dp=3 does not divide tp=8: DP attention needs tp / dp ranks per replica; use a dp that divides tp"),
    ("speculative-unknown", [*GLM5_ARGS, *V, "--speculative-algorithm", "medusa"],
     "argument --speculative-algorithm: invalid choice: 'MEDUSA' (choose from 'EAGLE', 'EAGLE3', 'NEXTN', 'MTP', "
     "'STANDALONE', 'NGRAM')"),
    ("draft-model-without-algorithm", [*GLM5_ARGS, *V, "--speculative-draft-model", "{llama}"],
     "a speculative draft model was given without a speculative algorithm: also give the algorithm "
     "(EAGLE, EAGLE3, STANDALONE ...)"),
    ("unknown-architecture", ["--model", "{foo}", "--gpu-mem-mib", "81559", *V],
     "config.json names architecture 'FooForCausalLM', which no SGLang release registers: the planner cannot tell "
     "how it stores its KV cache; check the model, or give the attention family (mha, mla or dsa) if you know it"),
    ("version-not-a-version", [*GLM5_ARGS, "--sglang-version", "banana"],
     "SGLang version 'banana' is not of the form X.Y.Z: give the release, e.g. 0.5.9"),
    ("no-version-no-record", [*GLM5_ARGS, "--sglang-record", "{tmp}/missing.json"],
     "which SGLang? expected the build record {tmp}/missing.json, found no such file: run the build stage "
     "(--tags build) or pass the SGLang version"),
    ("record-not-json", [*GLM5_ARGS, "--sglang-record", "{tmp}/not-json.json"],
     "cannot read the SGLang build record {tmp}/not-json.json (Expecting property name enclosed in double quotes: "
     "line 1 column 2 (char 1)): re-run the build stage"),
    ("model-missing", ["--model", "{tmp}/nothing", "--gpu-mem-mib", "81559", *V],
     "--model {tmp}/nothing: no such file or directory"),
]  # fmt: skip


def _fill(items, ws):
    names = {"glm5": ws / "glm5", "llama": ws / "llama", "foo": ws / "foo", "tmp": ws}
    return [str(a).format(**names) for a in items]


@pytest.mark.parametrize(("args", "message"), [r[1:] for r in CLI_ROWS], ids=[r[0] for r in CLI_ROWS])
def test_sglang_plan_cli_refuses_bad_input_in_one_line(workspace, args, message):
    before = fingerprint(workspace)
    rc, out, err, _ = run_bounded([sys.executable, CLI, *_fill(args, workspace)])
    assert rc == 2
    assert "Traceback" not in out + err
    assert out == ""
    assert err == f"sglang-plan: error: {_fill([message], workspace)[0]}\n"
    assert fingerprint(workspace) == before


# (row id, module arguments, the exact msg after "cannot plan the memory of MODEL (TP t, m MiB GPUs): ")
BASE = {"model_path": "{glm5}", "tp": 8, "gpu_mem_mib": 97887, "gpu_arch": "sm_120", "sglang_version": "0.5.9"}
MODULE_ROWS = [
    ("margin-nan", {"margin_gib": "nan"},
     "margin_gib must be a finite number >= 0, got nan: give a finite number >= 0"),
    ("margin-inf", {"margin_gib": "inf"},
     "margin_gib must be a finite number >= 0, got inf: give a finite number >= 0"),
    ("fraction-nan", {"mem_fraction_static": "nan"},
     "mem_fraction_static must be a finite number, got nan: give a finite number"),
    ("graph-bs-negative", {"cuda_graph_max_bs": -5},
     "cuda_graph_max_bs must be a whole number >= 1, got -5: give a whole number >= 1"),
    ("graph-bs-zero", {"cuda_graph_max_bs": 0},
     "cuda_graph_max_bs must be a whole number >= 1, got 0: give a whole number >= 1"),
    ("graph-bs-100000", {"cuda_graph_max_bs": 100000},
     "cuda_graph_max_bs must be at most 65536, got 100000: use the largest batch size the server will run"),
    ("page-size-zero", {"page_size": 0}, "page_size must be a whole number >= 1, got 0: give a whole number >= 1"),
    ("gpu-mem-zero", {"gpu_mem_mib": 0}, "gpu_mem_mib must be a finite number > 0, got 0: give a finite number > 0"),
    ("tp-zero", {"tp": 0}, "tp must be a whole number >= 1, got 0: give a whole number >= 1"),
    ("dp-not-dividing-tp", {"dp": 3},
     "dp=3 does not divide tp=8: DP attention needs tp / dp ranks per replica; use a dp that divides tp"),
    ("unknown-architecture", {"model_path": "{foo}", "gpu_mem_mib": 81559, "tp": 1},
     "config.json names architecture 'FooForCausalLM', which no SGLang release registers: the planner cannot tell "
     "how it stores its KV cache; check the model, or give the attention family (mha, mla or dsa) if you know it"),
    ("no-version-no-record", {"sglang_version": None, "sglang_record": "{tmp}/missing.json"},
     "which SGLang? expected the build record {tmp}/missing.json, found no such file: run the build stage "
     "(--tags build) or pass the SGLang version"),
]  # fmt: skip


@pytest.mark.parametrize(("override", "message"), [r[1:] for r in MODULE_ROWS], ids=[r[0] for r in MODULE_ROWS])
def test_sglang_plan_module_refuses_bad_input_in_one_line(workspace, override, message):
    args = dict(BASE, **override)
    args = {k: (_fill([v], workspace)[0] if isinstance(v, str) else v) for k, v in args.items() if v is not None}
    before = fingerprint(workspace)
    rc, out, err, _ = run_bounded([sys.executable, MODULE], stdin=json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    assert "Traceback" not in out + err
    result = json.loads(out)
    assert rc == 1 and result["failed"] is True
    prefix = "cannot plan the memory of {} (TP {}, {} MiB GPUs): ".format(
        args["model_path"], args["tp"], args["gpu_mem_mib"]
    )
    assert result["msg"] == prefix + _fill([message], workspace)[0]
    assert "\n" not in result["msg"]
    assert fingerprint(workspace) == before


def test_sglang_plan_module_refuses_a_failed_attempt_with_non_finite_figures(workspace):
    args = dict(BASE, model_path=str(workspace / "glm5"), mem_fraction_static=0.95)
    args["failed_attempt"] = {
        "outcome": "oom_cuda_graph",
        "totals": {"pre_load_min_gb": "nan", "avail_after_pool_min_gb": 1.5},
        "server_args": {"mem_fraction_static": 0.95},
    }
    before = fingerprint(workspace)
    rc, out, err, _ = run_bounded([sys.executable, MODULE], stdin=json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    assert "Traceback" not in out + err
    result = json.loads(out)
    assert rc == 1 and result["failed"] is True
    assert result["msg"] == (
        "cannot compute a fraction from the failed attempt: pre_load_free_gib must be a finite number, got 'nan'"
    )
    assert fingerprint(workspace) == before


def test_a_huge_graph_batch_size_is_planned_in_bounded_time(workspace):
    # --cuda-graph-max-bs used to be quadratic (300k: 99 s); the largest accepted value now plans in well under the
    # bound, with a fraction given (SGLang's default would reserve more than the card).
    args = [*_fill(GLM5_ARGS, workspace), *V, "--mem-fraction-static", "0.88", "--cuda-graph-max-bs", "65536"]
    rc, out, err, _seconds = run_bounded([sys.executable, CLI, *args, "--json"], seconds=BOUND_SECONDS)
    assert rc == 0, err
    plan = json.loads(out)
    assert plan["cuda_graph_max_bs"] == 65536
    assert all(math.isfinite(v) for v in (plan["kv_pool_gib"], plan["avail_after_pool_gib"], plan["headroom_gib"]))
    # SGLang captures no batch larger than its request table (2048 rows by default here, cuda_graph_runner.py:190-215)
    assert plan["cuda_graph_batch_sizes"][-1] == 2048 and plan["verdict"] == "ok"
