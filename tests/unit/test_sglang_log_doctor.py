"""bin/sglang-doctor: the thin CLI over sglang_log."""

import json
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCTOR = ROOT / "bin" / "sglang-doctor"
LOGS = Path(__file__).parent / "fixtures" / "logs"


def run(*args, timeout=30):
    return subprocess.run(
        [sys.executable, str(DOCTOR), *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_json_shape_and_exit_codes():
    p = run(str(LOGS / "v0_5_9_glm5_ready.log"), "--json")
    assert p.returncode == 0
    out = json.loads(p.stdout)
    assert list(out) == ["outcome", "phase", "ranks", "pools_and_captures", "max_total_num_tokens", "format",
                         "diagnosis", "suggestion"]  # fmt: skip
    assert out["ranks"]["TP0"]["kv_size_gb"] == 24.37
    p = run(str(LOGS / "v0_5_9_glm5_capture_oom.log"), "--json")
    assert p.returncode == 1 and json.loads(p.stdout)["suggestion"]["value"] == 0.92


def test_text_report():
    p = run(str(LOGS / "v0_4_9_multirank_journald_ready.log"))
    assert p.returncode == 0
    assert "outcome: ready" in p.stdout and "TP3" in p.stdout and "timeline" in p.stdout


def test_usage_errors():
    assert run(str(LOGS / "v0_2_7_gpu_tag_ready.log"), "--follow").returncode == 2
    assert run("/nonexistent/sglang.log").returncode == 2


def test_follow_ignores_old_content_and_sees_new_ready(tmp_path):
    log = tmp_path / "s.log"
    log.write_text("[2026-01-01 00:00:00] The server is fired up and ready to roll!\n")

    def write():
        time.sleep(1.0)
        with open(log, "a") as fh:
            fh.write("[2026-01-01 00:10:00] The server is fired up and ready to roll!\n")

    threading.Thread(target=write, daemon=True).start()
    t0 = time.time()
    p = run(str(log), "--follow", "--timeout", "10", "--json")
    assert p.returncode == 0 and 0.9 < time.time() - t0 < 8
    assert json.loads(p.stdout)["outcome"] == "ready"


def test_follow_stall(tmp_path):
    log = tmp_path / "s.log"
    log.write_text("")
    p = run(str(log), "--follow", "--timeout", "10", "--stall-timeout", "1", "--json")
    assert p.returncode == 1 and json.loads(p.stdout)["outcome"] == "stalled"
