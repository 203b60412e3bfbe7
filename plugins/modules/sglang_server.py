#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)

from __future__ import annotations

__metaclass__ = type

DOCUMENTATION = r"""
---
module: sglang_server
short_description: Start or restart an SGLang server and wait until its own start-up log proves it ready
version_added: "0.1.0"
description:
  - Starts or restarts the systemd unit that runs SGLang (or, given only O(log_path), launches nothing and waits
    on that log from its current end), then follows SGLang's start-up log until the required milestones are reached
    on every expected rank - KV cache allocated, CUDA-graph capture ended (skipped when graphs are disabled), the
    C(The server is fired up and ready to roll!) line - and, when O(health_url) is given, an HTTP GET returns 200.
  - Never matches output from before this launch. With O(log_source=file) the log file's inode and size are taken
    right before the start and only bytes written after that offset are read; a restart of a running unit stops it
    first and takes them once it has stopped, so what the old process logs while it shuts down is not read as the
    new launch's; rotation (inode change) and truncation are detected. With O(log_source=journal) only journal
    entries of the new unit invocation (C(_SYSTEMD_INVOCATION_ID)) are read.
  - Fails fast with the outcome (for example V(oom_cuda_graph), V(oom_kv_pool), V(oom_weights),
    V(sm120_shared_memory), V(port_in_use), V(nccl_error), V(crash), V(stalled)), a diagnosis computed from the
    log's own numbers, a machine-readable suggestion and the last 30 log lines, as soon as a failure signature
    appears, the unit dies, no line arrives for O(stall_timeout) seconds, or O(timeout) passes.
  - With O(wait_budget) one call waits at most that long and returns RV(done=false) with a RV(resume) token, so the
    task can run under C(until)/C(retries) and show progress between attempts (see EXAMPLES).
  - The log grammar lives in the collection's C(sglang_log) module_utils, shared with the C(sglang_progress)
    callback and C(bin/sglang-doctor); the waiting (log sources, the wait loop, the health-only loop) lives in
    C(sglang_wait), shared with C(sglang-doctor --follow).
  - Every parameter is checked before anything is started - finite, in range, paths of the right kind - and a
    problem is reported as one line saying what was expected, what was found and what to do.
author:
  - llmops.sglang developers (@llmops)
options:
  name:
    description:
      - The systemd unit that runs SGLang, for example C(sglang.service).
      - Required unless O(log_path) is given (log-only mode) or O(resume) is given.
    type: str
  state:
    description:
      - V(started) starts the unit when it is not active. When it is already active nothing is launched; with
        O(log_source=journal) the current invocation's log is checked from its start, with O(log_source=file) the
        O(health_url) decides (a file offers no way to tell this process's lines from an older one's).
      - V(restarted) always restarts the unit and waits for the new process.
    type: str
    choices: [started, restarted]
    default: started
  log_source:
    description:
      - Where SGLang's output is read. V(file) follows O(log_path) (the unit writes there, for example with
        C(StandardOutput=append:/var/log/sglang.log)). V(journal) reads C(journalctl _SYSTEMD_INVOCATION_ID=<id>).
      - Defaults to V(file) when O(log_path) is set, else V(journal).
    type: str
    choices: [file, journal]
  log_path:
    description:
      - The log file SGLang writes. Without O(name) the module launches nothing and waits on this file from its
        current end (or from O(log_offset)); the file must then exist. A directory or device is refused.
    type: path
  log_offset:
    description:
      - Log-only mode - byte offset to start reading at instead of the current end. V(0) reads the whole file.
      - Must lie within the file (0 to its size); an offset past the end is refused rather than read as a truncation,
        which would re-read an earlier run's lines.
    type: int
  expected_ranks:
    description:
      - Number of scheduler ranks whose KV allocation and graph capture must be seen. Default from the logged
        C(server_args) (tp_size x pp_size x dp_size (without DP attention) / nnodes). At least V(1).
    type: int
  wait_for:
    description:
      - The last milestone required. Earlier milestones are required on every expected rank.
    type: str
    choices: [kv_allocated, cuda_graph_captured, http_up, ready]
    default: ready
  health_url:
    description:
      - URL that must answer 200 once the log milestones are reached, for example C(http://127.0.0.1:30000/health)
        (SGLang 0.5.1+ answers 503 until warm-up passed). Without it the log decides.
      - Recorded in the RV(resume) token, so a resumed call need not repeat it (O(api_key) is never recorded, so repeat
        it when the URL needs it).
    type: str
  api_key:
    description:
      - Sent as C(Authorization Bearer) to O(health_url). SGLang lets C(/health) through without a key.
    type: str
  validate_certs:
    description: Validate TLS certificates of O(health_url).
    type: bool
    default: true
  timeout:
    description: Seconds since the launch after which the wait fails (total, across O(resume) calls). Above V(0).
    type: int
    default: 1800
  stall_timeout:
    description:
      - Fail when no new log line arrives for this many seconds (V(0) disables). Weight loading from slow disks
        prints little; keep this above the longest quiet phase.
    type: int
    default: 600
  wait_budget:
    description:
      - Seconds this call may wait before returning RV(done=false) with a RV(resume) token (V(0) waits until done).
    type: float
    default: 0
  resume:
    description:
      - Token from a previous call's RV(resume). Continues waiting on the same launch without launching again.
      - Every field of the token is checked; a hand-edited token is refused with what is wrong with it.
    type: str
  poll_interval:
    description: Seconds between cheap incremental reads of the log; a finite number above V(0).
    type: float
    default: 0.2
notes:
  - Check mode reports what would be launched and waits for nothing.
  - Milestone times are seconds since the launch (read from the log's own timestamps when a resumed call re-reads
    lines written earlier).
  - O(timeout) and O(stall_timeout) count from the launch recorded in the token, so retries do not extend them.
seealso:
  - name: SGLang readiness (docs/readiness.md)
    description: Log grammar, failure classes and the arithmetic behind the suggestions.
    link: https://github.com/sgl-project/sglang
extends_documentation_fragment:
  - llmops.sglang.attributes
attributes:
  check_mode:
    details: Reports what would be started or restarted and waited for, without starting anything.
"""

