# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The ``sglang_server`` module's engine: its parameters and their checks, the launch or resume, the wait on SGLang's
log and health URL, and the result Ansible returns.

``plugins/modules/sglang_server.py`` is the module's documentation and a ``main()`` that calls ``run_module``; the
launch itself (resume token, systemd unit) is ``sglang_launch``, the waiting ``sglang_wait``, what a log line means
``sglang_log``.
"""

from __future__ import absolute_import, annotations, division, print_function

__metaclass__ = type

import os
import stat
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_launch import (
    decode_token,
    encode_token,
    launch_unit,
    unit_dead,
    unit_status,
)
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_wait import (
    WAIT_MILESTONES,
    JournalSource,
    LogFollower,
    NullSource,
    check_finite,
    check_health,
    wait_for_startup,
    wait_health_only,
)

# Seconds after the launch by which a unit's log file must exist (systemd creates StandardOutput=append: files
# before it starts the process): still none means the unit writes elsewhere, and waiting longer cannot help.
MISSING_LOG_GRACE = 30.0


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
            token = decode_token(p["resume"], now=time.time())
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
