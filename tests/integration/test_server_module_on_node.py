"""On a simulated node: llmops.sglang.sglang_server through ansible-playbook, ready and every failure class.

Each case rewrites the unit's drop-in (ExecStart / Environment) and lets the module restart ``sglang.service``
(state: restarted, log_source: file). "Seconds from event" is measured on the node's clock: the event is the log's own
millisecond timestamp of the first line of the failure (traceback lines carry the time of the stamped line that
opens them), or the moment the test killed a rank; the module's decision time is the launch time from its resume
token plus the ``elapsed`` it returned. Both clocks are the node's (a container on this host's kernel clock).
"""

from __future__ import annotations

import threading

import pytest
from _node_util import (
    BASE_ARGS,
    LOG,
    PORT,
    SRC_NOFIX,
    UNIT,
    event_time,
    last_line_time,
    record,
    run_playbook,
    run_sglang_server,
)

pytestmark = pytest.mark.node

# How fast the module decides is a figure (printed here, measured in `make bench`: tests/bench/bench_readiness.py),
# not a bound of these tests: a loaded machine delays a decision without making it wrong. What they assert is that
# the module decided from the event itself - after it, and before anything else could have ended the wait: the stall
# rule (stall_timeout, 20 s in params()) or the timeout. The fake-clock unit tests (tests/unit/test_sglang_server.py,
# test_sglang_wait.py) pin the exact arithmetic: decided at the first poll after the line, stalled one stall_timeout
# after the last line.
STALL = 20
# The module's own timeout and the playbook's run time are hang guards: a case ends at its event (seconds after the
# launch here), so generous limits cost nothing and a loaded machine cannot turn an outcome into "timeout".
TIMEOUT = 300
KV_TOKENS = 425664
READY_TEXT = "The server is fired up and ready to roll!"
HOLD = "/run/it-hold"  # the hold fault's file (sim/sglang/python/sglang/srt/sim_faults.py)


def params(**extra) -> dict:
    p = {
        "name": UNIT,
        "state": "restarted",
        "log_path": LOG,
        "timeout": TIMEOUT,
        "stall_timeout": STALL,
    }
    p.update(extra)
    return p


def args_with(**repl: str) -> list[str]:
    """BASE_ARGS with some flag values replaced, e.g. args_with(**{"--tp": "1"})."""
    out = list(BASE_ARGS)
    for flag, value in repl.items():
        out[out.index(flag) + 1] = value
    return out


def check_failure(node, run, case: str, outcome: str, pattern: str) -> float:
    res = run.result
    text = node.log_since(run.offset)
    assert res["outcome"] == outcome, (
        f"{case}: expected outcome {outcome}, got {res['outcome']} ({res.get('msg')})\nlog tail:\n"
        + "\n".join(res.get("log_tail") or [])
    )
    assert res["_it_status"] == "failed" and res["done"] is True
    assert res["diagnosis"] and res.get("log_tail"), res
    event, line = event_time(node, text, pattern)
    delay = run.decided - event
    print(f"\n{case}: outcome {res['outcome']} {delay:.2f} s after `{line.strip()[:100]}`")
    record(case, res["outcome"], delay, res["_it_received"] - event, line.strip()[:60])
    assert -0.05 <= delay < STALL, f"{case}: the module decided {delay:.2f} s after the event ({line!r})"
    return delay


