"""The benchmark gate end to end on loopback: llmops.sglang.sglang_bench runs the stand-in's sglang.bench_serving
against stand-in servers whose speed model (sim/sglang/python/sglang/srt/sim_speed.py) a test plants - a build set
30 % and 5 % slower, a PCIe link trained down to Gen2 - and judges each against the baseline of a healthy server. The
figures are the model's, so nothing here depends on how busy the machine is."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "unit"))
from _module_run import run_module  # noqa: E402

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_bench as B  # noqa: E402

SIM_PY = ROOT / "sim" / "sglang" / "python"
READY = "The server is fired up and ready to roll!"
SETTINGS = {"num_prompts": 12, "input_len": 64, "output_len": 32, "max_concurrency": 4, "seed": 3}


@pytest.fixture
def venv_python(tmp_path):
    """A stand-in for the served venv's interpreter: Python with the stand-in's package on its path."""
    path = tmp_path / "venv-python"
    path.write_text(f'#!/bin/sh\nPYTHONPATH={SIM_PY} exec {sys.executable} "$@"\n')
    path.chmod(0o755)
    return path


def serve(launch, models, env=None, key=None):
    args = ["--model-path", str(models["llama3-8b"]), "--tp", "2", "--mem-fraction-static", "0.85"]
    server = launch(args + (["--api-key", key] if key else []), env=env or {})
    assert server.wait_for(READY), server.log[-3000:]
    return server


def bench(server, venv_python, models, state, **kw):
    args = dict(SETTINGS, python=str(venv_python), base_url=f"http://127.0.0.1:{server.port}",
                tokenizer=str(models["llama3-8b"]), state_file=str(state), build_set=kw.pop("build_set", "set-a"),
                model_commit="c0ffee", host="gpu1", **kw)  # fmt: skip
    return run_module("sglang_bench", args)


def test_a_healthy_server_sets_the_baseline_and_planted_slowdowns_are_judged(launch, models, venv_python, tmp_path):
    state = tmp_path / "server-bench.json"
    healthy = serve(launch, models)
    first = bench(healthy, venv_python, models, state)
    assert first.get("verdict") == "baseline", first
    assert first["figures"]["completed"] == 12 and first["figures"]["output_throughput"] > 0
    assert oct(state.stat().st_mode & 0o777) == "0o644"
    again = bench(healthy, venv_python, models, state)
    assert again["verdict"] == "ok" and again["slowdown_pct"] == 0.0, again  # the model's figures do not drift
    healthy.stop()

    slow = serve(launch, models, env={"SGLANG_SIM_FAULT": "slow percent=30"})
    got = bench(slow, venv_python, models, state, build_set="set-b")
    assert got.get("failed") and got["verdict"] == "slower", got
    assert "30.0 % below" in got["msg"] and "build set set-a" in got["msg"], got["msg"]
    slow.stop()

    slightly = serve(launch, models, env={"SGLANG_SIM_FAULT": "slow percent=5"})
    ok = bench(slightly, venv_python, models, state, build_set="set-c")
    assert ok["verdict"] == "ok" and ok["slowdown_pct"] == 5.0, ok
    recorded = json.loads(state.read_text())
    assert {r["build_set"]: "baseline" in r for r in recorded["runs"].values()} == {
        "set-a": True, "set-b": False, "set-c": True}  # fmt: skip


def test_a_link_trained_down_to_gen2_is_slower_than_the_baseline(launch, models, venv_python, tmp_path):
    state = tmp_path / "server-bench.json"
    faults = tmp_path / "gpu-faults.json"
    faults.write_text("{}")
    server = serve(launch, models, env={"SIM_GPU_FAULTS": str(faults)})
    assert bench(server, venv_python, models, state)["verdict"] == "baseline"
    faults.write_text(json.dumps({"pcie_gen_current": {"1": 2}}))  # GPU 1 of the replica's two, Gen5 -> Gen2
    got = bench(server, venv_python, models, state)
    assert got["verdict"] == "slower" and got["slowdown_pct"] > 40, got


def test_a_keyed_server_is_benchmarked_with_the_key_from_the_env_file_only(launch, models, venv_python, tmp_path):
    key = "sk-bench-test-key-0123456789"
    server = serve(launch, models, key=key)
    state = tmp_path / "server-bench.json"
    without = bench(server, venv_python, models, state)
    assert without.get("failed") and "exit 1" in without["msg"], without  # 401: the client's warm-up fails
    env_file = tmp_path / "sglang.env"
    env_file.write_text(f"SGLANG_API_KEY={key}\n")
    env_file.chmod(0o600)
    got = bench(server, venv_python, models, state, api_key_file=str(env_file))
    assert got["verdict"] == "baseline", got
    assert key not in json.dumps(got) and key not in state.read_text()


def test_a_key_given_to_the_module_reaches_the_client_only_and_the_messages_name_the_callers_variables(
    launch, models, venv_python, tmp_path
):
    """The router's benchmark: its clients' key is not in a file on the head, so it is given to the module (no_log);
    a slower fleet's message names router_bench_max_slowdown_pct, and the result says what was benchmarked."""
    key = "sk-router-test-key-0123456789"
    server = serve(launch, models, key=key)
    state = tmp_path / "router-bench-rt1.json"
    first = bench(server, venv_python, models, state, api_key=key, variable_prefix="router_bench",
                  build_set="2 replicas: set-a")  # fmt: skip
    assert first["verdict"] == "baseline", first
    assert (first["build_set"], first["model_commit"], first["python"]) == ("2 replicas: set-a", "c0ffee",
                                                                            str(venv_python))  # fmt: skip
    assert first["max_slowdown_pct"] == 15 and key not in json.dumps(first) and key not in state.read_text()
    server.stop()
    slow = serve(launch, models, env={"SGLANG_SIM_FAULT": "slow percent=30"}, key=key)
    got = bench(slow, venv_python, models, state, api_key=key, variable_prefix="router_bench",
                build_set="2 replicas: set-a")  # fmt: skip
    assert got["verdict"] == "slower" and got["msg"].endswith("or raise router_bench_max_slowdown_pct"), got
    assert "server_bench" not in got["msg"] and key not in json.dumps(got)
    both = bench(slow, venv_python, models, state, api_key=key, api_key_file=str(tmp_path / "x.env"))
    assert both.get("failed") and "mutually exclusive" in both["msg"], both
    bad = bench(slow, venv_python, models, state, variable_prefix="router bench; rm")
    assert bad.get("failed") and "expected variable_prefix as a variable name" in bad["msg"], bad


