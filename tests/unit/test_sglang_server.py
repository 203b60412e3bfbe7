"""Waiting logic of the sglang_server module in log_path mode on a fake clock: the log is appended at scripted clock
times inside the wait loop's own sleeps, so no outcome depends on how fast this machine is."""

import functools
import json
import os
import time
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args
from fake_clock import FakeClock

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_launch
from ansible_collections.llmops.sglang.plugins.module_utils import sglang_server_run as mod
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_wait import LogFollower

LOGS = Path(__file__).parent / "fixtures" / "logs"
D = "2026-02-18"


def lines(*msgs, rank="TP0"):
    return "".join(f"[{D} 23:58:16 {rank}] {m}\n" if rank else f"[{D} 23:58:16] {m}\n" for m in msgs)


STARTUP = lines("server_args=ServerArgs(mem_fraction_static=0.88, tp_size=1, port=30000)", rank="") + lines(
    "Load weight begin. avail mem=70.00 GB",
    "Load weight end. elapsed=1.00 s, type=X, dtype=torch.bfloat16, avail mem=40.00 GB, mem usage=30.00 GB.",
    "KV Cache is allocated. #tokens: 1000, K size: 10.00 GB, V size: 10.00 GB",
    "Memory pool end. avail mem=19.00 GB",
    "Capture cuda graph begin. This can take up to several minutes. avail mem=18.90 GB",
)
CAPTURE_END = lines("Capture cuda graph end. Time elapsed: 2.00 s. mem usage=1.00 GB. avail mem=17.90 GB.")
READY = lines("The server is fired up and ready to roll!", rank="")
OOM = lines("Scheduler hit an exception: Traceback (most recent call last):") + (
    "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.00 GiB. GPU 0 has a total "
    "capacity of 79.00 GiB of which 500.00 MiB is free.\n"
)


POLL = 0.05


@pytest.fixture
def clock():
    """The wait loop's clock: it moves only when the loop sleeps; the log is written at scripted clock times."""
    return FakeClock(time.time())


def wait(clock, path, **kw):
    kw.setdefault("poll_interval", POLL)
    kw.setdefault("timeout", 10)
    kw.setdefault("stall_timeout", 0)
    follower = LogFollower(str(path))
    try:
        return mod.wait_for_startup(follower, clock(), clock=clock, sleep=clock.sleep, **kw)
    finally:
        follower.close()


def test_ready(tmp_path, clock):
    p = tmp_path / "s.log"
    p.write_text("")
    clock.at(0.1, clock.append(p, STARTUP)).at(0.3, clock.append(p, CAPTURE_END)).at(0.5, clock.append(p, READY))
    log, status = wait(clock, p)
    assert status == "ready"
    assert clock.elapsed() == pytest.approx(0.5, abs=POLL)  # the first poll after the ready line
    res = mod.build_result(log, status, clock() - 1, clock=clock)
    assert res["done"] and res["outcome"] == "ready" and res["phase"] == "ready" and res["elapsed"] == 1
    assert res["ranks"]["TP0"]["kv_tokens"] == 1000
    assert set(res["milestones"]) >= {"started", "kv_allocated", "cuda_graph_captured", "ready"}


def test_oom_fails_at_the_first_poll_after_the_event(tmp_path, clock):
    p = tmp_path / "s.log"
    p.write_text("")
    clock.at(0.1, clock.append(p, STARTUP)).at(0.6, clock.append(p, OOM))
    log, status = wait(clock, p, stall_timeout=30)
    assert status == "failed"
    assert clock.elapsed() - 0.6 <= POLL + 1e-9  # decided at the first read after the OOM line
    res = mod.build_result(log, status, clock(), clock=clock)
    assert res["outcome"] == "oom_cuda_graph"
    assert res["suggestion"]["value"] < 0.88
    assert res["log_tail"][-1].startswith("Exception: Capture cuda graph failed")


def test_stall(tmp_path, clock):
    p = tmp_path / "s.log"
    p.write_text("")
    clock.at(0.05, clock.append(p, STARTUP))
    log, status = wait(clock, p, stall_timeout=1)
    assert status == "stalled"
    assert clock.elapsed() == pytest.approx(0.05 + 1, abs=POLL)  # one stall_timeout after the last line
    res = mod.build_result(log, status, clock.start, clock=clock)
    assert res["outcome"] == "stalled" and res["phase"] == "cuda_graph_capturing"


def test_stale_ready_line_from_an_earlier_run_is_not_matched(tmp_path, clock):
    p = tmp_path / "s.log"
    p.write_text(STARTUP + CAPTURE_END + READY)  # the previous run, ready
    clock.at(0.2, clock.append(p, STARTUP))  # the new run never gets ready
    log, status = wait(clock, p, timeout=1.5)
    assert status == "timeout" and clock.elapsed() == pytest.approx(1.5)
    assert not log.ready and log.phase == "cuda_graph_capturing"


