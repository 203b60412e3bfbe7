"""plugins/module_utils/sglang_wait.py: the health-only wait, the follower's edges, and the module's resume path
through them (a loopback HTTP server answers /health)."""

import functools
import http.server
import json
import os
import threading
import time

import pytest
from ansible.module_utils.testing import patch_module_args
from fake_clock import FakeClock

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_launch
from ansible_collections.llmops.sglang.plugins.module_utils import sglang_server_run as mod
from ansible_collections.llmops.sglang.plugins.module_utils import sglang_wait as wait


@pytest.fixture
def on_clock(monkeypatch):
    """sglang_server's main() on a fake clock (its wait loops and its own time.time()): budgets and timeouts pass
    without waiting and without racing this machine's load."""
    clock = FakeClock(time.time())
    for name in ("wait_for_startup", "wait_health_only"):
        monkeypatch.setattr(mod, name, functools.partial(getattr(mod, name), clock=clock, sleep=clock.sleep))
    monkeypatch.setattr(mod, "time", clock.time_module())
    return clock


@pytest.fixture
def health_server():
    """A loopback HTTP server whose /health answers the status in ``state["status"]``."""
    state = {"status": 200, "hits": 0}

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            state["hits"] += 1
            self.send_response(state["status"] if self.path == "/health" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    state["url"] = f"http://127.0.0.1:{srv.server_address[1]}/health"
    yield state
    srv.shutdown()
    srv.server_close()


def run_module(args, capsys):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        mod.run_module()
    return exc.value.code, json.loads(capsys.readouterr().out)


def health_only_token(path, launch, **extra):
    return sglang_launch.encode_token(
        {"source": "file", "path": str(path), "unit": None, "inode": None, "offset": 0, "launch": launch}
        | {"health_only": True}
        | extra
    )


def test_health_only_timeout_counts_from_the_launch_not_from_each_call():
    clock = FakeClock(10_000.0)
    launch = clock.t - 100  # an earlier attempt launched 100 s ago
    log, status = wait.wait_health_only(
        lambda: 503, launch, timeout=120, wait_budget=60, clock=clock, sleep=clock.sleep
    )
    # 20 s of the 120 s were left: the call ends at launch + 120, not at its own start + 60 or + 120
    assert status == "timeout"
    assert clock.t - launch == pytest.approx(120, abs=1.0)
    assert log.health == 503


def test_health_only_retries_never_extend_the_timeout():
    clock = FakeClock(50_000.0)
    launch = clock.t
    statuses = []
    for _ in range(10):  # an until/retries loop calling with the same token
        _, status = wait.wait_health_only(
            lambda: 503, launch, timeout=25, wait_budget=10, clock=clock, sleep=clock.sleep
        )
        statuses.append(status)
        if status != "budget":
            break
    assert statuses == ["budget", "budget", "timeout"]
    assert clock.t - launch == pytest.approx(25, abs=1.0)


def test_health_only_without_a_health_probe_is_a_value_error_not_a_crash():
    with pytest.raises(ValueError, match="needs a health URL"):
        wait.wait_health_only(None, time.time(), timeout=10)


def test_resume_of_a_health_only_token_without_health_url_asks_the_url_recorded_in_the_token(
    tmp_path, capsys, health_server, on_clock
):
    log = tmp_path / "server.log"
    log.write_text("")
    token = health_only_token(log, on_clock(), health_url=health_server["url"])
    code, out = run_module({"resume": token, "wait_budget": 5, "timeout": 60}, capsys)  # the EXAMPLES pattern
    assert code == 0, out
    assert out["outcome"] == "ready" and out["phase"] == "ready" and out["health"] == 200
    assert health_server["hits"] >= 1


def test_first_call_records_the_health_url_in_the_token(tmp_path, capsys, health_server, on_clock):
    log = tmp_path / "server.log"
    log.write_text("")
    code, out = run_module(
        {"log_path": str(log), "health_url": health_server["url"], "wait_budget": 0.2, "poll_interval": 0.05},
        capsys,
    )
    assert code == 0 and out["done"] is False
    assert sglang_launch.decode_token(out["resume"])["health_url"] == health_server["url"]


def test_resume_of_a_health_only_token_past_its_timeout_fails_at_once(tmp_path, capsys, health_server, on_clock):
    health_server["status"] = 503
    log = tmp_path / "server.log"
    log.write_text("")
    token = health_only_token(log, on_clock() - 100, health_url=health_server["url"])
    code, out = run_module({"resume": token, "wait_budget": 30, "timeout": 60}, capsys)
    assert code == 1 and out["done"] is True and out["outcome"] == "incomplete"
    assert on_clock.slept == 0  # not another 30 s slice: the 60 s ran out 40 s ago
    assert out["msg"].startswith("SGLang did not reach http_up: found no http_up within 60 s of the launch")


def test_follower_refuses_a_negative_offset(tmp_path):
    p = tmp_path / "s.log"
    p.write_text("x\n")
    with pytest.raises(ValueError, match="offset >= 0"):
        wait.LogFollower(str(p), offset=-1)


def test_follower_reports_a_missing_file_and_a_directory(tmp_path):
    f = wait.LogFollower(str(tmp_path / "nope.log"))
    assert f.read() == b"" and f.problem() == "does not exist"
    d = wait.LogFollower(str(tmp_path))
    assert d.read() == b"" and d.problem() == "is a directory"
    p = tmp_path / "later.log"
    g = wait.LogFollower(str(p))
    p.write_text("line\n")
    assert g.read() == b"line\n" and g.problem() is None
    g.close()


def test_a_long_poll_interval_never_oversleeps_the_timeout(tmp_path):
    p = tmp_path / "s.log"
    p.write_text("")
    clock = FakeClock(1_000.0)
    f = wait.LogFollower(str(p))
    _, status = wait.wait_for_startup(
        f, clock.t, timeout=5, stall_timeout=0, poll_interval=3600, clock=clock, sleep=clock.sleep
    )
    f.close()
    assert status == "timeout" and clock.slept == pytest.approx(5)


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"poll_interval": float("nan")}, "expected poll_interval to be a finite number of seconds (> 0); found nan"),
        ({"timeout": float("inf")}, "expected timeout to be a finite number of seconds (> 0); found inf"),
        ({"stall_timeout": -1}, "expected stall_timeout >= 0 seconds; found -1"),
    ],
)
def test_the_wait_loop_refuses_numbers_that_would_never_end(tmp_path, kw, message):
    p = tmp_path / "s.log"
    p.write_text("")
    with pytest.raises(ValueError) as exc:
        wait.wait_for_startup(wait.LogFollower(str(p)), time.time(), **kw)
    assert str(exc.value) == message