EXAMPLES = r"""
- name: Restart SGLang and wait until it is ready and /health answers 200
  llmops.sglang.sglang_server:
    name: sglang.service
    state: restarted
    log_path: /var/log/sglang/server.log
    health_url: http://127.0.0.1:30000/health
    timeout: 2400
    stall_timeout: 900

# Progress between attempts: launch once, then wait in slices. The until loop re-runs the second task with the
# same arguments; the resume token pins the launch (offset/inode or invocation), so no attempt can match an older
# run's lines, and the sglang_progress callback prints phase, capture progress and KV tokens on each retry.
- name: Restart SGLang without waiting
  llmops.sglang.sglang_server:
    name: sglang.service
    state: restarted
    log_source: journal
    wait_budget: 0.1
  register: sglang_launch

- name: Wait for SGLang in 30-second slices
  llmops.sglang.sglang_server:
    resume: "{{ sglang_launch.resume }}"
    wait_budget: 30
    timeout: 2400
  register: sglang_wait
  until: sglang_wait.done
  retries: 80
  delay: 0
  when: not sglang_launch.done

- name: Wait on a log that something else launches (no unit), from its current end
  llmops.sglang.sglang_server:
    log_path: /tmp/sglang.log
    wait_for: kv_allocated
    expected_ranks: 8
    timeout: 900
"""

