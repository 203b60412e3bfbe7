"""Waiting logic of the sglang_server module in log_path mode, with a writer thread appending to a temp file."""

import json
import os
import threading
import time
from pathlib import Path

import pytest
from ansible.module_utils.testing import patch_module_args

from ansible_collections.llmops.sglang.plugins.module_utils.sglang_wait import LogFollower
from ansible_collections.llmops.sglang.plugins.modules import sglang_server as mod

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


class Writer(threading.Thread):
    """Appends (delay, text) steps to a file; records the wall time of each write."""

    def __init__(self, path, steps):
        super().__init__(daemon=True)
        self.path, self.steps, self.times = path, steps, []

    def run(self):
        for delay, text in self.steps:
            time.sleep(delay)
            if text is None:
                continue
            if callable(text):
                text()
            else:
                with open(self.path, "a") as fh:
                    fh.write(text)
                    fh.flush()
            self.times.append(time.time())


def wait(path, **kw):
    kw.setdefault("poll_interval", 0.05)
    kw.setdefault("timeout", 10)
    kw.setdefault("stall_timeout", 0)
    follower = LogFollower(str(path))
    try:
        return mod.wait_for_startup(follower, time.time(), **kw)
    finally:
        follower.close()


def test_ready(tmp_path):
    p = tmp_path / "s.log"
    p.write_text("")
    w = Writer(p, [(0.1, STARTUP), (0.2, CAPTURE_END), (0.2, READY)])
    w.start()
    log, status = wait(p)
    assert status == "ready"
    assert time.time() - w.times[-1] < 1.0
    res = mod.build_result(log, status, time.time() - 1)
    assert res["done"] and res["outcome"] == "ready" and res["phase"] == "ready"
    assert res["ranks"]["TP0"]["kv_tokens"] == 1000
    assert set(res["milestones"]) >= {"started", "kv_allocated", "cuda_graph_captured", "ready"}


def test_oom_fails_within_two_seconds_of_the_event(tmp_path):
    p = tmp_path / "s.log"
    p.write_text("")
    w = Writer(p, [(0.1, STARTUP), (0.5, OOM)])
    w.start()
    log, status = wait(p, stall_timeout=30)
    took = time.time() - w.times[-1]
    assert status == "failed" and took < 2.0
    res = mod.build_result(log, status, time.time())
    assert res["outcome"] == "oom_cuda_graph"
    assert res["suggestion"]["value"] < 0.88
    assert res["log_tail"][-1].startswith("Exception: Capture cuda graph failed")


def test_stall(tmp_path):
    p = tmp_path / "s.log"
    p.write_text("")
    w = Writer(p, [(0.05, STARTUP)])
    w.start()
    t0 = time.time()
    log, status = wait(p, stall_timeout=1)
    assert status == "stalled"
    assert 1.0 <= time.time() - t0 < 2.5
    res = mod.build_result(log, status, t0)
    assert res["outcome"] == "stalled" and res["phase"] == "cuda_graph_capturing"


def test_stale_ready_line_from_an_earlier_run_is_not_matched(tmp_path):
    p = tmp_path / "s.log"
    p.write_text(STARTUP + CAPTURE_END + READY)  # the previous run, ready
    w = Writer(p, [(0.2, STARTUP)])  # the new run never gets ready
    w.start()
    log, status = wait(p, timeout=1.5)
    assert status == "timeout"
    assert not log.ready and log.phase == "cuda_graph_capturing"


def test_rotation_during_wait(tmp_path):
    p = tmp_path / "s.log"
    p.write_text("old run\n" + READY)

    def rotate():
        os.rename(p, tmp_path / "s.log.1")
        p.write_text(STARTUP)

    w = Writer(
        p, [(0.1, lines("Load weight begin. avail mem=70.00 GB")), (0.2, rotate), (0.2, CAPTURE_END), (0.2, READY)]
    )
    w.start()
    log, status = wait(p)
    assert status == "ready" and log.ranks["TP0"].kv_tokens == 1000


def test_truncation_during_wait(tmp_path):
    p = tmp_path / "s.log"
    p.write_text("x" * 5000 + "\n" + READY)

    def truncate():
        with open(p, "w") as fh:
            fh.write(STARTUP)

    w = Writer(p, [(0.2, truncate), (0.2, CAPTURE_END), (0.2, READY)])
    w.start()
    log, status = wait(p)
    assert status == "ready" and log.phase == "ready"


