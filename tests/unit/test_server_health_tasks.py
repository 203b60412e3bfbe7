"""The server stage's GPU health readings (roles/server/tasks/health.yml), run by Ansible on localhost against the
simulated GPUs (sim/gpu/nvidia-smi -q and sim/gpu/dmesg on PATH, faults planted in the fake's fault file) and, for
the reading under load, a loopback HTTP server standing for SGLang's /v1/chat/completions. Each fault fails the host
with its sentence; a healthy host passes; an idle GPU whose link trained down is only reported; the same link read
while the generation request runs fails; the request the reading waits for is the one the server received."""

from __future__ import annotations

import http.server
import json
import os
import threading
from pathlib import Path
from typing import ClassVar

import pytest
import yaml
from _localhost_play import PASSED, run_tasks_from

ROOT = Path(__file__).resolve().parents[2]
SIM = ROOT / "sim" / "gpu"
XID79 = (Path(__file__).parent / "fixtures" / "gpu_health" / "dmesg-nvsentinel155-xid79.txt").read_text()
DEFAULTS = yaml.safe_load((ROOT / "roles" / "server" / "defaults" / "main.yml").read_text())


class Chat(http.server.BaseHTTPRequestHandler):
    bodies: ClassVar[list] = []

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Chat.bodies.append((self.path, body, self.headers.get("Authorization")))
        out = json.dumps({"choices": [{"message": {"content": "1\\n2\\n3"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    Chat.bodies = []
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Chat)
    t = threading.Thread(target=httpd.serve_forever, daemon=True)
    t.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()
    t.join(timeout=10)


def run(tmp_path, *, phase="idle", faults=None, kernel_log="", port=1, extra=None, verbose=False):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(SIM / "nvidia-smi")
    (bin_dir / "dmesg").symlink_to(SIM / "dmesg")
    (bin_dir / "journalctl").write_text("#!/bin/sh\nexit 0\n")  # no kernel messages in journald: dmesg is read
    (bin_dir / "journalctl").chmod(0o755)
    (tmp_path / "driver").write_text("580.95.05\n")
    (tmp_path / "faults.json").write_text(json.dumps(faults or {}))
    (tmp_path / "kernel.log").write_text("[    0.000000] Linux version 6.1.0-28-amd64\n" + kernel_log)
    variables = {
        "server_health_phase": phase,
        "server_url": f"http://127.0.0.1:{port}",
        "server_served_model_name": "served-name",
        "llmops_env_file": str(tmp_path / "sglang.env"),
        **(extra or {}),
    }
    env = dict(
        PATH=f"{bin_dir}:{os.environ['PATH']}",
        SIM_GPU_PROFILE=str(SIM / "profiles" / "h100-80gb-x8.json"),
        SIM_GPU_DRIVER_FILE=str(tmp_path / "driver"),
        SIM_GPU_LOADED_FILE=str(tmp_path / "loaded"),
        SIM_GPU_FAULTS=str(tmp_path / "faults.json"),
        SIM_GPU_KERNEL_LOG=str(tmp_path / "kernel.log"),
        ANSIBLE_LOCAL_TEMP=str(tmp_path / "tmp"),
        ANSIBLE_ASYNC_DIR=str(tmp_path / "async"),
        ANSIBLE_KEEP_REMOTE_FILES="1",
        ANSIBLE_REMOTE_TMP=str(tmp_path / "remote-tmp"),
    )
    return run_tasks_from(
        tmp_path,
        "llmops.sglang.server",
        "health.yml",
        variables,
        message="{{ server_gpu_health.verdict }}",
        env=env,
        args=["-vvv"] if verbose else [],
    )


def test_the_defaults_turn_both_readings_on_and_fail_on_critical():
    assert DEFAULTS["server_health_check"] is True and DEFAULTS["server_health_under_load"] is True
    assert DEFAULTS["server_health_fail_on"] == "critical"


def test_a_healthy_host_passes(tmp_path):
    rc, out = run(tmp_path)
    assert rc == 0, out[-3000:]
    assert PASSED + " ok" in out or PASSED + " warning" in out, out[-3000:]


def test_an_xid_79_since_boot_fails_the_host_with_its_sentence(tmp_path):
    rc, out = run(tmp_path, kernel_log=XID79)
    assert rc != 0 and PASSED not in out, out[-3000:]
    assert "Xid 79" in out and "Traceback" not in out, out[-3000:]


def test_a_pending_row_remap_fails_the_host(tmp_path):
    rc, out = run(tmp_path, faults={"remapped_rows_pending": [1]})
    assert rc != 0 and PASSED not in out, out[-3000:]
    assert "remap" in out.lower(), out[-3000:]


def test_a_link_at_gen2_is_only_reported_while_idle(tmp_path):
    rc, out = run(tmp_path, faults={"pcie_gen_current": {"0": 2}})
    assert rc == 0, out[-3000:]
    assert PASSED in out, out[-3000:]


def test_the_same_link_fails_while_the_generation_request_runs(tmp_path, server):
    rc, out = run(tmp_path, phase="load", faults={"pcie_gen_current": {"0": 2}}, port=server)
    assert rc != 0 and PASSED not in out, out[-3000:]
    assert "Gen" in out and "under load" in out.lower(), out[-3000:]


def test_under_load_a_healthy_host_passes_after_the_request_it_sent(tmp_path, server):
    rc, out = run(tmp_path, phase="load", port=server, extra={"server_health_load_tokens": 64})
    assert rc == 0 and PASSED in out, out[-3000:]
    assert "changed=0" in out, out[-3000:]  # reads only: a converged re-run stays changed=0
    [(path, body, auth)] = Chat.bodies
    assert path == "/v1/chat/completions" and body["model"] == "served-name" and body["max_tokens"] == 64, body
    assert auth is None  # no environment file: no key


def test_the_request_sends_the_key_from_the_environment_file_and_nothing_on_the_host_holds_it(tmp_path, server):
    key = "sk-llmops-" + "q7" * 16
    (tmp_path / "sglang.env").write_text(f"SGLANG_API_KEY={key}\n")
    rc, out = run(tmp_path, phase="load", port=server, verbose=True)
    assert rc == 0 and PASSED in out, out[-3000:]
    [(_, _, auth)] = Chat.bodies
    assert auth == f"Bearer {key}"
    assert key not in out
    # kept module payloads and any async job files: the key is in none (it was read on the host, never an argument)
    leftovers = [f for d in ("remote-tmp", "async", "tmp") for f in (tmp_path / d).rglob("*") if f.is_file()]
    assert leftovers, "ANSIBLE_KEEP_REMOTE_FILES kept nothing: the check would prove nothing"
    assert [f for f in leftovers if key in f.read_text(errors="replace")] == []


def test_a_load_request_that_fails_fails_the_reading_with_what_to_check(tmp_path):
    rc, out = run(tmp_path, phase="load", port=9)  # nothing listens on port 9
    assert rc != 0 and PASSED not in out, out[-3000:]
    assert "expected the generation request that kept the GPUs busy to answer 200" in out, out[-3000:]


def test_fail_on_never_only_reports(tmp_path):
    rc, out = run(tmp_path, kernel_log=XID79, extra={"server_health_fail_on": "never"})
    assert rc == 0 and PASSED + " critical" in out, out[-3000:]