RETURN = r"""
done:
  description: True when the wait ended (ready or failed); false when O(wait_budget) ran out first.
  returned: always
  type: bool
outcome:
  description:
    - One of V(ready), V(oom_cuda_graph), V(oom_kv_pool), V(oom_weights), V(sm120_shared_memory), V(port_in_use),
      V(nccl_error), V(dist_init_timeout) (a multi-node rendezvous timed out, a node never joined), V(crash),
      V(stalled), V(incomplete) (still starting, or timed out).
  returned: always
  type: str
  sample: ready
phase:
  description: Last milestone reached (started, weights_loading, weights_loaded, kv_allocated, memory_pool_ready,
    cuda_graph_capturing, cuda_graph_captured, http_up, ready).
  returned: always
  type: str
  sample: cuda_graph_capturing
reached:
  description:
    - True when the wait reached O(wait_for) (and O(health_url) answered 200). With O(wait_for) before V(ready) - a
      node of a multi-node server other than the head waits for V(cuda_graph_captured) - RV(outcome) stays
      V(incomplete), since SGLang logs the ready line only on the head; RV(reached) says the wait succeeded.
  returned: always
  type: bool
launched:
  description: Whether this call started or restarted the unit.
  returned: always
  type: bool
resume:
  description: Token for O(resume) that continues waiting on this launch.
  returned: always
  type: str
elapsed:
  description: Seconds since the launch.
  returned: always
  type: float
milestones:
  description: Seconds since the launch at which each milestone was first seen.
  returned: always
  type: dict
  sample: {"weights_loading": 13.1, "weights_loaded": 375.2, "kv_allocated": 376.0, "ready": 485.4}
ranks:
  description: Per rank label as printed (V('') when the log has none), figures in GiB (SGLang prints "GB").
  returned: always
  type: dict
  sample: {"TP0": {"weights_gb": 61.0, "avail_after_weights_gb": 33.2, "kv_tokens": 425664, "k_size_gb": null,
           "v_size_gb": null, "kv_size_gb": 24.37, "avail_after_pool_gb": 8.61, "cuda_graph_seconds": 41.37,
           "cuda_graph_mem_gb": 3.12, "avail_after_graph_gb": 5.46}}
totals:
  description: Min/max across ranks (pre-load free memory, KV tokens, free memory after pool and graphs...).
  returned: always
  type: dict
max_total_num_tokens:
  description: Rank 0's max_total_num_tokens, null until printed.
  returned: always
  type: int
format:
  description: SGLang version window inferred from the log's line formats, for example C(0.5.9-0.5.10) or C(0.5.14+).
  returned: always
  type: str
server_args:
  description: Resolved values read from the C(server_args=ServerArgs(...)) line.
  returned: always
  type: dict
capture_progress:
  description: Latest CUDA-graph capture step (bs, index, total) while capturing.
  returned: when the log showed capture progress
  type: dict
diagnosis:
  description: One sentence explaining the state, with the log's own numbers.
  returned: always
  type: str
suggestion:
  description: Machine-readable fix, for example C({"action" lower_mem_fraction_static, "value" 0.90}).
  returned: on failure
  type: dict
log_tail:
  description: The last 30 log lines of this launch.
  returned: on failure
  type: list
  elements: str
failure:
  description: The log line with the failure signature the outcome rests on, its rank and the phase it stopped in.
  returned: on failure, when the log showed a failure signature
  type: dict
  sample: {"outcome": "oom_cuda_graph", "line": "Exception: Capture cuda graph failed: CUDA out of memory. ...",
           "rank": "TP3", "phase": "cuda_graph_capturing", "t": 1796033930.2}
  contains:
    t:
      description: The failure's time (epoch seconds, from the log line's own timestamp when it has one); the group
        verdict of a multi-node server compares it across nodes.
      type: float
    peer_lost:
      description: True when the failure is NCCL's error after a peer (another node) went away - an echo of a
        failure elsewhere.
      type: bool
rendezvous:
  description:
    - A multi-node rendezvous that timed out - V(side=head) with C(joined)/C(world) ranks and C(seconds) (torch's
      store), or V(side=node) with the C(host)/C(port) it could not reach and C(seconds).
  returned: when the log shows a rendezvous timeout
  type: dict
  sample: {"side": "node", "seconds": 600, "host": "10.0.0.10", "port": 20000}
unit:
  description: systemd state of the unit (ActiveState, SubState, MainPID, ExecMainStatus, InvocationID, ExecStartPre).
  returned: when O(name) is set
  type: dict
start_note:
  description:
    - The start needed more than one try, and why - systemd failed to spawn SGLang or its ExecStartPre step (status
      219/CGROUP, the previous invocation's control group still being released); the unit's failed state was reset
      and it was started again after a pause (at most three starts).
  returned: when the launch was tried more than once
  type: str
health:
  description: Last HTTP status of O(health_url).
  returned: when O(health_url) is set
  type: int
"""

import base64
import json
import math
import os
import stat
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.sglang.plugins.module_utils import systemd_exit
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_wait import (
    WAIT_MILESTONES,
    JournalSource,
    LogFollower,
    NullSource,
    check_finite,
    check_health,
    milestones_met,
    wait_for_startup,
    wait_health_only,
)

__all__ = ["build_result", "check_health", "decode_token", "encode_token", "milestones_met", "wait_for_startup"]

TAIL_LINES = 30
# Seconds after the launch by which a unit's log file must exist (systemd creates StandardOutput=append: files
# before it starts the process): still none means the unit writes elsewhere, and waiting longer cannot help.
MISSING_LOG_GRACE = 30.0
# A resume token's launch time may lie this far in the future of this host's clock (two hosts, NTP steps).
TOKEN_CLOCK_SLACK = 300


