"""Bad input to the sglang_server module: one line saying what was expected, what was found and what to do, before
anything is launched or read; no traceback; no hang.

Each row runs the module as Ansible runs it (a separate Python process given its arguments file), on a directory
holding an earlier run's complete log (it ends with SGLang's ready line, so a wrong offset would report "ready").
The directory is fingerprinted before and after; the process is killed and the row fails after 20 s.
"""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path

import pytest
from bad_input_util import assert_no_traceback, assert_one_line, fingerprint, run_bounded

ROOT = Path(__file__).resolve().parents[2]
MODULE = "ansible_collections.llmops.sglang.plugins.modules.sglang_server"
# An earlier run's complete start-up log (written from the SGLang reference by fixtures/logs/generate.py).
EARLIER_RUN = Path(__file__).parent / "fixtures" / "logs" / "v0_5_9_glm5_ready.log"
LAUNCH = 1_780_000_000.0  # a launch in the past (2026-05-28)


def token(**fields):
    data = {"source": "file", "path": "{log}", "inode": None, "offset": 0, "launch": LAUNCH} | fields
    raw = json.dumps({k: v for k, v in data.items() if v != "-"}).encode()
    return "sgl1." + base64.urlsafe_b64encode(raw).decode().rstrip("=")


def raw_token(payload: bytes) -> str:
    return "sgl1." + base64.urlsafe_b64encode(payload).decode().rstrip("=")


RETRY = "Pass the resume value of the task that launched SGLang, unchanged."
BAD_TOKEN = "expected a resume token returned by sglang_server; found one that "
SECONDS = ". Give a finite number of seconds (stall_timeout and wait_budget accept 0: off)."

# (case, module arguments ({log}, {dir}, {missing} are replaced), the exact message)
CASES = [
    (
        "log_offset past the end of the log",
        {"log_path": "{log}", "log_offset": 10**9},
        "expected log_offset <= {size} (the size of {log}); found 1000000000, past its end. Use 0 to read the whole "
        "file, or leave log_offset out to wait from its current end.",
    ),
    (
        "negative log_offset",
        {"log_path": "{log}", "log_offset": -5},
        "expected log_offset >= 0 (a byte offset into the log); found -5. Use 0 to read the whole file.",
    ),
    (
        "log_path is a directory",
        {"log_path": "{dir}"},
        "expected log_path to be SGLang's log file; found that {dir} is a directory. Point log_path at the file the "
        "unit writes (StandardOutput=append:PATH).",
    ),
    (
        "log_path is a device",
        {"log_path": "/dev/null"},
        "expected log_path to be SGLang's log file; found that /dev/null is not a regular file. Point log_path at the "
        "file the unit writes (StandardOutput=append:PATH).",
    ),
    (
        "log_path does not exist in log-only mode",
        {"log_path": "{missing}"},
        "expected log_path {missing} to exist in log-only mode (log_path without name); found no such file. Start "
        "SGLang first, fix the path, or give name to launch the unit.",
    ),
    (
        "negative expected_ranks",
        {"log_path": "{log}", "expected_ranks": -3},
        "expected expected_ranks >= 1 (the number of scheduler ranks, for example the TP size); found -3. Leave it "
        "out to take it from the logged server_args.",
    ),
    (
        "zero expected_ranks",
        {"log_path": "{log}", "expected_ranks": 0},
        "expected expected_ranks >= 1 (the number of scheduler ranks, for example the TP size); found 0. Leave it "
        "out to take it from the logged server_args.",
    ),
    (
        "poll_interval nan",
        {"log_path": "{log}", "poll_interval": "nan"},
        "expected poll_interval to be a finite number of seconds (> 0); found nan" + SECONDS,
    ),
    (
        "poll_interval inf",
        {"log_path": "{log}", "poll_interval": "inf"},
        "expected poll_interval to be a finite number of seconds (> 0); found inf" + SECONDS,
    ),
    (
        "poll_interval zero",
        {"log_path": "{log}", "poll_interval": 0},
        "expected poll_interval > 0 seconds; found 0.0" + SECONDS,
    ),
    (
        "negative poll_interval",
        {"log_path": "{log}", "poll_interval": -1},
        "expected poll_interval > 0 seconds; found -1.0" + SECONDS,
    ),
    ("timeout zero", {"log_path": "{log}", "timeout": 0}, "expected timeout > 0 seconds; found 0" + SECONDS),
    ("negative timeout", {"log_path": "{log}", "timeout": -5}, "expected timeout > 0 seconds; found -5" + SECONDS),
    (
        "timeout nan",
        {"log_path": "{log}", "timeout": "nan"},
        "argument 'timeout' is of type str and we were unable to convert to int: \"'nan'\" cannot be converted to "
        "an int",
    ),
    (
        "negative stall_timeout",
        {"log_path": "{log}", "stall_timeout": -1},
        "expected stall_timeout >= 0 seconds; found -1" + SECONDS,
    ),
    (
        "wait_budget nan",
        {"log_path": "{log}", "wait_budget": "nan"},
        "expected wait_budget to be a finite number of seconds (>= 0); found nan" + SECONDS,
    ),
    (
        "wait_budget inf",
        {"log_path": "{log}", "wait_budget": "inf"},
        "expected wait_budget to be a finite number of seconds (>= 0); found inf" + SECONDS,
    ),
    (
        "negative wait_budget",
        {"log_path": "{log}", "wait_budget": -2},
        "expected wait_budget >= 0 seconds; found -2.0" + SECONDS,
    ),
    (
        "health_url without a scheme",
        {"log_path": "{log}", "health_url": "127.0.0.1:30000/health"},
        "expected health_url to be an http:// or https:// URL; found '127.0.0.1:30000/health'. For example "
        "http://127.0.0.1:30000/health.",
    ),
    (
        "log_offset together with name",
        {"name": "sglang.service", "log_path": "{log}", "log_offset": 0},
        "expected log_offset only in log-only mode (log_path without name); found name=sglang.service. Remove one.",
    ),
    ("resume token of another tool", {"resume": "nope"}, BAD_TOKEN + "does not start with sgl1.. " + RETRY),
    ("resume token not base64", {"resume": "sgl1.!!!*"}, BAD_TOKEN + "is not base64 of JSON after sgl1.. " + RETRY),
    (
        "resume token truncated by a copy and paste",
        {"resume": token()[:-7]},
        BAD_TOKEN + "is not base64 of JSON after sgl1.. " + RETRY,
    ),
    (
        "resume token holding a list",
        {"resume": raw_token(b"[1, 2]")},
        BAD_TOKEN + "does not hold a JSON object. " + RETRY,
    ),
    (
        "resume token with an unknown source",
        {"resume": token(source="ftp")},
        BAD_TOKEN + "has source 'ftp' (expected file or journal). " + RETRY,
    ),
    (
        "resume token with a launch written as text",
        {"resume": token(launch="yesterday")},
        BAD_TOKEN + "has launch 'yesterday' (expected the epoch seconds of the launch). " + RETRY,
    ),
    (
        "resume token with launch NaN",
        {"resume": raw_token(b'{"source": "file", "path": "/x", "launch": NaN}')},
        BAD_TOKEN + "has launch nan (expected the epoch seconds of the launch). " + RETRY,
    ),
    (
        "resume token launched in the future",
        {"resume": token(launch=4_000_000_000.0)},
        None,  # the seconds ahead depend on the clock: checked by prefix below
    ),
    (
        "resume token with a negative offset",
        {"resume": token(offset=-1)},
        BAD_TOKEN + "has offset -1 (expected an integer >= 0). " + RETRY,
    ),
    (
        "resume token with a text inode",
        {"resume": token(inode="abc")},
        BAD_TOKEN + "has inode 'abc' (expected an integer >= 0). " + RETRY,
    ),
    (
        "resume token with health_only as text",
        {"resume": token(health_only="yes")},
        BAD_TOKEN + "has health_only 'yes' (expected true or false). " + RETRY,
    ),
    ("file resume token without a path", {"resume": token(path="-")}, BAD_TOKEN + "has no log path. " + RETRY),
    (
        "journal resume token without an invocation",
        {"resume": token(source="journal", path="-")},
        BAD_TOKEN + "has no unit invocation id. " + RETRY,
    ),
    (
        "resume token with two problems",
        {"resume": token(offset=-1, path=7)},
        BAD_TOKEN
        + "has offset -1 (expected an integer >= 0), has path 7 (expected a string), has no log path. "
        + RETRY,
    ),
    (
        "resume token whose log path is a directory",
        {"resume": token(path="{dir}")},
        "expected the resume token's log path to be SGLang's log file; found that {dir} is a directory. " + RETRY,
    ),
    (
        "health-only resume token without any health URL",
        {"resume": token(health_only=True)},
        "expected health_url: this resume token waits on the health URL only (the unit was already running and its "
        "log file cannot tell this process's lines from an older run's); found none in the task or the token. Pass "
        "health_url again.",
    ),
]