# ---------------------------------------------------------------------------------------------------------------
def test_ready_reports_calibrated_numbers(case_node, tmp_path):
    node = case_node
    node.configure()
    run = run_sglang_server(node, tmp_path, params(health_url=f"http://127.0.0.1:{PORT}/health"))
    res = run.result
    assert res["outcome"] == "ready", res.get("msg")
    assert run.rc == 0 and res["_it_status"] == "ok" and res["changed"] is True and res["launched"] is True
    assert res["phase"] == "ready" and res["health"] == 200
    ranks = res["ranks"]
    assert sorted(ranks) == [f"TP{i}" for i in range(8)]
    for label, fig in ranks.items():
        assert abs(fig["kv_tokens"] - KV_TOKENS) <= KV_TOKENS * 0.005, (label, fig)
        assert fig["kv_size_gb"] == pytest.approx(24.37, abs=0.005), (label, fig)
        # the real run logged 8.61; the stand-in allocates the 64-row table and rounds each tensor as torch does: 8.63
        assert fig["avail_after_pool_gb"] == pytest.approx(8.61, abs=0.05), (label, fig)
        assert fig["weights_gb"] == pytest.approx(61.05, abs=0.01), (label, fig)
    assert res["max_total_num_tokens"] == KV_TOKENS
    assert res["server_args"]["mem_fraction_static"] == pytest.approx(0.88)
    assert res["server_args"]["tp_size"] == 8
    ms = res["milestones"]
    assert ms["weights_loading"] <= ms["kv_allocated"] <= ms["cuda_graph_captured"] <= ms["ready"]
    # the progress callback wrote to stderr (stdout was parsed as one JSON document by run_sglang_server)
    assert f"[sglang] {node.name}:" in run.stderr
    assert "[sglang]" not in run.stdout
    ready_at, _ = event_time(node, node.log_since(run.offset), READY_TEXT)
    record("ready", res["outcome"], run.decided - ready_at, res["_it_received"] - ready_at, "ready line, /health 200")


def test_capture_oom(case_node, tmp_path):
    # the reference story's first launch: 0.95 with --max-running-requests 8
    case_node.configure(args_with(**{"--mem-fraction-static": "0.95", "--max-running-requests": "8"}))
    run = run_sglang_server(case_node, tmp_path, params())
    check_failure(case_node, run, "capture OOM (0.95)", "oom_cuda_graph", r"CUDA out of memory|graph failed")
    sugg = run.result["suggestion"]
    assert sugg["action"] == "lower_mem_fraction_static" and sugg["value"] < 0.95


def test_kv_pool_oom(case_node, tmp_path):
    case_node.configure(args_with(**{"--mem-fraction-static": "0.6"}))
    run = run_sglang_server(case_node, tmp_path, params())
    check_failure(case_node, run, "KV pool OOM (0.6)", "oom_kv_pool", r"Not enough memory")
    assert run.result["suggestion"]["action"] in ("raise_mem_fraction_static", "add_gpus")


def test_weights_oom(case_node, tmp_path):
    case_node.configure(args_with(**{"--tp": "1"}))
    run = run_sglang_server(case_node, tmp_path, params())
    check_failure(case_node, run, "weights OOM (--tp 1)", "oom_weights", r"OutOfMemoryError: CUDA out of memory")
    assert run.result["suggestion"]["action"] == "add_gpus"


def test_sm120_fix_missing(case_node, tmp_path):
    case_node.configure(src=SRC_NOFIX)
    run = run_sglang_server(case_node, tmp_path, params())
    check_failure(case_node, run, "SM120 fix missing", "sm120_shared_memory", r"out of resource: shared memory")
    assert run.result["suggestion"]["fix"] == "sgl-project/sglang#14311"


def test_crash_at_weights_loading(case_node, tmp_path):
    case_node.configure(env={"SGLANG_SIM_FAULT": "crash@weights_loading"})
    run = run_sglang_server(case_node, tmp_path, params())
    check_failure(case_node, run, "crash@weights_loading", "crash", r"hit an exception|Simulated failure")
    assert run.result["phase"] in ("weights_loading", "weights_loaded")


def test_hang_is_stalled(case_node, tmp_path):
    node = case_node
    stall = 3
    node.configure(env={"SGLANG_SIM_FAULT": "hang@cuda_graph_capturing"})
    run = run_sglang_server(node, tmp_path, params(stall_timeout=stall))
    res = run.result
    assert res["outcome"] == "stalled", res.get("msg")
    assert res["phase"] == "cuda_graph_capturing"
    assert res["suggestion"]["action"] == "investigate_stall"
    last = last_line_time(node, node.log_since(run.offset))
    delay = run.decided - last
    print(f"\nhang: stalled {delay:.2f} s after the last line (stall_timeout {stall})")
    record(
        f"hang (stall_timeout {stall})",
        res["outcome"],
        delay - stall,
        res["_it_received"] - last - stall,
        f"last line + {stall} s (decided {delay:.2f} s after the last line)",
    )
    assert stall - 0.05 <= delay < TIMEOUT - stall  # the stall rule, after the last line; long before the timeout
    assert node.unit_state()["ActiveState"] == "active"  # hung, not dead: only the stall rule could catch it