# ---------------------------------------------------------------------------------------------------------------
# Resume token (user input: it may come back hand-edited, so every field is checked)
# ---------------------------------------------------------------------------------------------------------------
def encode_token(data):
    raw = json.dumps(data, sort_keys=True, separators=(",", ":")).encode("utf-8")
    return "sgl1." + base64.urlsafe_b64encode(raw).decode("ascii").rstrip("=")


def decode_token(token, now=None):
    """The launch a token pins. Raises ValueError with what is wrong with it (words after "found one that")."""
    if not isinstance(token, str) or not token.startswith("sgl1."):
        raise ValueError("does not start with sgl1.")
    body = token[5:]
    body += "=" * (-len(body) % 4)
    try:
        data = json.loads(base64.urlsafe_b64decode(body.encode("ascii")).decode("utf-8"))
    except ValueError:  # binascii.Error, UnicodeError and JSONDecodeError are all ValueErrors
        raise ValueError("is not base64 of JSON after sgl1.") from None
    if not isinstance(data, dict):
        raise ValueError("does not hold a JSON object")
    problems = []
    if data.get("source") not in ("file", "journal"):
        problems.append("has source %r (expected file or journal)" % (data.get("source"),))
    launch = data.get("launch")
    now = time.time() if now is None else now
    if isinstance(launch, bool) or not isinstance(launch, (int, float)) or not math.isfinite(launch) or launch <= 0:
        problems.append("has launch %r (expected the epoch seconds of the launch)" % (launch,))
    elif launch > now + TOKEN_CLOCK_SLACK:
        problems.append("has a launch time in the future (%.0f s ahead)" % (launch - now))
    for key in ("offset", "inode"):
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            problems.append("has %s %r (expected an integer >= 0)" % (key, value))
    for key in ("unit", "path", "invocation", "health_url"):
        value = data.get(key)
        if value is not None and not isinstance(value, str):
            problems.append("has %s %r (expected a string)" % (key, value))
    for key in ("health_only", "validate_certs"):
        if data.get(key) is not None and not isinstance(data[key], bool):
            problems.append("has %s %r (expected true or false)" % (key, data[key]))
    if data.get("source") == "file" and not (isinstance(data.get("path"), str) and data["path"]):
        problems.append("has no log path")
    if data.get("source") == "journal" and not (isinstance(data.get("invocation"), str) and data["invocation"]):
        problems.append("has no unit invocation id")
    if problems:
        raise ValueError(", ".join(problems))
    return data


# ---------------------------------------------------------------------------------------------------------------
# systemd
# ---------------------------------------------------------------------------------------------------------------
UNIT_PROPS = ("ActiveState", "SubState", "MainPID", "ExecMainStatus", "InvocationID", "ExecStartPre")


def unit_status(run_command, systemctl, name):
    rc, out, err = run_command([systemctl, "show", name, "-p", ",".join(UNIT_PROPS)], environ_update={"LANG": "C"})
    if rc != 0:
        return {"error": (err or out).strip()}
    status = {}
    for line in out.splitlines():
        key, _, value = line.partition("=")
        if key in UNIT_PROPS:
            status[key] = value
    return status


def unit_dead(status, invocation_id):
    """Why the unit no longer runs this launch, or None while it does."""
    if not status or "error" in status:
        return None
    state = status.get("ActiveState")
    if invocation_id and status.get("InvocationID") and status["InvocationID"] != invocation_id:
        return "the unit was restarted by systemd (new invocation %s)" % status["InvocationID"]
    if state in ("failed", "inactive", "deactivating"):
        return "the unit is %s/%s (%s)" % (
            state,
            status.get("SubState"),
            systemd_exit.describe(status.get("ExecMainStatus"), "SGLang"),
        )
    return None


