"""Run the hf_snapshot module as Ansible runs it (a subprocess reading its arguments file) against the stand-in."""

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MODULE = "ansible_collections.llmops.sglang.plugins.modules.hf_snapshot"


def _argv(args):
    fd, path = tempfile.mkstemp(prefix="hf_snapshot-args-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, f)
    return [sys.executable, "-m", MODULE, path], path


def _env():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "http_", "https_", "HTTP", "no_proxy"))}
    env["PYTHONPATH"] = str(ROOT)
    return env


def run_module(args, timeout=180):
    """(returncode, result dict, raw stdout+stderr)."""
    argv, path = _argv(args)
    try:
        p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=_env(), cwd=ROOT, check=False)
    finally:
        os.unlink(path)
    try:
        res = json.loads(p.stdout)
    except ValueError:
        res = {}
    return p.returncode, res, p.stdout + p.stderr


def start_module(args):
    argv, path = _argv(args)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=_env(), cwd=ROOT)
    proc.args_file = path
    return proc


def kill_when(args, predicate, what):
    """Start the module, SIGKILL it once ``predicate()`` holds (an event on disk, never a moment), and clean up."""
    from events import wait_until

    proc = start_module(args)
    try:
        wait_until(predicate, what)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        os.unlink(proc.args_file)


def segment_state(dest, rel):
    try:
        with open(Path(dest) / ".llmops-partial" / (rel + ".incomplete.json")) as f:
            return json.load(f)["segments"]
    except (OSError, ValueError, KeyError):
        return None


def finished_segments(dest, rel):
    segs = segment_state(dest, rel) or []
    return [i for i, s in enumerate(segs) if s[2] == s[1] - s[0]]
