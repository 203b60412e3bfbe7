"""The server role's pieces that run on the node.

The retry arithmetic (module_utils/server_policy.py) and the secret-redacting launcher.
"""

import os
import signal
import subprocess
import sys
from pathlib import Path

from server_launcher import LAUNCHER, load

from ansible_collections.llmops.sglang.plugins.module_utils import server_policy as sglang_plan
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_memory import plan

ROOT = Path(__file__).resolve().parents[2]
GLM5 = ROOT / "tests" / "unit" / "fixtures" / "models" / "glm5-like"
OOM = (
    "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.83 GiB. GPU 0 has a total "
    "capacity of 95.59 GiB of which 1.02 GiB is free."
)


def test_oom_figures_from_torch_message():
    assert sglang_plan.oom_figures(["x", OOM]) == (1.83, 1.02)
    assert sglang_plan.oom_figures(["Tried to allocate 448.00 MiB. of which 512.00 MiB is free"]) == (0.4375, 0.5)
    assert sglang_plan.oom_figures([]) == (None, None)


def test_retry_after_the_reference_capture_oom_lands_on_a_fraction_that_fits():
    p = plan(
        str(GLM5 / "config.json"),
        gpu_mem_mib=97887,
        tp=8,
        gpu_arch="sm_120",
        sglang_version="0.5.9",
        mem_fraction_static=0.95,
        weights_gib=61.05,
    ).as_dict()
    attempt = {
        "outcome": "oom_cuda_graph",
        "totals": {"pre_load_min_gb": 94.25, "avail_after_pool_min_gb": 1.27, "avail_after_weights_min_gb": 33.2},
        "server_args": {"mem_fraction_static": 0.95},
        "log_tail": [OOM],
    }
    r = sglang_plan.retry_advice(attempt, p, 0.95)
    assert r["failed_mem_fraction_static"] == 0.95
    assert 0.88 <= r["mem_fraction_static"] < 0.95 and r["cuda_graph_max_bs"] is None
    again = plan(
        str(GLM5 / "config.json"),
        gpu_mem_mib=97887,
        tp=8,
        gpu_arch="sm_120",
        sglang_version="0.5.9",
        mem_fraction_static=r["mem_fraction_static"],
        weights_gib=61.05,
    )
    assert again.verdict == "ok"


def test_retry_recomputes_the_advice_the_diagnosis_printed_from_its_inputs():
    from ansible_collections.llmops.sglang.plugins.module_utils.sglang_memory import capture_oom_advice

    printed = capture_oom_advice(
        pre_load_free_gib=94.2,
        capture_free_gib=1.5,
        mem_fraction_static=0.95,
        tried_to_allocate_gib=1.25,
        free_at_oom_gib=0.96,
        free_after_weights_gib=33.2,
        kv_pool_gib=31.7,
        cuda_graph_max_bs=512,
        family="dsa",
    ).as_dict()
    p = plan(
        str(GLM5 / "config.json"), gpu_mem_mib=97887, tp=8, gpu_arch="sm_120", weights_gib=61.05, sglang_version="0.5.9"
    ).as_dict()
    # totals that would give another answer: the inputs the diagnosis used win
    attempt = {"totals": {"pre_load_min_gb": 50.0, "avail_after_pool_min_gb": 0.1}, "suggestion": printed}
    r = sglang_plan.retry_advice(attempt, p, 0.95)
    assert r["mem_fraction_static"] == printed["mem_fraction_static"] == 0.92
    assert {k: r[k] for k in printed} == printed


def test_launcher_redacts_secrets_split_across_reads():
    mod = load()
    redact, longest = mod.redactor(["sk-secret-123", "", "abc"])  # too-short values are not redacted
    assert longest == len("sk-secret-123")
    assert redact(b"api_key='sk-secret-123' abc") == b"api_key='***' abc"


def test_launcher_relay_keeps_whole_lines(tmp_path):
    mod = load()
    redact, longest = mod.redactor(["sk-secret-123"])
    r, w = os.pipe()
    os.write(w, b"a sk-sec")
    os.write(w, b"ret-123 b\nnext\r")
    os.close(w)
    out_r, out_w = os.pipe()
    saved = os.dup(1)
    os.dup2(out_w, 1)
    try:
        mod.relay(r, redact, longest)
    finally:
        os.dup2(saved, 1)
        os.close(out_w)
    assert os.read(out_r, 1000) == b"a *** b\nnext\r"


def test_retry_after_the_reference_capture_oom_log_relaunches_at_092():
    # the reference 0.95 attempt's log, read by the project's parser as sglang_server returns it to the role
    from ansible_collections.llmops.sglang.plugins.module_utils import sglang_log

    text = (ROOT / "tests" / "unit" / "fixtures" / "logs" / "v0_5_9_glm5_capture_oom.log").read_text()
    attempt = sglang_log.parse_text(text).result()
    attempt["log_tail"] = text.splitlines()[-40:]
    assert attempt["outcome"] == "oom_cuda_graph"
    p = plan(
        str(GLM5 / "config.json"), gpu_mem_mib=97887, tp=8, gpu_arch="sm_120", weights_gib=61.05, sglang_version="0.5.9"
    ).as_dict()
    r = sglang_plan.retry_advice(attempt, p, 0.95)
    assert r["mem_fraction_static"] == 0.92 and r["cuda_graph_max_bs"] is None


def _run_launcher(tmp_path, launch_server_source, *args):
    """The real launcher over a stand-in `sglang.launch_server` module (tmp_path on PYTHONPATH), no API key."""
    pkg = tmp_path / "sglang"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_server.py").write_text(launch_server_source)
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    env.pop("SGLANG_API_KEY", None)
    cmd = [sys.executable, str(LAUNCHER), *args]
    return subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=60)


def test_launcher_dies_by_sglangs_own_sigkill_without_a_traceback_of_its_own(tmp_path):
    # When a child fails, SGLang's launch_server ends its own process tree, itself included, with SIGKILL
    # (sglang 0.5.9, srt/entrypoints/engine.py: launch_phase_sigquit_handler -> srt/utils/common.py:
    # kill_process_tree -> itself.kill()). The launcher must die the same way and add nothing to the server's log:
    # an "OSError: [Errno 22]" of its own there would be read as the server's last error.
    p = _run_launcher(
        tmp_path,
        "import os, signal\n"
        "print('Received sigquit from a child process. It usually means the child failed.', flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n",
        "--port",
        "1",
    )
    assert p.returncode == -signal.SIGKILL, (p.returncode, p.stdout, p.stderr)
    assert p.stdout == "Received sigquit from a child process. It usually means the child failed.\n"
    assert "Traceback" not in p.stderr + p.stdout and p.stderr == ""


def test_launcher_passes_on_an_exit_code_and_a_forwarded_signal(tmp_path):
    assert _run_launcher(tmp_path, "import sys\nsys.exit(3)\n").returncode == 3
    p = _run_launcher(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGTERM)\n")
    assert p.returncode == -signal.SIGTERM and "Traceback" not in p.stderr
