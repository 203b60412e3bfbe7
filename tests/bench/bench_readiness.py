#!/usr/bin/env python3
"""Readiness benchmark: llmops.sglang.sglang_server (log_path mode) vs ansible.builtin.wait_for (path+search_regex).

Run: .venv/bin/python tests/bench/bench_readiness.py  (about 3 minutes; needs ~1 GiB free in /tmp)

Both contestants run through ansible-playbook (-i localhost, connection local, this repo's ansible.cfg).
* Task-return time: a tiny callback (tests/bench/callback_plugins/bench_timer.py) stamps v2_runner_on_ok/failed.
* Module CPU: the inventory's ansible_python_interpreter is a wrapper that runs the real interpreter as a child,
  stamps the child's start and reports its user+system CPU from os.wait4() - only the module process is measured,
  not the controller.
Scenarios:
 (a) ready line written 1.0-1.9 s (TRIALS phases spread evenly over wait_for's 1 s check cycle) after the module
     started -> task returned; median of TRIALS.
 (b) a 1 GiB log that already holds an earlier run's ready line at its end; 10 s wait: false ready? module CPU.
     wait_for is run twice: with the plain ready regex (what a user writes; matches the stale line) and with a
     regex only the new run could print (so it, too, waits the 10 s, rescanning the file every second).
 (c) a capture OOM written 2 s after the module started: time from the OOM line to the task's failure.
"""

import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
READY = "[2026-02-19 00:00:06] The server is fired up and ready to roll!\n"
STARTUP = (
    "[2026-02-18 23:52:01] server_args=ServerArgs(mem_fraction_static=0.95, tp_size=1, port=30000)\n"
    "[2026-02-18 23:52:14 TP0] Load weight begin. avail mem=94.20 GB\n"
    "[2026-02-18 23:58:16 TP0] Load weight end. elapsed=362.11 s, type=X, dtype=torch.bfloat16, avail mem=33.20 GB, "
    "mem usage=61.00 GB.\n"
    "[2026-02-18 23:58:17 TP0] KV Cache is allocated. #tokens: 553920, KV size: 31.70 GB\n"
    "[2026-02-18 23:58:17 TP0] Memory pool end. avail mem=1.52 GB\n"
    "[2026-02-18 23:58:18 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=1.50 GB\n"
)
CAPTURED = (
    "[2026-02-18 23:58:59 TP0] Capture cuda graph end. Time elapsed: 41.37 s. mem usage=3.12 GB. avail mem=5.46 GB.\n"
)
OOM = (
    "[2026-02-18 23:58:21 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
    "Exception: Capture cuda graph failed: CUDA out of memory. Tried to allocate 1.25 GiB. GPU 0 has a total "
    "capacity of 95.59 GiB of which 982.00 MiB is free.\n"
)
WRAPPER = """#!{python}
import os, sys, time
with open(os.environ["BENCH_START_FILE"], "a") as fh:
    fh.write("%.6f\\n" % time.time())
pid = os.fork()
if pid == 0:
    os.execv({python!r}, [{python!r}] + sys.argv[1:])
_, status, ru = os.wait4(pid, 0)
with open(os.environ["BENCH_CPU_FILE"], "a") as fh:
    fh.write("%.4f\\n" % (ru.ru_utime + ru.ru_stime))
sys.exit(os.waitstatus_to_exitcode(status))
"""

OURS = """- hosts: localhost
  gather_facts: false
  tasks:
    - name: wait
      llmops.sglang.sglang_server:
        log_path: "{{ log }}"
        timeout: "{{ tmo | int }}"
        stall_timeout: 0
        poll_interval: 0.1
      check_mode: "{{ chk | default(false) | bool }}"
      ignore_errors: true
"""
WAIT_FOR = """- hosts: localhost
  gather_facts: false
  tasks:
    - name: wait
      ansible.builtin.wait_for:
        path: "{{ log }}"
        search_regex: "{{ regex }}"
        timeout: "{{ tmo | int }}"
      ignore_errors: true
"""


