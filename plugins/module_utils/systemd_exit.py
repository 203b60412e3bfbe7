# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""systemd's own exit statuses: a unit's main process that ends with one of these never ran its program, because
systemd failed at that step of spawning it (systemd.exec(5), "Process Exit Codes").

``NAMES`` is the table of systemd 252 (Debian 12) as ``systemd-analyze exit-status`` prints it (class "systemd");
``tests/unit/test_systemd_exit.py`` compares it with the output of the host's own ``systemd-analyze`` and fails on
any difference in the codes both know.

``RETRIED``: a step that can fail for a moment and then succeed on the same unit. ``CGROUP`` (219) is systemd
failing to move a new process - the main one or an ``ExecStartPre=`` step - into the unit's control group while the
previous invocation's group is still being released ("Failed to attach to cgroup ...: Device or resource busy",
systemd/systemd#23164); a reset of the unit's failed state and another start, after a pause, is what clears it
(containers/crun#1139 does the same). ``RETRY_PAUSES``: the pause before each further start, so at most
``len(RETRY_PAUSES) + 1`` starts and 4 s of pauses.
"""

from __future__ import annotations

__metaclass__ = type

NAMES = {
    200: "CHDIR", 201: "NICE", 202: "FDS", 203: "EXEC", 204: "MEMORY", 205: "LIMITS", 206: "OOM_ADJUST",
    207: "SIGNAL_MASK", 208: "STDIN", 209: "STDOUT", 210: "CHROOT", 211: "IOPRIO", 212: "TIMERSLACK",
    213: "SECUREBITS", 214: "SETSCHEDULER", 215: "CPUAFFINITY", 216: "GROUP", 217: "USER", 218: "CAPABILITIES",
    219: "CGROUP", 220: "SETSID", 221: "CONFIRM", 222: "STDERR", 224: "PAM", 225: "NETWORK", 226: "NAMESPACE",
    227: "NO_NEW_PRIVILEGES", 228: "SECCOMP", 229: "SELINUX_CONTEXT", 230: "PERSONALITY", 231: "APPARMOR",
    232: "ADDRESS_FAMILIES", 233: "RUNTIME_DIRECTORY", 235: "CHOWN", 236: "SMACK_PROCESS_LABEL", 237: "KEYRING",
    238: "STATE_DIRECTORY", 239: "CACHE_DIRECTORY", 240: "LOGS_DIRECTORY", 241: "CONFIGURATION_DIRECTORY",
    242: "NUMA_POLICY", 243: "CREDENTIALS", 244: "BPF", 255: "EXCEPTION",
}  # fmt: skip

RETRIED = frozenset({219})
RETRY_PAUSES = (1.0, 3.0)


def _code(value):
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def spawn_step(status):
    """The step systemd failed at (``CGROUP``) for a main-process exit status of its own, else None."""
    return NAMES.get(_code(status))


def status_text(status):
    """``219/CGROUP`` for systemd's own statuses, the bare number for a program's, ``?`` when unknown."""
    code = _code(status)
    if code is None:
        return "?"
    step = NAMES.get(code)
    return "%d/%s" % (code, step) if step else str(code)


def describe(status, program, process="main process"):
    """``main process exit status 219/CGROUP: systemd failed at its CGROUP step before SGLang ran`` for
    ``program`` SGLang; the step only for systemd's own statuses. ``process``: which of the unit's processes ended
    so (``failed_step``)."""
    step = spawn_step(status)
    return "%s exit status %s%s" % (
        process,
        status_text(status),
        ": systemd failed at its %s step before %s ran" % (step, program) if step else "",
    )


def retried(status):
    """True when a start that ended with this status may be tried again after ``systemctl reset-failed``."""
    return _code(status) in RETRIED


def start_pre_status(value):
    """The exit status of the last ``ExecStartPre=`` step that ran, from ``systemctl show -p ExecStartPre`` (``{ path=
    ... ; code=exited ; status=219/CGROUP }`` per step, several steps in one value), or None when none failed."""
    found = None
    for step in str(value or "").split("}"):
        for field in step.split(";"):
            key, _, got = field.strip().partition("=")
            if key == "status":
                code = _code(got.split("/", 1)[0])
                if code:
                    found = code
    return found


def failed_step(status):
    """(exit status, process) of the step that ended a failed start: the main process's status, or when the main
    process never ran (status 0 or none) that of a failed ``ExecStartPre=`` step; (None, "main process") when
    neither failed."""
    main = _code(status.get("ExecMainStatus"))
    if main:
        return main, "main process"
    pre = start_pre_status(status.get("ExecStartPre"))
    if pre:
        return pre, "ExecStartPre step"
    return None, "main process"
