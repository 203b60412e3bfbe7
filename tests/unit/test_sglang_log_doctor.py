"""bin/sglang-doctor: the thin CLI over sglang_log."""

import functools
import importlib.machinery
import importlib.util
import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from fake_clock import FakeClock

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


def doctor_on(clock, monkeypatch):
    """The doctor's module (what bin/sglang-doctor runs), its --follow wait loop and its own clock on ``clock``."""
    doctor = importlib.import_module("ansible_collections.llmops.sglang.plugins.plugin_utils.sglang_doctor_cli")
    fake = functools.partial(doctor.wait_for_startup, clock=clock, sleep=clock.sleep)
    monkeypatch.setattr(doctor, "wait_for_startup", fake)
    monkeypatch.setattr(doctor, "time", clock.time_module())
    # main() resets SIGPIPE for a CLI at a pipe's end; inside pytest that would change the test process itself
    monkeypatch.setattr(doctor, "signal", SimpleNamespace(SIGPIPE=signal.SIGPIPE, SIG_DFL=None, signal=lambda *a: None))
    return doctor


def test_follow_ignores_old_content_and_sees_new_ready(tmp_path, capsys, monkeypatch):
    log = tmp_path / "s.log"
    log.write_text("[2026-01-01 00:00:00] The server is fired up and ready to roll!\n")
    clock = FakeClock(time.time())
    clock.at(1.0, clock.append(log, "[2026-01-01 00:10:00] The server is fired up and ready to roll!\n"))
    rc = doctor_on(clock, monkeypatch).main([str(log), "--follow", "--timeout", "10", "--json"])
    assert rc == 0 and json.loads(capsys.readouterr().out)["outcome"] == "ready"
    assert 1.0 <= clock.elapsed() <= 1.2  # it waited for the new line: the old one did not count


def test_follow_stall(tmp_path, capsys, monkeypatch):
    log = tmp_path / "s.log"
    log.write_text("")
    clock = FakeClock(time.time())
    rc = doctor_on(clock, monkeypatch).main([str(log), "--follow", "--timeout", "10", "--stall-timeout", "1", "--json"])
    assert rc == 1 and json.loads(capsys.readouterr().out)["outcome"] == "stalled"
    assert clock.elapsed() == pytest.approx(1.0, abs=0.2)


def test_follow_from_the_command_line(tmp_path):
    """The CLI process itself (no fake clock): a log that is already complete, read --from-start, ends at once."""
    log = tmp_path / "s.log"
    log.write_text("[2026-01-01 00:00:00] The server is fired up and ready to roll!\n")
    p = run(str(log), "--follow", "--from-start", "--timeout", "600", "--json")
    assert p.returncode == 0 and json.loads(p.stdout)["outcome"] == "ready", p.stderr
