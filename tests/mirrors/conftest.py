"""Fixtures for the mirror tests: one build into a temp dir and one serve.py process on 127.0.0.1 per session."""

import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from _mirror_util import sglang_source

ROOT = Path(__file__).resolve().parents[2]
MIRRORS = ROOT / "sim" / "mirrors"
sys.path.insert(0, str(MIRRORS))
sys.path.insert(0, str(Path(__file__).resolve().parent))


@pytest.fixture(scope="session")
def built(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mirrors")
    out = tmp / "out"
    big = tmp / "big-shard-model"
    big.mkdir()
    (big / "config.json").write_text('{"model_type": "llama"}\n')
    # Larger than huggingface_hub's 10 MiB download chunk, so a dropped transfer leaves something to resume from.
    (big / "model.safetensors").write_bytes(random.Random(7).randbytes(12 * 1024 * 1024))
    proc = subprocess.run(
        [
            sys.executable,
            MIRRORS / "build.py",
            "--out",
            out,
            "--base-url",
            "http://127.0.0.1:8080",
            "--sglang-src",
            sglang_source(tmp),
            "--hub-model",
            "sim-org/GLM-5-NVFP4=glm5-nvfp4",
            "--hub-model",
            "sim-org/Meta-Llama-3-8B-Instruct=llama3-8b:gated",
            "--hub-model",
            f"sim-org/big-shard={big}",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    summary = json.loads(proc.stdout)
    yield {"out": out, "summary": summary, "tmp": tmp}
    subprocess.run(
        ["gpgconf", "--kill", "gpg-agent"],
        env=dict(os.environ, GNUPGHOME=str(out / "gnupg")),
        check=False,
        capture_output=True,
    )


@pytest.fixture(scope="session")
def server(built):
    log = built["tmp"] / "requests.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            MIRRORS / "serve.py",
            "--root",
            built["out"],
            "--bind",
            "127.0.0.1",
            "--port",
            "0",
            "--hub-port",
            "0",
            "--hub-token",
            "hf_test_token",
            "--hub-token-no-access",
            "hf_no_access_token",
            "--log",
            log,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    urls = json.loads(proc.stdout.readline())
    yield urls | {"proc": proc, "log": log}
    proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=10)


@pytest.fixture(scope="session")
def torch_venv(server, tmp_path_factory):
    """A fresh venv (pip from ensurepip) with the stand-in torch 2.9.1+cu128 installed from the mirror only."""
    from _mirror_util import clean_env

    venv = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True, env=clean_env())
    py = venv / "bin" / "python"
    proc = subprocess.run(
        [py, "-m", "pip", "install", "--index-url", server["pypi"], "torch==2.9.1+cu128"],
        capture_output=True,
        text=True,
        check=False,
        env=clean_env(),
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return {"python": py, "pip_output": proc.stdout}