def test_the_module_reports_a_log_file_that_never_appeared(tmp_path, capsys, on_clock):
    """A log-only wait whose file vanished: the stall message names the missing file instead of "phase None"."""
    missing = tmp_path / "elsewhere" / "server.log"
    token = sglang_launch.encode_token(
        {"source": "file", "path": str(missing), "inode": None, "offset": 0, "launch": on_clock()}
    )
    code, out = run_module({"resume": token, "stall_timeout": 1, "poll_interval": 0.05, "timeout": 30}, capsys)
    assert code == 1
    assert out["msg"] == (
        f"SGLang did not reach ready: the log file {missing} does not exist (the wait ended on no new log line for "
        "1 s). Check the unit's StandardOutput=append:PATH against log_path."
    )
    assert not os.path.exists(missing)


def test_a_unit_whose_log_file_never_appears_fails_after_the_grace_not_the_stall_timeout(tmp_path):
    """systemd creates an append: log before the process starts; no file after the grace means it writes elsewhere."""
    clock = FakeClock(2_000.0)
    follower = wait.LogFollower(str(tmp_path / "elsewhere.log"))
    _, status = wait.wait_for_startup(
        follower, clock.t, timeout=1800, stall_timeout=600, missing_grace=30, clock=clock, sleep=clock.sleep
    )
    assert status == "stalled" and clock.slept == pytest.approx(30, abs=0.5)
    assert follower.problem() == "does not exist"