def test_a_setting_out_of_bounds_is_refused_before_any_request(venv_python, models, tmp_path):
    got = run_module("sglang_bench", dict(SETTINGS, num_prompts=5000, python=str(venv_python),
                                          base_url="http://127.0.0.1:9", tokenizer=str(models["llama3-8b"]),
                                          state_file=str(tmp_path / "s.json")))  # fmt: skip
    assert got.get("failed") and "num_prompts" in got["msg"] and not (tmp_path / "s.json").exists()


def test_a_run_that_did_not_restart_benchmarks_only_after_a_failed_verdict(venv_python, models, tmp_path):
    state = tmp_path / "server-bench.json"
    args = dict(SETTINGS, python=str(venv_python), base_url="http://127.0.0.1:9", tokenizer=str(models["llama3-8b"]),
                state_file=str(state), build_set="set-a", model_commit="c0ffee", launched=False)  # fmt: skip
    assert run_module("sglang_bench", args)["verdict"] == "not due"  # no state: a routine run sends nothing
    assert not state.exists()
    assert run_module("sglang_bench", args, check_mode=True)["verdict"] == "not run"
    # the last run of this key was slower: the next run measures again (here against a closed port, so the client's
    # warm-up fails - it ran) and one of another key does not
    slower = B.judge({"completed": 12, "duration": 1.0, "request_throughput": 12.0, "output_throughput": 100.0,
                      "median_ttft_ms": 1.0, "p99_ttft_ms": 1.0, "median_itl_ms": 1.0, "p99_itl_ms": 1.0},
                     B.empty_state(), build_set="set-a", model_commit="c0ffee", settings=SETTINGS, max_slowdown_pct=15,
                     host="gpu1", stamp="s")["state"]  # fmt: skip
    slower["runs"][B.key_of("set-a", "c0ffee", SETTINGS)]["latest"]["verdict"] = "slower"
    state.write_text(json.dumps(slower))
    again = run_module("sglang_bench", args)
    assert again.get("failed") and "expected SGLang's benchmark client to exit 0" in again["msg"], again
    assert run_module("sglang_bench", dict(args, build_set="set-b"))["verdict"] == "not due"


def test_a_hanging_client_that_does_not_finish_is_ended_with_its_process_group_and_the_task_fails(models, tmp_path):
    child = tmp_path / "child.pid"
    hang = tmp_path / "hanging-python"  # a client that starts a child of its own and never ends
    hang.write_text(f"#!/bin/sh\nsleep 600 &\necho $! > {child}\nexec sleep 600\n")
    hang.chmod(0o755)
    args = dict(SETTINGS, python=str(hang), base_url="http://127.0.0.1:9", timeout=1,
                tokenizer=str(models["llama3-8b"]), state_file=str(tmp_path / "s.json"))  # fmt: skip
    got = run_module("sglang_bench", args)
    assert got.get("failed") and "within 1 s" in got["msg"] and "server_bench_timeout" in got["msg"], got
    pid = int(child.read_text())
    assert not Path(f"/proc/{pid}").exists() or Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"
    assert not (tmp_path / "s.json").exists()
