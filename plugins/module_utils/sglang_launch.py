# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""A launch of SGLang's systemd unit: the resume token that pins one launch, and the unit's start and status.

The ``sglang_server`` module's launch half (``sglang_server_run`` waits and shapes the result). The token is user
input on the way back (a task passes it again), so ``decode_token`` checks every field.
"""

from __future__ import absolute_import, annotations, division, print_function

__metaclass__ = type

import base64
import json
import math
import time

from ansible_collections.llmops.sglang.plugins.module_utils import systemd_exit

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
