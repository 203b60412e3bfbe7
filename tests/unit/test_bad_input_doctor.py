"""Bad input to bin/sglang-doctor: one line on stderr saying what was expected, what was found and what to do, exit
status 2, nothing on stdout, no traceback, no hang; Ctrl-C prints the report of what was read so far.

The files are real artifacts no one here wrote (an ELF binary of the host, the host's /etc/os-release) or made
of nothing (empty, NUL bytes); each row fingerprints the directory it reads and is killed after 60 s (a hang guard).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
from pathlib import Path

import pytest
from bad_input_util import assert_no_traceback, assert_one_line, fingerprint, run_bounded, sleeping_in_wait_loop

ROOT = Path(__file__).resolve().parents[2]
DOCTOR = ROOT / "bin" / "sglang-doctor"
# The first third of a real-format start-up log: SGLang is still loading weights when it ends.
STARTING = (Path(__file__).parent / "fixtures" / "logs" / "v0_5_9_glm5_ready.log").read_bytes()[:3000]

TODO_FILE = "Pass the file SGLang writes (for example /var/log/sglang/server.log)."
TIMEOUT = "expected --timeout to be a finite number of seconds > 0; found {}. For example --timeout 1800."
STALL = "expected --stall-timeout to be a finite number of seconds >= 0; found {}. For example --stall-timeout 1800."

# (case, arguments ({log}, {empty}, {binary}, {text}, {nul}, {dir}, {missing} are replaced), exit status, stderr line)
CASES = [
    ("follow with timeout nan", ["{log}", "--follow", "--timeout", "nan"], 2, TIMEOUT.format("nan")),
    ("follow with timeout inf", ["{log}", "--follow", "--timeout", "inf"], 2, TIMEOUT.format("inf")),
    ("follow with timeout 0", ["{log}", "--follow", "--timeout", "0"], 2, TIMEOUT.format("0")),
    ("follow with a negative timeout", ["{log}", "--follow", "--timeout", "-5"], 2, TIMEOUT.format("-5")),
    ("follow with timeout as text", ["{log}", "--follow", "--timeout", "soon"], 2, TIMEOUT.format("soon")),
    (
        "follow without a timeout",
        ["{log}", "--follow"],
        2,
        "expected --timeout N with --follow (the longest wait in seconds); found none. Add for example --timeout 1800.",
    ),
    (
        "follow with a negative stall timeout",
        ["{log}", "--follow", "--timeout", "5", "--stall-timeout", "-1"],
        2,
        STALL.format("-1"),
    ),
    (
        "follow with stall timeout nan",
        ["{log}", "--follow", "--timeout", "5", "--stall-timeout", "nan"],
        2,
        STALL.format("nan"),
    ),
    (
        "timeout without follow",
        ["{log}", "--timeout", "5"],
        2,
        "--timeout/--stall-timeout/--from-start only make sense with --follow; found them without it. Add --follow "
        "or leave them out.",
    ),
    ("empty file", ["{empty}"], 2, f"{{empty}} is empty: expected an SGLang start-up log. {TODO_FILE}"),
    (
        "binary file",
        ["{binary}"],
        2,
        f"{{binary}} is not an SGLang log: it holds binary data. {TODO_FILE}",
    ),
    (
        "file of NUL bytes",
        ["{nul}"],
        2,
        f"{{nul}} is not an SGLang log: it holds binary data. {TODO_FILE}",
    ),
    (
        "another program's text file",
        ["{text}"],
        2,
        f"{{text}} is not an SGLang log: none of its {{text_bytes}} bytes is a line SGLang prints. {TODO_FILE}",
    ),
    ("a directory", ["{dir}"], 2, f"expected {{dir}} to be a log file; found a directory. {TODO_FILE}"),
    (
        "a directory with follow",
        ["{dir}", "--follow", "--timeout", "5"],
        2,
        f"expected {{dir}} to be a log file; found a directory. {TODO_FILE}",
    ),
    (
        "an endless device",
        ["/dev/zero"],
        2,
        f"expected /dev/zero to be a log file; found a character device. {TODO_FILE}",
    ),
    (
        "following a pipe",
        ["{pipe}", "--follow", "--timeout", "5"],
        2,
        "cannot follow {pipe}: it is a pipe. Follow the log file itself, or drop --follow to read the pipe.",
    ),
    ("a missing file", ["{missing}"], 2, f"cannot read {{missing}}: No such file or directory. {TODO_FILE}"),
    (
        "a missing file with follow",
        ["{missing}", "--follow", "--timeout", "5"],
        2,
        "cannot follow {missing}: no such file. Start SGLang first (its unit creates the log) or fix the path.",
    ),
    ("an unknown option", ["{log}", "--tail"], 2, "unrecognized arguments: --tail (see sglang-doctor --help)"),
    (
        "Ctrl-C while following",
        ["{log}", "--follow", "--from-start", "--timeout", "60"],
        130,
        "interrupted; the report above covers what was read until then.",
    ),
]


@pytest.fixture
def files(tmp_path):
    d = tmp_path / "in"
    d.mkdir()
    (d / "starting.log").write_bytes(STARTING)
    (d / "empty.log").write_bytes(b"")
    (d / "nul.log").write_bytes(b"\0" * 65536)
    binary = Path(shutil.which("true") or "/bin/true")
    (d / "program.bin").write_bytes(binary.read_bytes())
    (d / "os-release").write_bytes(Path("/etc/os-release").read_bytes())
    (d / "sub").mkdir()
    os.mkfifo(d / "pipe")

    return {
        "log": str(d / "starting.log"),
        "empty": str(d / "empty.log"),
        "nul": str(d / "nul.log"),
        "binary": str(d / "program.bin"),
        "text": str(d / "os-release"),
        "text_bytes": str((d / "os-release").stat().st_size),
        "dir": str(d / "sub"),
        "pipe": str(d / "pipe"),
        "missing": str(d / "not-there.log"),
        "root": str(d),
    }


def fill(text, files):
    for key, value in files.items():
        text = text.replace("{" + key + "}", value)
    return text


@pytest.mark.parametrize(("case", "args", "status", "line"), CASES, ids=[c[0] for c in CASES])
def test_bad_input_gets_one_line_and_no_traceback(case, args, status, line, files):
    before = fingerprint([files["root"]])
    argv = [sys.executable, str(DOCTOR), *(fill(a, files) for a in args)]
    # Ctrl-C once the doctor sleeps in its wait loop (it has read the log by then), not after a guessed delay
    interrupt = (sleeping_in_wait_loop, signal.SIGINT) if status == 130 else None
    run = run_bounded(argv, send_signal=interrupt)
    assert_no_traceback(run.stdout, run.stderr)
    assert run.rc == status, (run.rc, run.stderr)
    assert_one_line(run.stderr, "sglang-doctor: " + fill(line, files))
    if status == 130:  # the report of what was read before the interrupt
        assert run.stdout.startswith("outcome: incomplete    phase: weights_loading")
    else:
        assert run.stdout == ""
    assert fingerprint([files["root"]]) == before
