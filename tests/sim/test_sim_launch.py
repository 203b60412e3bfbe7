"""The stand-in launcher as a subprocess: start-up logs, calibration, failures, process handling."""

from __future__ import annotations

import os
import re
import signal
import socket

import listeners
import pytest
from conftest import write_profile
from events import sleeping, wait_until

READY = "The server is fired up and ready to roll!"
GLM = "glm5-nvfp4"
LLAMA = "llama3-8b"


def rank_lines(log: str, text: str) -> dict[str, str]:
    """{rank tag: line} of the lines containing ``text``."""
    out = {}
    for m in re.finditer(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d( [^\]]+)?\] (.*)", log):
        if text in m.group(2):
            out[(m.group(1) or "").strip()] = m.group(2)
    return out


# The reference story's two launches with their real flags: 0.88 with --max-running-requests 64, 0.95 with 8.
STORY_088 = ["--tp-size", "8", "--mem-fraction-static", "0.88", "--max-running-requests", "64"]
STORY_095 = ["--tp-size", "8", "--mem-fraction-static", "0.95", "--max-running-requests", "8"]


def test_calibration_088_ready(launch, models, fixed_tree):
    s = launch(["--model-path", str(models[GLM]), *STORY_088], pythonpath=fixed_tree)
    assert s.wait_for(READY), s.log
    log = s.log
    kv = rank_lines(log, "KV Cache is allocated.")
    assert sorted(kv) == [f"TP{i}" for i in range(8)]
    for line in kv.values():
        m = re.fullmatch(r"KV Cache is allocated\. #tokens: (\d+), KV size: ([\d.]+) GB", line)
        assert m, line
        assert int(m.group(1)) == pytest.approx(425664, rel=0.005)
        assert float(m.group(2)) == pytest.approx(24.37, abs=0.1)
    pool = rank_lines(log, "Memory pool end.")
    assert len(pool) == 8
    for line in pool.values():
        assert float(re.search(r"avail mem=([\d.]+) GB", line).group(1)) == pytest.approx(8.61, abs=0.05)
    assert len(rank_lines(log, "Capture cuda graph end. Time elapsed:")) == 8
    assert "server_args=ServerArgs(model_path=" in log and "mem_fraction_static=0.88" in log
    assert "Setting KV cache dtype to fp8_e4m3 for DeepSeek DSA on SM12 device." in log
    assert re.search(r"\[\S+ \S+ TP3\] Load weight begin\. avail mem=94\.25 GB", log)
    assert re.search(
        r"Load weight end\. elapsed=[\d.]+ s, type=GlmMoeDsaForCausalLM, dtype=torch\.bfloat16, "
        r"avail mem=33\.20 GB, mem usage=61\.05 GB\.",
        log,
    )
    assert re.search(r"Capturing batches \(bs=64 avail_mem=8\.6\d GB\)", log)  # graphs up to the 64-request table
    assert re.search(
        r"TP0\] max_total_num_tokens=425664, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        r"max_running_requests=64, context_len=202752, available_gpu_mem=6\.3\d GB",
        log,
    )
    assert '"POST /generate HTTP/1.1" 200 OK' in log
    order = [log.index(x) for x in ("server_args=", "Init torch distributed begin", "Uvicorn running on", READY)]
    assert order == sorted(order)
    # SIGTERM: clean shutdown, no orphans
    children = s.children()
    assert len(children) == 8
    os.kill(s.proc.pid, signal.SIGTERM)
    assert s.wait_exit() == 0
    s.wait_session_empty()