def start_unit(run_command, systemctl, verb, unit, sleep=time.sleep):
    """``systemctl VERB UNIT`` (the unit is Type=exec, so the start fails when systemd could not spawn SGLang or a
    step before it). A spawn that failed at a step that clears (systemd_exit.RETRIED: the control group of the
    previous invocation still being released, for SGLang or for an ExecStartPre step) is started again after
    ``reset-failed`` and a pause (systemd_exit.RETRY_PAUSES), never more often. Returns (rc, text, status): text is
    systemctl's message with the exit status systemd recorded, status that of the last try."""
    env = {"LANG": "C"}
    rc, out, err = run_command([systemctl, verb, unit], environ_update=env)
    if rc == 0:
        return rc, "", None
    status = unit_status(run_command, systemctl, unit)
    firsts = []
    for pause in systemd_exit.RETRY_PAUSES:
        code, _ = systemd_exit.failed_step(status)
        if not systemd_exit.retried(code):
            break
        firsts.append(systemd_exit.status_text(code))
        sleep(pause)
        run_command([systemctl, "reset-failed", unit], environ_update=env)
        rc, out, err = run_command([systemctl, "start", unit], environ_update=env)
        if rc == 0:
            return (
                rc,
                "the start ended with %s and was tried again (%d start(s) in all)"
                % (
                    ", ".join(firsts),
                    len(firsts) + 1,
                ),
                None,
            )
        status = unit_status(run_command, systemctl, unit)
    text = " ".join((err or out).split())
    code, process = systemd_exit.failed_step(status)
    if code:
        text += " (%s)" % systemd_exit.describe(code, "SGLang", process)
    return rc, text, status


def launch_unit(run_command, systemctl, verb, unit, *, active, launch_point=None):
    """Start (or restart) the unit and return (rc, text, status, (inode, offset)) where the log point is the log
    file's (inode, size) once only the new process can write to it: a restart of an active unit is ``systemctl
    stop``, then the point, then ``systemctl start``, because the old process logs while it shuts down (SGLang's
    "SIGQUIT received ... one child failed" when a rank dies before the main process's own SIGTERM handler runs, a
    traceback of an interrupted thread) and those lines belong to no launch. ``launch_point``: None for the journal
    (its invocation id tells the runs apart), giving (None, 0)."""
    point = launch_point or (lambda: (None, 0))
    if verb == "restart" and active and launch_point is not None:
        rc, out, err = run_command([systemctl, "stop", unit], environ_update={"LANG": "C"})
        if rc != 0:
            return rc, "stopping the running unit failed: %s" % " ".join((err or out).split()), None, point()
        verb = "start"
    where = point()
    rc, text, status = start_unit(run_command, systemctl, verb, unit)
    return rc, text, status, where


# ---------------------------------------------------------------------------------------------------------------
# The result
# ---------------------------------------------------------------------------------------------------------------
def build_result(log, status, launch_time, clock=time.time, health_only=False):
    res = log.result()
    base = res["milestones"]
    out = {
        "done": status != "budget",
        "outcome": res["outcome"],
        "phase": res["phase"],
        "elapsed": round(clock() - launch_time, 2),
        "milestones": {k: round(max(0.0, v["t"] - launch_time), 2) for k, v in base.items()},
        "ranks": res["ranks"],
        "totals": res["totals"],
        "max_total_num_tokens": res["max_total_num_tokens"],
        "format": res["format"],
        "server_args": res["server_args"],
        "diagnosis": res["diagnosis"],
        "suggestion": res["suggestion"],
    }
    if res["capture_progress"]:
        out["capture_progress"] = res["capture_progress"]
    if getattr(log, "health", None) is not None:
        out["health"] = log.health
    if health_only:
        out["diagnosis"] = (
            "The unit was already running, so its log file could not tell this process's lines from an older "
            "run's; only the health URL was asked (last status %s)." % getattr(log, "health", None)
        )
        if status == "ready":
            out["outcome"], out["phase"] = "ready", "ready"
    out["reached"] = status == "ready"
    if status == "died" and not log.failure:
        out["outcome"] = "crash"
        out["diagnosis"] = "SGLang exited during %s: %s. %s" % (res["phase"] or "start-up", log.death, res["diagnosis"])
        out["suggestion"] = {"action": "read_log", "last_error": log.last_error}
    if status in ("failed", "died", "stalled", "timeout"):
        out["log_tail"] = list(log.tail)
        if res["failure"]:
            out["failure"] = {k: res["failure"].get(k) for k in ("outcome", "line", "rank", "phase", "t")}
            if res["failure"].get("peer_lost"):
                out["failure"]["peer_lost"] = True
    if getattr(log, "rendezvous", None):
        out["rendezvous"] = dict(log.rendezvous)
    return out


def _file_launch_point(path):
    try:
        st = os.stat(path)
        return st.st_ino, st.st_size
    except OSError:
        return None, 0


