"""Where reports go: the control node user's state directory unless told otherwise (never the playbook's directory,
which is inside the installed collection when the playbook is llmops.sglang.site)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.callback.sglang_progress import CallbackModule
from ansible_collections.llmops.sglang.plugins.module_utils import sglang_report as R

ROOT = Path(__file__).resolve().parents[2]
RECORD = ROOT / "tests" / "fixtures" / "report" / "ready-deployment.json"


def test_the_default_is_the_xdg_state_directory(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert R.default_report_base({}) == str(tmp_path / ".local" / "state" / "llmops-sglang" / "reports")
    assert R.default_report_base({"XDG_STATE_HOME": "/srv/state"}) == "/srv/state/llmops-sglang/reports"
    # the XDG Base Directory Specification: a relative path is invalid and ignored
    assert R.default_report_base({"XDG_STATE_HOME": "state"}).startswith(str(tmp_path / ".local" / "state"))


def _cli(tmp_path, *args, **env):
    clean = {k: v for k, v in os.environ.items() if k not in ("XDG_STATE_HOME", "SGLANG_REPORT_DIR")}
    clean.update(HOME=str(tmp_path / "home"), **env)
    return subprocess.run(
        [sys.executable, str(ROOT / "bin" / "sglang-report"), *args, str(RECORD)],
        cwd=tmp_path,
        env=clean,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_report_tool_writes_under_the_state_directory_by_default(tmp_path):
    p = _cli(tmp_path)
    assert p.returncode == 0, p.stderr
    index = Path(p.stdout.strip())
    assert index.parent.parent == tmp_path / "home" / ".local" / "state" / "llmops-sglang" / "reports"
    assert index.is_file() and not (tmp_path / "reports").exists()


def test_the_report_tool_follows_sglang_report_dir_and_xdg_state_home(tmp_path):
    p = _cli(tmp_path, SGLANG_REPORT_DIR=str(tmp_path / "mine"))
    assert p.returncode == 0 and Path(p.stdout.strip()).parent.parent == tmp_path / "mine", p.stderr
    p = _cli(tmp_path, XDG_STATE_HOME=str(tmp_path / "xdg"))
    assert p.returncode == 0 and Path(p.stdout.strip()).parent.parent == tmp_path / "xdg/llmops-sglang/reports"


class _Display:
    verbosity = 0

    def __init__(self):
        self.lines = []

    def display(self, text, *args, **kwargs):
        self.lines.append(text)


class _Host:
    def get_name(self):
        return "demo1"


class _Task:
    action = "ansible.builtin.set_fact"
    args = None

    def get_name(self):
        return "Record the deployment"


class _Result:
    host, task = _Host(), _Task()

    def __init__(self, result):
        self.result = result


def _callback(report_dir):
    display = _Display()
    cb = CallbackModule(display=display)
    cb._plugin_options["report_dir"] = report_dir  # what set_options() resolves in a play (None: not set)
    cb._to_stderr = False
    cb.v2_runner_on_ok(_Result({"ansible_facts": {"server_deployment": json.loads(RECORD.read_text())}}))
    cb.v2_playbook_on_stats(None)
    return display.lines


def test_the_callback_writes_under_the_state_directory_unless_told_otherwise(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("XDG_STATE_HOME", raising=False)
    line = _callback(None)[-1]
    assert line.startswith("[sglang] report: " + str(tmp_path / "home/.local/state/llmops-sglang/reports/")), line
    monkeypatch.chdir(tmp_path)
    line = _callback("rel")[-1]  # a relative path: from the current directory
    assert line.startswith("[sglang] report: " + str(tmp_path / "rel") + "/"), line
    assert not any(x.startswith("[sglang] report") for x in _callback(""))  # empty: no report