def test_calibration_095_capture_oom(launch, models, fixed_tree):
    s = launch(["--model-path", str(models[GLM]), *STORY_095], pythonpath=fixed_tree)
    rc = s.wait_exit()
    log = s.log
    assert rc != 0
    assert READY not in log
    pool = [float(x) for x in re.findall(r"Memory pool end\. avail mem=([\d.]+) GB", log)]
    assert pool and all(1.0 < x < 1.6 for x in pool)
    assert "Scheduler hit an exception: Traceback (most recent call last):" in log
    assert re.search(
        r"Exception: Capture cuda graph failed: CUDA out of memory\. Tried to allocate [\d.]+ GiB\. GPU \d "
        r"has a total capacity of 95\.59 GiB of which [\d.]+ GiB is free\.",
        log,
    )
    assert (
        "Possible solutions:\n1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
        "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    ) in log
    assert "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)" in log
    assert "Received sigquit from a child process. It usually means the child failed." in log
    s.wait_session_empty()


def test_sm120_fix_absent_fails_in_warmup(launch, models):
    s = launch(["--model-path", str(models[GLM]), "--tp-size", "8", "--mem-fraction-static", "0.88"])
    rc = s.wait_exit()
    log = s.log
    assert rc != 0 and READY not in log
    assert "Capture cuda graph end." in log and "Uvicorn running on" in log
    assert (
        "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 106496, "
        "Hardware limit: 101376. Reducing block sizes or `num_stages` may help."
    ) in log
    assert "SIGQUIT received. signum=None, frame=None. It usually means one child failed." in log


def test_sm120_marker(fixed_tree):
    from sglang.srt import sim_gpu

    assert not sim_gpu.has_sm120_fix()
    fixed = fixed_tree / "sglang/srt/layers/attention/triton_ops/extend_attention.py"
    assert sim_gpu.has_sm120_fix(str(fixed))


def test_not_enough_memory(launch, models, fixed_tree):
    s = launch(["--model-path", str(models[GLM]), "--tp", "8", "--mem-fraction-static", "0.5"], pythonpath=fixed_tree)
    assert s.wait_exit() != 0
    assert (
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
        "Current value: self.server_args.mem_fraction_static=0.5"
    ) in s.log
    assert "KV Cache is allocated" not in s.log


def test_weights_do_not_fit(launch, models):
    s = launch(["--model-path", str(models[GLM]), "--tp", "2"])
    assert s.wait_exit() != 0
    log = s.log
    assert "Load weight begin. avail mem=94.25 GB" in log
    assert "Load weight end" not in log
    assert re.search(
        r"torch\.OutOfMemoryError: CUDA out of memory\. Tried to allocate [\d.]+ GiB\. GPU [01] has a "
        r"total capacity of 95\.59 GiB",
        log,
    )


def test_port_in_use(launch, models):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        s = launch(["--model-path", str(models[LLAMA])], profile="h100-80gb-x8.json", port=port)
        assert s.wait_exit() == 1
    log = s.log
    assert "Capture cuda graph end." in log  # the model was loaded first
    assert (
        f"ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): address already in use"
    ) in log
    assert READY not in log


def test_no_gpu(launch, models, tmp_path):
    s = launch(["--model-path", str(models[LLAMA])], profile=None)
    assert s.wait_exit() != 0
    assert "RuntimeError: Found no NVIDIA driver on your system." in s.log
    s = launch(["--model-path", str(models[LLAMA])], profile="no-gpu.json")
    assert s.wait_exit() != 0
    assert "Found no NVIDIA driver" in s.log
    s = launch(["--model-path", str(models[LLAMA])], env={"CUDA_VISIBLE_DEVICES": ""})
    assert s.wait_exit() != 0
    assert "RuntimeError: No CUDA GPUs are available" in s.log


def test_cuda_visible_devices_and_too_few_gpus(launch, models):
    s = launch(
        ["--model-path", str(models[LLAMA]), "--tp", "4"],
        profile="h100-80gb-x8.json",
        env={"CUDA_VISIBLE_DEVICES": "6,7"},
    )
    assert s.wait_exit() != 0
    assert "RuntimeError: CUDA error: invalid device ordinal" in s.log


def test_llama_tp1_log_format(launch, models):
    s = launch(["--model-path", str(models[LLAMA]), "--mem-fraction-static", "0.85"], profile="h100-80gb-x8.json")
    assert s.wait_for(READY), s.log
    log = s.log
    assert "Attention backend not specified. Use flashinfer backend by default." in log
    assert re.search(
        r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] KV Cache is allocated\. #tokens: 424670, "
        r"K size: 25\.92 GB, V size: 25\.92 GB",
        log,
    )
    assert " TP0]" not in log
    assert "Using KV cache dtype: torch.bfloat16" in log


def test_a_single_node_server_keeps_its_process_groups_store_listening_on_every_interface(launch, models):
    """As SGLang 0.5.9 with torch: the process group at tcp://127.0.0.1:NCCL_PORT, whose TCPStore binds the port on
    every interface; NCCL_PORT from get_free_port(), so a port of the ephemeral range (docs/security.md, Listeners)."""
    s = launch(["--model-path", str(models[LLAMA]), "--mem-fraction-static", "0.85"], profile="h100-80gb-x8.json")
    assert s.wait_for(READY), s.log
    ephemeral = listeners.this_host_range()
    found = listeners.of_process(s.proc.pid)
    store = [(a, p) for a, p, _ in found if p != s.port]
    assert len(store) == 1 and ephemeral[0] <= store[0][1] <= ephemeral[1], found
    assert store[0][0] in listeners.EVERY_INTERFACE, found
    with socket.create_connection(("127.0.0.1", store[0][1]), timeout=10):
        pass  # it accepts, as the store does