def test_wait_budget_returns_not_done_then_resume_continues(tmp_path):
    p = tmp_path / "s.log"
    p.write_text("earlier run\n" + READY)
    inode, offset = os.stat(p).st_ino, os.stat(p).st_size
    launch = time.time()
    with open(p, "a") as fh:
        fh.write(STARTUP)
    f = LogFollower(str(p), offset=offset, inode=inode)
    log, status = mod.wait_for_startup(f, launch, wait_budget=0.3, poll_interval=0.05, stall_timeout=0)
    f.close()
    assert status == "budget"
    res = mod.build_result(log, status, launch)
    assert res["done"] is False and res["phase"] == "cuda_graph_capturing"
    with open(p, "a") as fh:
        fh.write(CAPTURE_END + READY)
    f = LogFollower(str(p), offset=offset, inode=inode)  # what a resumed call does with the token
    log, status = mod.wait_for_startup(f, launch, catch_up=True, poll_interval=0.05, stall_timeout=0)
    f.close()
    assert status == "ready"


def test_unit_death_is_reported(tmp_path):
    p = tmp_path / "s.log"
    p.write_text("")
    w = Writer(p, [(0.05, STARTUP)])
    w.start()
    calls = []

    def unit_check():
        calls.append(1)
        return "the unit is failed/failed (main process exit status 1)" if len(calls) > 1 else None

    log, status = wait(p, unit_check=unit_check)
    assert status == "died"
    res = mod.build_result(log, status, time.time())
    assert res["outcome"] == "crash" and "exit status 1" in res["diagnosis"]


def test_health_gate(tmp_path):
    p = tmp_path / "s.log"
    p.write_text("")
    w = Writer(p, [(0.05, STARTUP + CAPTURE_END + READY)])
    w.start()
    answers = iter([503, 503, 200])
    log, status = wait(p, health=lambda: next(answers))
    assert status == "ready" and log.health == 200


def test_token_roundtrip_and_rejects_garbage():
    tok = mod.encode_token({"source": "file", "path": "/x", "inode": 5, "offset": 7, "launch": 1.5})
    assert mod.decode_token(tok)["offset"] == 7
    with pytest.raises(ValueError):
        mod.decode_token("nope")


def test_unit_dead_rules():
    assert mod.unit_dead({"ActiveState": "active", "InvocationID": "a"}, "a") is None
    assert "failed" in mod.unit_dead({"ActiveState": "failed", "SubState": "failed", "InvocationID": "a"}, "a")
    assert "restarted" in mod.unit_dead({"ActiveState": "active", "InvocationID": "b"}, "a")


def run_module(args, capsys):
    with patch_module_args(args), pytest.raises(SystemExit) as exc:
        mod.main()
    return exc.value.code, json.loads(capsys.readouterr().out)


def test_module_log_path_mode_end_to_end(tmp_path, capsys):
    p = tmp_path / "s.log"
    p.write_text(READY)  # stale
    w = Writer(p, [(0.3, STARTUP + CAPTURE_END), (0.2, READY)])
    w.start()
    code, out = run_module({"log_path": str(p), "timeout": 10, "poll_interval": 0.05}, capsys)
    assert code == 0 and out["outcome"] == "ready" and out["done"] is True and out["launched"] is False
    assert mod.decode_token(out["resume"])["offset"] == len(READY)


def test_module_failure_message(tmp_path, capsys):
    p = tmp_path / "s.log"
    p.write_text("")
    w = Writer(p, [(0.2, STARTUP + OOM)])
    w.start()
    code, out = run_module({"log_path": str(p), "timeout": 10, "poll_interval": 0.05}, capsys)
    assert code == 1 and out["failed"]
    assert out["outcome"] == "oom_cuda_graph" and "mem-fraction-static" in out["msg"]
    assert len(out["log_tail"]) <= 30


def test_module_check_mode_log_only(tmp_path, capsys):
    code, out = run_module({"log_path": str(tmp_path / "x.log"), "_ansible_check_mode": True}, capsys)
    assert code == 0 and out["changed"] is False and "would wait" in out["msg"]


def test_module_resume_with_fixed_args(tmp_path, capsys):
    """An until loop re-runs the task with the same args: every attempt continues the same launch."""
    p = tmp_path / "s.log"
    p.write_text(READY)
    tok = mod.encode_token(
        {"source": "file", "path": str(p), "inode": os.stat(p).st_ino, "offset": len(READY), "launch": time.time()}
    )
    with open(p, "a") as fh:
        fh.write(STARTUP)
    args = {"resume": tok, "wait_budget": 0.3, "poll_interval": 0.05}
    code, out = run_module(args, capsys)
    assert code == 0 and out["done"] is False and out["phase"] == "cuda_graph_capturing"
    with open(p, "a") as fh:
        fh.write(CAPTURE_END + READY)
    code, out = run_module(args, capsys)
    assert code == 0 and out["done"] is True and out["outcome"] == "ready"


def test_module_glm5_oom_fixture_replayed(tmp_path, capsys):
    p = tmp_path / "s.log"
    p.write_text("")
    w = Writer(p, [(0.2, (LOGS / "v0_5_9_glm5_capture_oom.log").read_bytes().decode())])
    w.start()
    code, out = run_module({"log_path": str(p), "timeout": 10, "poll_interval": 0.05}, capsys)
    assert code == 1 and out["suggestion"]["value"] == 0.92