def _path_problem(path):
    """Why ``path`` cannot be SGLang's log file (words after the path), or None. A missing file is not a problem
    here: a unit creates its log on start."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:
        return "cannot be read (%s)" % exc.strerror
    if stat.S_ISDIR(st.st_mode):
        return "is a directory"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if not os.access(path, os.R_OK):
        return "cannot be read (permission denied)"
    return None


def validate(p, check_mode=False):
    """The first problem with the parameters as one line (expected, found, what to do), or None. No side effects.
    In check mode a missing log file is no problem: an earlier task that would create it did not run."""
    checks = (
        check_finite("timeout", p["timeout"], low=0, low_open=True),
        check_finite("stall_timeout", p["stall_timeout"], low=0),
        check_finite("wait_budget", p["wait_budget"], low=0),
        check_finite("poll_interval", p["poll_interval"], low=0, low_open=True),
    )
    for reason in checks:
        if reason:
            return reason + ". Give a finite number of seconds (stall_timeout and wait_budget accept 0: off)."
    if p["expected_ranks"] is not None and p["expected_ranks"] < 1:
        return (
            "expected expected_ranks >= 1 (the number of scheduler ranks, for example the TP size); found %d. "
            "Leave it out to take it from the logged server_args." % p["expected_ranks"]
        )
    if p["log_offset"] is not None and p["name"]:
        return (
            "expected log_offset only in log-only mode (log_path without name); found name=%s. Remove one."
            % (p["name"])
        )
    if p["log_offset"] is not None and p["log_offset"] < 0:
        return (
            "expected log_offset >= 0 (a byte offset into the log); found %d. Use 0 to read the whole file."
            % (p["log_offset"])
        )
    if p["health_url"] is not None and not p["health_url"].startswith(("http://", "https://")):
        return (
            "expected health_url to be an http:// or https:// URL; found %r. For example http://127.0.0.1:30000/health."
            % (p["health_url"])
        )
    if p["log_path"] and not p["resume"]:
        problem = _path_problem(p["log_path"])
        if problem:
            return (
                "expected log_path to be SGLang's log file; found that %s %s. Point log_path at the file the "
                "unit writes (StandardOutput=append:PATH)." % (p["log_path"], problem)
            )
        if not p["name"]:
            size = _file_launch_point(p["log_path"])[1]
            if not os.path.exists(p["log_path"]) and not check_mode:
                return (
                    "expected log_path %s to exist in log-only mode (log_path without name); found no such file. "
                    "Start SGLang first, fix the path, or give name to launch the unit." % p["log_path"]
                )
            if p["log_offset"] is not None and p["log_offset"] > size:
                return (
                    "expected log_offset <= %d (the size of %s); found %d, past its end. Use 0 to read the whole "
                    "file, or leave log_offset out to wait from its current end."
                    % (size, p["log_path"], p["log_offset"])
                )
    return None


def run_module():
    module = AnsibleModule(
        argument_spec=dict(
            name=dict(type="str"),
            state=dict(type="str", default="started", choices=["started", "restarted"]),
            log_source=dict(type="str", choices=["file", "journal"]),
            log_path=dict(type="path"),
            log_offset=dict(type="int"),
            expected_ranks=dict(type="int"),
            wait_for=dict(type="str", default="ready", choices=list(WAIT_MILESTONES)),
            health_url=dict(type="str"),
            api_key=dict(type="str", no_log=True),
            validate_certs=dict(type="bool", default=True),
            timeout=dict(type="int", default=1800),
            stall_timeout=dict(type="int", default=600),
            wait_budget=dict(type="float", default=0),
            resume=dict(type="str"),
            poll_interval=dict(type="float", default=0.2),
        ),
        required_one_of=[("name", "log_path", "resume")],
        required_if=[("log_source", "file", ("log_path",)), ("log_source", "journal", ("name", "resume"), True)],
        mutually_exclusive=[("resume", "log_offset")],
        supports_check_mode=True,
    )
    p = module.params
    problem = validate(p, module.check_mode)
    if problem:
        module.fail_json(msg=problem)
    systemctl = module.get_bin_path("systemctl", required=bool(p["name"]) and not p["resume"])
    result = {"changed": False, "launched": False}
    launched = False
    health_url, validate_certs = p["health_url"], p["validate_certs"]

    if p["resume"]:
        try:
            token = decode_token(p["resume"])
        except ValueError as exc:
            module.fail_json(
                msg="expected a resume token returned by sglang_server; found one that %s. Pass the resume value of "
                "the task that launched SGLang, unchanged." % exc
            )
        unit = token.get("unit")
        if unit:
            systemctl = module.get_bin_path("systemctl", required=True)
        problem = _path_problem(token["path"]) if token["source"] == "file" and token.get("path") else None
        if problem:
            module.fail_json(
                msg="expected the resume token's log path to be SGLang's log file; found that %s %s. Pass the resume "
                "value of the task that launched SGLang, unchanged." % (token["path"], problem)
            )
        health_url = health_url or token.get("health_url")
        validate_certs = validate_certs and token.get("validate_certs", True)
        if token.get("health_only") and not health_url:
            module.fail_json(
                msg="expected health_url: this resume token waits on the health URL only (the unit was already "
                "running and its log file cannot tell this process's lines from an older run's); found none in the "
                "task or the token. Pass health_url again."
            )
    else:
        unit = p["name"]
        source_kind = p["log_source"] or ("file" if p["log_path"] else "journal")
        token = {"source": source_kind, "unit": unit, "path": p["log_path"]}
        if health_url:
            token["health_url"] = health_url
        if not validate_certs:
            token["validate_certs"] = False
        if unit:
            before = unit_status(module.run_command, systemctl, unit)
            if "error" in before:
                module.fail_json(
                    msg="expected systemd unit %s to exist; systemctl show failed: %s" % (unit, before["error"])
                )
            active = before.get("ActiveState") in ("active", "activating", "reloading")
            do_launch = p["state"] == "restarted" or not active
            result["unit"] = before
            if not do_launch and source_kind == "file" and not health_url:
                module.fail_json(
                    msg="%s is already active and state=started: the log file cannot tell this process's lines "
                    "from an older run's. Expected health_url, log_source=journal, or state=restarted." % unit,
                    unit=before,
                )
            if module.check_mode:
                verb = ("re" if p["state"] == "restarted" else "") + "start"
                module.exit_json(
                    changed=do_launch,
                    launched=False,
                    done=True,
                    outcome="incomplete",
                    phase=None,
                    msg=("would %s %s and wait for %s" % (verb, unit, p["wait_for"]))
                    if do_launch
                    else "%s is active; would check it without launching" % unit,
                    unit=before,
                )
            if do_launch:
                verb = "restart" if p["state"] == "restarted" else "start"
                launch_point = (lambda: _file_launch_point(p["log_path"])) if source_kind == "file" else None
                rc, started, failed_status, (inode, offset) = launch_unit(
                    module.run_command, systemctl, verb, unit, active=active, launch_point=launch_point
                )
                launch_time = time.time()
                if rc != 0:
                    module.fail_json(
                        msg="expected `systemctl %s %s` to succeed; it returned %d: %s. Check `systemctl status %s` "
                        "and `journalctl -u %s`." % (verb, unit, rc, started, unit, unit),
                        rc=rc,
                        unit=failed_status or before,
                    )
                if started:
                    result["start_note"] = started
                launched = True
                result["changed"] = True
                after = unit_status(module.run_command, systemctl, unit)
                invocation = after.get("InvocationID") or ""
                deadline = time.time() + 5
                while invocation in ("", before.get("InvocationID")) and time.time() < deadline:
                    time.sleep(0.1)
                    after = unit_status(module.run_command, systemctl, unit)
                    invocation = after.get("InvocationID") or ""
                result["unit"] = after
            else:
                inode, offset = _file_launch_point(p["log_path"]) if source_kind == "file" else (None, 0)
                invocation = before.get("InvocationID") or ""
                launch_time = time.time()
            if source_kind == "journal" and not invocation:
                module.fail_json(
                    msg="expected an InvocationID for %s after the start; found none (systemd < 232?). "
                    "Use log_source=file." % unit,
                    unit=result.get("unit"),
                )
            token.update(invocation=invocation, inode=inode, offset=offset, launch=launch_time)
            if not launched and source_kind == "file":
                token["health_only"] = True
        else:
            if module.check_mode:
                module.exit_json(
                    changed=False,
                    launched=False,
                    done=True,
                    outcome="incomplete",
                    phase=None,
                    msg="log-only mode: would wait on %s" % p["log_path"],
                )
            inode, size = _file_launch_point(p["log_path"])
            offset = size if p["log_offset"] is None else p["log_offset"]
            token.update(inode=inode, offset=offset, launch=time.time())

    result["launched"] = launched
    result["resume"] = encode_token(token)
    launch_time = token["launch"]
    health_only = bool(token.get("health_only"))

    # ---- sources and probes ----
    catch_up = bool(p["resume"]) or (token["source"] == "journal" and not launched)
    last_line_time = None
    if health_only:
        source = NullSource()
    elif token["source"] == "file":
        source = LogFollower(token["path"], offset=token.get("offset"), inode=token.get("inode"))
        if p["resume"]:
            try:
                last_line_time = os.stat(token["path"]).st_mtime
            except OSError:
                last_line_time = None
    else:
        journalctl = module.get_bin_path("journalctl", required=True)
        source = JournalSource(journalctl, token["invocation"])
    health = None
    if health_url:
        key = p["api_key"]

        def health():
            return check_health(health_url, key, validate_certs)

    unit_check = None
    if token.get("unit") and systemctl:
        unit_name, invocation = token["unit"], token.get("invocation")

        def unit_check():
            status = unit_status(module.run_command, systemctl, unit_name)
            result["unit"] = status
            return unit_dead(status, invocation)

    wait_for = "http_up" if health_only else p["wait_for"]
    try:
        if health_only:
            log, status = wait_health_only(
                health, launch_time, timeout=p["timeout"], wait_budget=p["wait_budget"], unit_check=unit_check
            )
        else:
            log, status = wait_for_startup(
                source,
                launch_time,
                wait_for=wait_for,
                expected_ranks=p["expected_ranks"],
                timeout=p["timeout"],
                stall_timeout=p["stall_timeout"],
                wait_budget=p["wait_budget"],
                poll_interval=p["poll_interval"],
                health=health,
                unit_check=unit_check,
                catch_up=catch_up,
                last_line_time=last_line_time,
                missing_grace=MISSING_LOG_GRACE if token.get("unit") else None,
            )
        missing = source.problem()
    except (OSError, ValueError) as exc:  # an unreadable log, a number the checks above let through
        module.fail_json(
            msg="expected to read SGLang's log and wait; found an error while waiting: %s. Check the log's path and "
            "permissions (log_path, the unit's StandardOutput=append:PATH)." % " ".join(str(exc).split()),
            **result,
        )
    finally:
        source.close()
    result.update(build_result(log, status, launch_time, health_only=health_only))
    if status == "ready":
        n = p["expected_ranks"] or log.expected_ranks()
        seen = len(log.ranks_with("kv_allocated"))
        if n and seen and seen < n:
            module.warn("SGLang is ready but KV allocation was logged for %d of %d expected ranks" % (seen, n))
        result["msg"] = "SGLang reached %s after %.1f s" % (wait_for, result["elapsed"])
        module.exit_json(**result)
    if status == "budget":
        result["msg"] = "still starting: phase %s after %.1f s" % (result["phase"], result["elapsed"])
        module.exit_json(**result)
    what = {
        "failed": "a failure signature in the log",
        "died": "the unit stopped",
        "stalled": "no new log line for %d s" % p["stall_timeout"],
        "timeout": "no %s within %d s of the launch" % (wait_for, p["timeout"]),
    }[status]
    if missing:
        if status == "stalled" and token.get("unit") and not 0 < p["stall_timeout"] <= result["elapsed"]:
            what = "no log file %d s after the launch" % MISSING_LOG_GRACE
        result["diagnosis"] = (
            "The log file %s %s: nothing of SGLang's output was read. Check the unit's "
            "StandardOutput=append:PATH against log_path." % (token["path"], missing)
        )
        result["msg"] = (
            "SGLang did not reach %s: the log file %s %s (the wait ended on %s). Check the unit's "
            "StandardOutput=append:PATH against log_path." % (wait_for, token["path"], missing, what)
        )
        module.fail_json(**result)
    if status == "timeout" and not health_only and result["outcome"] == "incomplete":
        result["diagnosis"] = "Timed out after %d s in phase %s. %s" % (
            p["timeout"],
            result["phase"],
            result["diagnosis"],
        )
    result["msg"] = "SGLang did not reach %s: found %s (outcome %s, phase %s). %s" % (
        wait_for,
        what,
        result["outcome"],
        result["phase"],
        " ".join(result["diagnosis"].split()),
    )
    module.fail_json(**result)


def main():
    run_module()


if __name__ == "__main__":
    main()