def test_rotation_during_wait(tmp_path, clock):
    p = tmp_path / "s.log"
    p.write_text("old run\n" + READY)

    def rotate():
        os.rename(p, tmp_path / "s.log.1")
        clock.append(p, STARTUP)()

    clock.at(0.1, clock.append(p, lines("Load weight begin. avail mem=70.00 GB"))).at(0.3, rotate)
    clock.at(0.5, clock.append(p, CAPTURE_END)).at(0.7, clock.append(p, READY))
    log, status = wait(clock, p)
    assert status == "ready" and log.ranks["TP0"].kv_tokens == 1000


def test_truncation_during_wait(tmp_path, clock):
    p = tmp_path / "s.log"
    p.write_text("x" * 5000 + "\n" + READY)

    def truncate():
        p.write_text("")
        clock.append(p, STARTUP)()

    clock.at(0.2, truncate).at(0.4, clock.append(p, CAPTURE_END)).at(0.6, clock.append(p, READY))
    log, status = wait(clock, p)
    assert status == "ready" and log.phase == "ready"


def test_wait_budget_returns_not_done_then_resume_continues(tmp_path, clock):
    p = tmp_path / "s.log"
    p.write_text("earlier run\n" + READY)
    inode, offset = os.stat(p).st_ino, os.stat(p).st_size
    launch = clock()
    clock.append(p, STARTUP)()
    f = LogFollower(str(p), offset=offset, inode=inode)
    log, status = mod.wait_for_startup(
        f, launch, wait_budget=0.3, poll_interval=POLL, stall_timeout=0, clock=clock, sleep=clock.sleep
    )
    f.close()
    assert status == "budget" and clock.elapsed() == pytest.approx(0.3)
    res = mod.build_result(log, status, launch, clock=clock)
    assert res["done"] is False and res["phase"] == "cuda_graph_capturing"
    clock.append(p, CAPTURE_END + READY)()
    f = LogFollower(str(p), offset=offset, inode=inode)  # what a resumed call does with the token
    log, status = mod.wait_for_startup(
        f, launch, catch_up=True, poll_interval=POLL, stall_timeout=0, clock=clock, sleep=clock.sleep
    )
    f.close()
    assert status == "ready"


def test_unit_death_is_reported(tmp_path, clock):
    p = tmp_path / "s.log"
    p.write_text("")
    clock.at(0.05, clock.append(p, STARTUP))
    calls = []

    def unit_check():
        calls.append(1)
        return "the unit is failed/failed (main process exit status 1)" if len(calls) > 1 else None

    log, status = wait(clock, p, unit_check=unit_check)
    assert status == "died"
    res = mod.build_result(log, status, clock(), clock=clock)
    assert res["outcome"] == "crash" and "exit status 1" in res["diagnosis"]


def test_health_gate(tmp_path, clock):
    p = tmp_path / "s.log"
    p.write_text("")
    clock.at(0.05, clock.append(p, STARTUP + CAPTURE_END + READY))
    answers = iter([503, 503, 200])
    log, status = wait(clock, p, health=lambda: next(answers))
    assert status == "ready" and log.health == 200


def test_token_roundtrip_and_rejects_garbage():
    tok = sglang_launch.encode_token({"source": "file", "path": "/x", "inode": 5, "offset": 7, "launch": 1.5})
    assert sglang_launch.decode_token(tok)["offset"] == 7
    with pytest.raises(ValueError):
        sglang_launch.decode_token("nope")


def test_unit_dead_rules():
    assert sglang_launch.unit_dead({"ActiveState": "active", "InvocationID": "a"}, "a") is None
    assert "failed" in sglang_launch.unit_dead(
        {"ActiveState": "failed", "SubState": "failed", "InvocationID": "a"}, "a"
    )
    assert "restarted" in sglang_launch.unit_dead({"ActiveState": "active", "InvocationID": "b"}, "a")


@pytest.fixture
def on_clock(monkeypatch, clock):
    """The module's main() on the fake clock: its wait loops and its own time.time()/time.sleep()."""
    monkeypatch.setattr(
        mod, "wait_for_startup", functools.partial(mod.wait_for_startup, clock=clock, sleep=clock.sleep)
    )
    monkeypatch.setattr(mod, "time", clock.time_module())
    return clock


def run_module(args, capsys):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        mod.run_module()
    return exc.value.code, json.loads(capsys.readouterr().out)