class Bench:
    def __init__(self, tmp):
        self.tmp = Path(tmp)
        self.wrapper = self.tmp / "timed_python"
        self.wrapper.write_text(WRAPPER.format(python=str(VENV_BIN / "python")))
        self.wrapper.chmod(0o755)
        (self.tmp / "ours.yml").write_text(OURS)
        (self.tmp / "wait_for.yml").write_text(WAIT_FOR)

    def run(self, who, log, tmo, *, regex="fired up and ready to roll", writer=None, check=False):
        files = {k: self.tmp / (f"{k}.{uuid.uuid4().hex}") for k in ("start", "cpu", "timer")}
        env = dict(
            os.environ,
            ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
            ANSIBLE_CALLBACK_PLUGINS=str(Path(__file__).parent / "callback_plugins"),
            ANSIBLE_CALLBACKS_ENABLED="bench_timer",
            BENCH_START_FILE=str(files["start"]),
            BENCH_CPU_FILE=str(files["cpu"]),
            BENCH_TIMER_FILE=str(files["timer"]),
        )
        cmd = [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            f"ansible_python_interpreter={self.wrapper} log={log} tmo={tmo:d} chk={check}",
            "-e",
            f"regex='{regex}'",
            str(self.tmp / (f"{who}.yml")),
        ]
        thread = None
        info = {}
        if writer:
            thread = threading.Thread(target=writer, args=(files["start"], info), daemon=True)
            thread.start()
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=str(ROOT), check=False)
        if thread:
            thread.join(30)
        if not files["timer"].exists():
            sys.exit(f"benchmark run failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
        event, t_ret, outcome = ([*files["timer"].read_text().split(), ""])[:3]
        return {
            "event": event,
            "returned": float(t_ret),
            "outcome": outcome,
            "module_start": float(files["start"].read_text().split()[0]),
            "cpu": float(files["cpu"].read_text().split()[0]),
            "wrote": info.get("wrote"),
            "stdout": proc.stdout,
        }


def wait_for_start(start_file, limit=30.0):
    """Wall time at which the module process started (the wrapper stamps it first thing)."""
    t0 = time.time()
    while time.time() - t0 < limit:
        try:
            return float(start_file.read_text().split()[0])
        except (OSError, IndexError, ValueError):
            time.sleep(0.005)
    raise RuntimeError("the module never started")


def scenario_a(b):
    out = {}
    for who in ("ours", "wait_for"):
        lat = []
        for i in range(TRIALS):
            log = b.tmp / f"a_{who}_{i:d}.log"
            log.write_text(STARTUP + CAPTURED)

            def writer(start_file, info, log=log, delay=1.0 + i / TRIALS):
                started = wait_for_start(start_file)
                time.sleep(max(0.0, started + delay - time.time()))
                with open(log, "a") as fh:
                    fh.write(READY)
                info["wrote"] = time.time()

            r = b.run(who, log, 15, writer=writer)
            assert r["event"] == "ok", (who, r["stdout"][-2000:])
            lat.append(r["returned"] - r["wrote"])
            log.unlink()
        out[who] = lat
    return out


def make_big_log(path, size=1 << 30):
    line = (
        "[2026-02-17 10:00:00 TP3] Decode batch. #running-req: 12, #token: 48211, token usage: 0.11, "
        "gen throughput (token/s): 812.40, #queue-req: 0\n"
    )
    block = (line * (1 << 20 // len(line) + 1)).encode()[: 1 << 20]
    block = block[: block.rindex(b"\n") + 1]
    tail = (STARTUP + CAPTURED + READY).encode()
    with open(path, "wb") as fh:
        written = 0
        while written + len(block) + len(tail) < size:
            fh.write(block)
            written += len(block)
        fh.write(tail)


def scenario_b(b):
    big = Path("/tmp") / (f"bench_readiness_{uuid.uuid4().hex}.log")
    try:
        make_big_log(big)
        res = {}
        r = b.run("ours", big, 10)
        res["ours"] = (r["event"] == "ok" and r["outcome"] == "ready", r["cpu"], r["returned"] - r["module_start"])
        r = b.run("wait_for", big, 10)
        res["wait_for"] = (r["event"] == "ok", r["cpu"], r["returned"] - r["module_start"])
        r = b.run("wait_for", big, 10, regex=f"fired up and ready to roll! run={uuid.uuid4().hex}")
        res["wait_for_new_run_regex"] = (r["event"] == "ok", r["cpu"], r["returned"] - r["module_start"])
        # fixed cost of starting each module through Ansible (AnsiballZ, imports), measured on runs that return
        # at once: ours in check mode, wait_for on a small file whose first line matches
        small = b.tmp / "small.log"
        small.write_text(READY)
        res["ours_fixed"] = b.run("ours", big, 10, check=True)["cpu"]
        res["wait_for_fixed"] = b.run("wait_for", small, 10)["cpu"]
        return res, big.stat().st_size
    finally:
        big.unlink(missing_ok=True)


def scenario_c(b):
    res = {}
    for who, tmo in (("ours", 30), ("wait_for", 12)):
        log = b.tmp / (f"c_{who}.log")
        log.write_text("")

        def writer(start_file, info, log=log):
            started = wait_for_start(start_file)
            with open(log, "a") as fh:
                fh.write(STARTUP)
            time.sleep(max(0.0, started + 2.0 - time.time()))
            with open(log, "a") as fh:
                fh.write(OOM)
            info["wrote"] = time.time()

        r = b.run(who, log, tmo, writer=writer)
        res[who] = (r["event"], r["outcome"], r["returned"] - r["wrote"])
    return res


# wait_for checks once a second: the write's phase within that cycle decides its latency (0-1 s), so the trials
# sample the whole cycle evenly and the median is not an accident of alignment.
TRIALS = 9


def main():
    with tempfile.TemporaryDirectory(prefix="bench_readiness_") as tmp:
        b = Bench(tmp)
        print(f"running (a) ready-line latency, {TRIALS} trials each ...", flush=True)
        a = scenario_a(b)
        print("running (b) 1 GiB log with a stale ready line ...", flush=True)
        bres, size = scenario_b(b)
        print("running (c) capture OOM at t=2 s ...", flush=True)
        c = scenario_c(b)

    ma, mw = statistics.median(a["ours"]), statistics.median(a["wait_for"])
    rows = [
        (f"(a) ready written -> task returned, median of {TRIALS} [s]", f"{ma:.3f}", f"{mw:.3f}"),
        ("    trials [s]", " ".join(f"{x:.2f}" for x in a["ours"]), " ".join(f"{x:.2f}" for x in a["wait_for"])),
        (
            "(b) %.2f GiB log, stale ready line: false ready?" % (size / 2**30),
            "yes" if bres["ours"][0] else "no",
            "yes" if bres["wait_for"][0] else "no",
        ),
        (
            "    module CPU [s] (returned after [s])",
            "{:.3f} ({:.1f})".format(bres["ours"][1], bres["ours"][2]),
            "{:.3f} ({:.1f})".format(bres["wait_for"][1], bres["wait_for"][2]),
        ),
        (
            "    wait_for with a new-run-only regex: CPU [s] over",
            "",
            "{:.3f} ({:.1f})".format(bres["wait_for_new_run_regex"][1], bres["wait_for_new_run_regex"][2]),
        ),
        (
            "    CPU of the wait itself (minus module start-up) [s]",
            "%.3f" % (bres["ours"][1] - bres["ours_fixed"]),
            "%.3f (new-run regex)" % (bres["wait_for_new_run_regex"][1] - bres["wait_for_fixed"]),
        ),
        (
            "    module start-up CPU (returns at once) [s]",
            "{:.3f}".format(bres["ours_fixed"]),
            "{:.3f}".format(bres["wait_for_fixed"]),
        ),
        (
            "(c) capture OOM at t=2 s -> task failed after [s]",
            "{:.3f} ({})".format(c["ours"][2], c["ours"][1]),
            "{:.3f} ({}{})".format(
                c["wait_for"][2], c["wait_for"][0], ", timeout: OOM not detected" if c["wait_for"][0] else ""
            ),
        ),
    ]
    w0 = max(len(r[0]) for r in rows)
    w1 = max(len(r[1]) for r in [*rows, ("", "sglang_server", "")])
    print()
    print("{}  {}  {}".format("".ljust(w0), "sglang_server".ljust(w1), "wait_for"))
    for r in rows:
        print(f"{r[0].ljust(w0)}  {r[1].ljust(w1)}  {r[2]}")
    cpu_ref = bres["wait_for_new_run_regex"][1]
    waited_ours = bres["ours"][1] - bres["ours_fixed"]
    waited_ref = cpu_ref - bres["wait_for_fixed"]
    checks = [
        ("(a) ours >= 0.4 s faster than wait_for's median", mw - ma >= 0.4),
        ("(b) no false ready", not bres["ours"][0]),
        ("(b) total module CPU <= 1/20 of wait_for's (10 s wait)", bres["ours"][1] * 20 <= cpu_ref),
        ("(b) CPU of the wait <= 1/20 of wait_for's (10 s wait)", waited_ours * 20 <= waited_ref),
        ("(c) failure within 2 s", c["ours"][0] == "failed" and c["ours"][2] <= 2.0),
    ]
    print()
    for name, ok in checks:
        print(f"{name:<52} {'PASS' if ok else 'FAIL'}")
    return 0 if all(ok for _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