def test_0514_log_family(launch, models, fixed_tree):
    s = launch(
        [
            "--model-path",
            str(models[GLM]),
            "--tp",
            "8",
            "--mem-fraction-static",
            "0.88",
            "--cuda-graph-max-bs-decode",
            "256",
        ],
        pythonpath=fixed_tree,
        env={"SGLANG_SIM_LOG_FORMAT": "0.5.14"},
    )
    assert s.wait_for(READY), s.log
    log = s.log
    assert "KV Cache is allocated. dtype: torch.float8_e4m3fn, #tokens: 4" in log
    assert "Capture target decode CUDA graph begin. backend=full, num_tokens_per_bs=1, bs=[1, 2, 4, 8, 12, 16," in log
    assert re.search(
        r"Capture target decode CUDA graph end\. elapsed=[\d.]+ s, mem usage=[\d.]+ GB, "
        r"avail mem=[\d.]+ GB\.",
        log,
    )
    assert re.search(
        r"Load weight end\. elapsed=[\d.]+ s, type=GlmMoeDsaForCausalLM, quant=modelopt_fp4, avail mem=", log
    )
    assert "Capture cuda graph bs" not in log and "cuda_graph_max_bs_decode=256" in log


# ----- fault injection -----
def test_fault_crash_at_phase(launch, models):
    s = launch(
        ["--model-path", str(models[LLAMA]), "--tp", "2"],
        profile="h100-80gb-x8.json",
        env={"SGLANG_SIM_FAULT": "crash@kv_allocated rank=1"},
    )
    assert s.wait_exit() != 0
    log = s.log
    assert re.search(r"TP1\] Scheduler hit an exception: Traceback", log)
    assert "RuntimeError: Simulated failure injected at phase 'kv_allocated' (SGLANG_SIM_FAULT)" in log
    assert "Received sigquit from a child process. It usually means the child failed." in log


def test_fault_nccl(launch, models, tmp_path):
    fault_file = tmp_path / "fault"
    fault_file.write_text("# injected\nnccl\n")
    env = {"SGLANG_SIM_FAULT_FILE": str(fault_file), "SGLANG_SIM_FAULT": None}
    s = launch(["--model-path", str(models[LLAMA]), "--tp", "2"], profile="h100-80gb-x8.json", env=env)
    assert s.wait_exit() != 0
    assert "torch.distributed.DistBackendError: NCCL error in: " in s.log
    assert "Init torch distributed begin." in s.log and "Init torch distributed ends" not in s.log


def test_fault_hang_then_kill_rank_during_launch(launch, models):
    s = launch(
        ["--model-path", str(models[LLAMA]), "--tp", "4"],
        profile="h100-80gb-x8.json",
        env={"SGLANG_SIM_FAULT": "hang@memory_pool_ready"},
    )
    # the event: every rank logged its pool and sleeps in the hang (not a guess of how long a hang must last)
    wait_until(lambda: len(re.findall(r"TP\d\] Memory pool end\.", s.log)) == 4, "4 ranks at Memory pool end")
    children = s.children()
    assert len(children) == 4
    wait_until(lambda: all(sleeping(pid) for pid in children), "every rank to sleep in hang@memory_pool_ready")
    assert s.proc.poll() is None  # hung, alive, silent
    assert "Capture cuda graph begin" not in s.log
    os.kill(children[3], signal.SIGKILL)
    assert s.wait_exit() == 1
    log = s.log
    assert "Rank 3 scheduler is dead. Please check if there are relevant logs." in log
    assert "Exit code: -9" in log
    s.wait_session_empty()


def test_kill_rank_after_launch(launch, models):
    s = launch(["--model-path", str(models[LLAMA]), "--tp", "2"], profile="h100-80gb-x8.json")
    assert s.wait_for(READY)
    os.kill(s.children()[1], signal.SIGKILL)
    assert s.wait_exit() != 0
    assert "SIGQUIT received. signum=None, frame=None. It usually means one child failed." in s.log
    s.wait_session_empty()


def test_memory_used_by_other_processes(launch, models, tmp_path):
    """A GPU partly used by another process: smaller pool for every rank, imbalance warning."""
    profile = write_profile(tmp_path / "busy.json", base="h100-80gb-x8.json", busy={1: 20000})
    s = launch(["--model-path", str(models[LLAMA]), "--tp", "2", "--mem-fraction-static", "0.85"], profile=profile)
    assert s.wait_for(READY), s.log
    log = s.log
    assert re.search(r"TP1\] Load weight begin\. avail mem=58\.\d\d GB", log)
    assert "The memory capacity is unbalanced. Some GPUs may be occupied by other processes." in log
    tokens = {int(x) for x in re.findall(r"#tokens: (\d+)", log)}
    assert len(tokens) == 1
