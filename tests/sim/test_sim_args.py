"""Command-line handling of ``python -m sglang.launch_server`` (argparse, exactly like SGLang)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from sglang.srt.server_args import prepare_server_args

SIM_PY = Path(__file__).resolve().parents[2] / "sim" / "sglang" / "python"


def run_launcher(args: list[str], **env) -> subprocess.CompletedProcess:
    e = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    e.update(PYTHONPATH=str(SIM_PY), **env)
    return subprocess.run(
        [sys.executable, "-m", "sglang.launch_server", *args],
        env=e,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_unknown_flag_is_rejected_like_argparse():
    p = run_launcher(["--model-path", "/nonexistent", "--bogus-flag", "1"])
    assert p.returncode == 2
    assert p.stderr.startswith("usage: launch_server.py [-h] --model-path MODEL_PATH")
    assert p.stderr.rstrip().endswith("launch_server.py: error: unrecognized arguments: --bogus-flag 1")


def test_malformed_value_is_rejected():
    p = run_launcher(["--model-path", "/x", "--tp-size", "eight"])
    assert p.returncode == 2
    assert "launch_server.py: error: argument --tensor-parallel-size/--tp-size: invalid int value: 'eight'" in p.stderr
    p = run_launcher(["--model-path", "/x", "--kv-cache-dtype", "fp9"])
    assert p.returncode == 2
    assert "argument --kv-cache-dtype: invalid choice: 'fp9'" in p.stderr


def test_model_path_is_required():
    p = run_launcher(["--tp-size", "8"])
    assert p.returncode == 2
    assert "launch_server.py: error: the following arguments are required: --model-path/--model" in p.stderr


def test_prefix_and_aliases():
    sa = prepare_server_args(["--model", "/m", "--tp", "8", "--dp", "2", "--mem-fraction-static", "0.8"])
    assert (sa.model_path, sa.tp_size, sa.dp_size, sa.mem_fraction_static) == ("/m", 8, 2, 0.8)
    sa = prepare_server_args(["--model-path", "/m", "--tensor-parallel-size", "4", "--cuda-graph-bs", "1", "2", "8"])
    assert sa.tp_size == 4 and sa.cuda_graph_bs == [1, 2, 8]


def test_cuda_graph_max_bs_decode_only_in_0514_family(monkeypatch, capsys):
    monkeypatch.delenv("SGLANG_SIM_LOG_FORMAT", raising=False)
    with pytest.raises(SystemExit) as exc:
        prepare_server_args(["--model-path", "/m", "--cuda-graph-max-bs-decode", "64"])
    assert exc.value.code == 2
    assert "unrecognized arguments: --cuda-graph-max-bs-decode 64" in capsys.readouterr().err
    monkeypatch.setenv("SGLANG_SIM_LOG_FORMAT", "0.5.14")
    sa = prepare_server_args(["--model-path", "/m", "--cuda-graph-max-bs-decode", "64"])
    assert sa.cuda_graph_max_bs_decode == 64 and sa.sim_log_format == "0.5.14"
    monkeypatch.delenv("SGLANG_SIM_LOG_FORMAT")
    sa = prepare_server_args(["--model-path", "/m", "--sim-log-format", "0.5.14", "--cuda-graph-max-bs-decode", "8"])
    assert sa.cuda_graph_max_bs_decode == 8