def test_killed_rank_during_load(case_node, tmp_path):
    node = case_node
    # all ranks are held in weight loading while the hold file exists (fault knob): rank 3 is killed there, however
    # long the machine takes to get that far; the file goes when the test ends
    node.run(f"touch {HOLD}")
    node.configure(env={"SGLANG_SIM_FAULT": f"hold@weights_loading file={HOLD}"})
    off = node.log_size()
    killer = f"""
for i in $(seq 1 6000); do  # a hang guard (300 s): it ends at the line
  main=$(systemctl show -p MainPID --value {UNIT})
  if [ "$main" != 0 ] && tail -c +{off + 1} {LOG} | grep -q 'TP3\\] Load weight begin'; then
    child=$(pgrep -P "$main" | sort -n | sed -n 4p)
    [ -n "$child" ] || exit 3
    t=$(date +%s.%N); kill -9 "$child" && echo "$t $child"; exit $?
  fi
  sleep 0.05
done
exit 2
"""
    out: dict = {}

    def kill_in_background():
        out["p"] = node.run(killer, check=False, timeout=400)

    th = threading.Thread(target=kill_in_background)
    th.start()
    try:
        run = run_sglang_server(node, tmp_path, params())
    finally:
        th.join(timeout=400)
        node.run(f"rm -f {HOLD}")
    p = out.get("p")
    assert p is not None and p.returncode == 0, f"the background kill did not happen: {p and p.stderr}"
    killed_at, pid = p.stdout.decode().split()
    res = run.result
    assert res["outcome"] == "crash", res.get("msg")
    assert "Rank 3 scheduler is dead" in "\n".join(res["log_tail"]), res["log_tail"]
    delay = run.decided - float(killed_at)
    print(f"\nkilled rank (pid {pid}): outcome {res['outcome']} {delay:.2f} s after kill -9")
    record(
        "kill -9 rank 3 during load",
        res["outcome"],
        delay,
        res["_it_received"] - float(killed_at),
        f"kill -9 {pid} (time taken on the node just before the kill)",
    )
    assert 0 <= delay < STALL


def test_port_in_use(case_node, tmp_path):
    node = case_node
    node.configure()
    node.run(
        f"systemd-run --unit it-port-holder --quiet /usr/bin/python3 -m http.server {PORT} --bind 0.0.0.0 "
        f"--directory /tmp && for i in $(seq 1 50); do ss -ltnH 'sport = :{PORT}' | grep -q . && exit 0; "
        "sleep 0.1; done; exit 1"
    )
    run = run_sglang_server(node, tmp_path, params())
    check_failure(node, run, "port 30000 busy", "port_in_use", r"address already in use|Errno 98")
    assert run.result["suggestion"] == {"action": "free_port", "port": PORT, "flag": "--port"}


def test_stale_ready_line_is_not_matched(case_node, tmp_path):
    node = case_node
    if READY_TEXT not in node.sh(f"cat {LOG} 2>/dev/null || true"):
        # run alone (-k): put a previous run's ready line into the log first
        node.configure()
        node.run(
            f"systemctl start {UNIT} && for i in $(seq 1 300); do grep -q '{READY_TEXT}' {LOG} && exit 0; "
            "sleep 0.1; done; exit 1",
            timeout=60,
        )
    assert READY_TEXT in node.sh(f"cat {LOG}")
    # the new process hangs right after its server_args line: nothing of this launch ever says ready
    node.configure(env={"SGLANG_SIM_FAULT": "hang@started"})
    run = run_sglang_server(node, tmp_path, params(stall_timeout=3))
    res = run.result
    assert res["outcome"] == "stalled", res.get("msg")
    assert "ready" not in res["milestones"] and res["ranks"] == {}
    assert READY_TEXT not in node.log_since(run.offset)
    assert run.offset > 0 and READY_TEXT in node.sh(f"head -c {run.offset} {LOG}")
    record("stale ready line + hang@started", res["outcome"], None, None, "the previous run's ready line ignored")