@pytest.fixture
def site(tmp_path):
    d = tmp_path / "logs"
    d.mkdir()
    log = d / "server.log"
    log.write_bytes(EARLIER_RUN.read_bytes())
    return {"log": str(log), "dir": str(d), "missing": str(d / "not-there.log"), "size": str(log.stat().st_size)}


def fill(value, site):
    if isinstance(value, str):
        for key, sub in site.items():
            value = value.replace("{" + key + "}", sub)
        if value.startswith("sgl1.") and "{" not in value:
            body = value[5:] + "=" * (-len(value[5:]) % 4)
            try:
                data = base64.urlsafe_b64decode(body).decode()
            except ValueError:
                return value
            if "{log}" in data or "{dir}" in data:
                data = data.replace("{log}", site["log"]).replace("{dir}", site["dir"])
                return "sgl1." + base64.urlsafe_b64encode(data.encode()).decode().rstrip("=")
    return value


@pytest.mark.parametrize(("case", "args", "message"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_is_refused_in_one_line_before_anything_happens(case, args, message, site, tmp_path):
    args = {k: fill(v, site) for k, v in args.items()}
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    before = fingerprint([site["dir"]])
    run = run_bounded(
        [sys.executable, "-m", MODULE, str(args_file)], seconds=20, env={"PYTHONPATH": str(ROOT), "LANG": "C.UTF-8"}
    )
    assert_no_traceback(run.stdout, run.stderr)
    out = json.loads(run.stdout)
    assert run.rc == 1 and out["failed"] is True, out
    if message is None:
        assert out["msg"].startswith(BAD_TOKEN + "has a launch time in the future (")
        assert out["msg"].endswith(" s ahead). " + RETRY)
        assert_one_line(out["msg"], out["msg"])
    else:
        assert_one_line(out["msg"], fill(message, site))
    assert "launched" not in out or out["launched"] is False
    assert fingerprint([site["dir"]]) == before