def test_module_log_path_mode_end_to_end(tmp_path, capsys, on_clock):
    p = tmp_path / "s.log"
    p.write_text(READY)  # stale
    on_clock.at(0.3, on_clock.append(p, STARTUP + CAPTURE_END)).at(0.5, on_clock.append(p, READY))
    code, out = run_module({"log_path": str(p), "timeout": 10, "poll_interval": 0.05}, capsys)
    assert code == 0 and out["outcome"] == "ready" and out["done"] is True and out["launched"] is False
    assert sglang_launch.decode_token(out["resume"])["offset"] == len(READY)


def test_module_failure_message(tmp_path, capsys, on_clock):
    p = tmp_path / "s.log"
    p.write_text("")
    on_clock.at(0.2, on_clock.append(p, STARTUP + OOM))
    code, out = run_module({"log_path": str(p), "timeout": 10, "poll_interval": 0.05}, capsys)
    assert code == 1 and out["failed"]
    assert out["outcome"] == "oom_cuda_graph" and "mem-fraction-static" in out["msg"]
    assert len(out["log_tail"]) <= 30


def test_module_check_mode_log_only(tmp_path, capsys):
    code, out = run_module({"log_path": str(tmp_path / "x.log"), "_ansible_check_mode": True}, capsys)
    assert code == 0 and out["changed"] is False and "would wait" in out["msg"]


def test_module_resume_with_fixed_args(tmp_path, capsys, on_clock):
    """An until loop re-runs the task with the same args: every attempt continues the same launch."""
    p = tmp_path / "s.log"
    p.write_text(READY)
    tok = sglang_launch.encode_token(
        {"source": "file", "path": str(p), "inode": os.stat(p).st_ino, "offset": len(READY), "launch": on_clock()}
    )
    on_clock.append(p, STARTUP)()
    args = {"resume": tok, "wait_budget": 0.3, "poll_interval": 0.05}
    code, out = run_module(args, capsys)
    assert code == 0 and out["done"] is False and out["phase"] == "cuda_graph_capturing"
    on_clock.append(p, CAPTURE_END + READY)()
    code, out = run_module(args, capsys)
    assert code == 0 and out["done"] is True and out["outcome"] == "ready"


def test_module_glm5_oom_fixture_replayed(tmp_path, capsys, on_clock):
    p = tmp_path / "s.log"
    p.write_text("")
    on_clock.at(0.2, on_clock.append(p, (LOGS / "v0_5_9_glm5_capture_oom.log").read_bytes().decode()))
    code, out = run_module({"log_path": str(p), "timeout": 10, "poll_interval": 0.05}, capsys)
    assert code == 1 and out["suggestion"]["value"] == 0.92


DYING = lines("SIGQUIT received. signum=None, frame=None. It usually means one child failed.", rank="")


@pytest.fixture
def fake_systemctl(tmp_path, monkeypatch):
    """A systemctl on PATH for one active unit whose process, as SGLang's does when a rank dies before the main
    process handles SIGTERM, logs "SIGQUIT received ... one child failed" while it stops (``stop`` and ``restart``).
    Returns the log path; the calls are kept in calls.txt."""
    bindir, log = tmp_path / "bin", tmp_path / "server.log"
    bindir.mkdir()
    (tmp_path / "state").write_text("active 1")
    script = bindir / "systemctl"
    script.write_text(
        f"""#!/bin/bash
state={tmp_path}/state log={log}
echo "$*" >>{tmp_path}/calls.txt
read -r active inv <"$state"
case "$1" in
  show) printf 'ActiveState=%s\\nSubState=running\\nExecMainStatus=0\\nInvocationID=inv%s\\n' "$active" "$inv" ;;
  stop) [ "$active" = active ] && printf '%s' {json.dumps(DYING)} >>"$log"; echo "inactive $inv" >"$state" ;;
  start|restart)
    [ "$1" = restart ] && [ "$active" = active ] && printf '%s' {json.dumps(DYING)} >>"$log"
    echo "active $((inv + 1))" >"$state" ;;
esac
"""
    )
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    log.write_text(STARTUP + CAPTURE_END + READY)  # the running process's start-up
    return log


def test_a_restart_does_not_read_what_the_old_process_logs_while_it_stops(tmp_path, capsys, on_clock, fake_systemctl):
    on_clock.at(0.3, on_clock.append(fake_systemctl, STARTUP + CAPTURE_END + READY))
    args = {"name": "sglang.service", "state": "restarted", "log_path": str(fake_systemctl), "timeout": 10,
            "poll_interval": 0.05}  # fmt: skip
    code, out = run_module(args, capsys)
    assert code == 0 and out["outcome"] == "ready", out
    calls = [c.split()[0] for c in (tmp_path / "calls.txt").read_text().splitlines()]
    assert calls[calls.index("stop") + 1 :].count("start") == 1 and "restart" not in calls, calls
    assert "SIGQUIT" in fake_systemctl.read_text()  # the old process did log it, before the new launch's offset