def slice_tasks(launch: dict, wait: dict) -> list[dict]:
    """The module's EXAMPLES pattern: launch without waiting, then wait in slices under until/retries."""
    return [
        {
            "name": "Restart SGLang without waiting",
            "llmops.sglang.sglang_server": {"name": UNIT, "state": "restarted", "wait_budget": 0.1, **launch},
            "register": "sglang_launch",
        },
        {
            "name": "Wait for SGLang in slices",
            "llmops.sglang.sglang_server": {"resume": "{{ sglang_launch.resume }}", **wait},
            "register": "sglang_wait",
            "until": "sglang_wait.done",
            "retries": 1000,  # a hang guard: the module's timeout ends the wait first
            "delay": 0,
            "when": "not sglang_launch.done",
        },
    ]


def first_slice_while_held(node, tmp_path, launch: dict, wait: dict, *, faults: str = "", service=None) -> dict:
    """Launch, and wait one slice while the stand-in is held after loading its weights (hold fault); then let it go.
    The result's resume token is for a later slice: however fast or slow this machine is, the call that decides
    re-reads every line an earlier call saw."""
    launch_task, slices = slice_tasks(launch, {**wait, "stall_timeout": TIMEOUT})  # no stall while held
    node.run(f"touch {HOLD}")
    try:
        node.configure(env={"SGLANG_SIM_FAULT": f"hold@weights_loaded file={HOLD}; {faults}"}, service=service)
        one_slice = {k: v for k, v in slices.items() if k not in ("until", "retries", "delay")}
        (tmp_path / "first").mkdir()
        first = run_playbook(node, tmp_path / "first", [launch_task, one_slice]).result
        assert first["done"] is False and first["outcome"] == "incomplete", first
    finally:
        node.run(f"rm -f {HOLD}")
    return first


def later_slices(node, tmp_path, first: dict, wait: dict):
    """The until/retries loop of the EXAMPLES pattern, resuming ``first``'s token."""
    later = {k: v for k, v in slice_tasks({}, wait)[1].items() if k != "when"}
    later["llmops.sglang.sglang_server"] = {"resume": first["resume"], **wait}
    (tmp_path / "later").mkdir()
    return run_playbook(node, tmp_path / "later", [later], timeout=2 * TIMEOUT)


def test_hang_is_stalled_when_waiting_in_slices(case_node, tmp_path):
    """Each resumed call re-reads the launch's earlier lines; that must not restart the stall clock."""
    node = case_node
    stall = 3
    wait = {"wait_budget": 1, "timeout": TIMEOUT, "stall_timeout": stall}
    first = first_slice_while_held(node, tmp_path, {"log_path": LOG}, wait, faults="hang@cuda_graph_capturing")
    run = later_slices(node, tmp_path, first, wait)
    res = run.result
    assert res["outcome"] == "stalled", res.get("msg")
    last = last_line_time(node, node.log_since(run.offset))
    delay = run.decided - last
    print(f"\nhang, waiting in 1 s slices: stalled {delay:.2f} s after the last line (stall_timeout {stall})")
    record(
        f"hang, 1 s slices (stall {stall})",
        res["outcome"],
        delay - stall,
        res["_it_received"] - last - stall,
        f"last line + {stall} s, 1 + {res['attempts']} slices",
    )
    assert stall - 0.05 <= delay < TIMEOUT - stall  # the stall rule, not the timeout, though re-read every slice


def test_ready_from_the_journal_in_slices(case_node, tmp_path):
    """log_source journal + resume: milestone times come from the log, not from the call that re-read them."""
    node = case_node
    wait = {
        "wait_budget": 0.5,
        "timeout": TIMEOUT,
        "stall_timeout": 20,
        "health_url": f"http://127.0.0.1:{PORT}/health",
    }
    first = first_slice_while_held(node, tmp_path, {"log_source": "journal"}, wait, service=["StandardOutput=journal"])
    run = later_slices(node, tmp_path, first, wait)
    res = run.result
    assert res["outcome"] == "ready", res.get("msg")
    assert res["max_total_num_tokens"] == KV_TOKENS and len(res["ranks"]) == 8
    ms = res["milestones"]
    # weights take ~1 s at SGLANG_SIM_TIME_SCALE 0.2 and capture ~0.6 s: a retry that re-read the earlier lines
    # would stamp them all with its own time
    assert ms["weights_loading"] < ms["weights_loaded"] < ms["cuda_graph_captured"] <= ms["ready"], ms
    assert ms["weights_loaded"] - ms["weights_loading"] >= 0.5, ms
    record("journal, 0.5 s slices", res["outcome"], None, None, f"1 + {res['attempts']} slices, milestones {ms}"[:60])
