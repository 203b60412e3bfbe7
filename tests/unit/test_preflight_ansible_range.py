"""Preflight's first task, the ansible-core range, run as written in roles/preflight/tasks/main.yml on the control
node: no upper bound by default (as meta/runtime.yml), a set one refuses in one line, and the lower bound is the
one meta/runtime.yml declares."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible import release as ansible_release

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "preflight"
BIN = Path(sys.executable).parent
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


def range_task():
    (task,) = [t for t in yaml.safe_load((ROLE / "tasks" / "main.yml").read_text()) if "ansible-core" in t["name"]]
    return task


def run(tmp_path, **overrides):
    """(rc, the task's registered result): the task as written, its result saved by a second task."""
    task = {k: v for k, v in range_task().items() if k != "delegate_to"}
    out = tmp_path / "result.json"
    save = {"name": "Save it", "ansible.builtin.copy": {"content": "{{ r | to_json }}", "dest": str(out)}}
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "vars": {**DEFAULTS, "ansible_python_interpreter": "{{ ansible_playbook_python }}", **overrides},
            "tasks": [{**task, "register": "r", "ignore_errors": True}, save],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    env = {**os.environ, "ANSIBLE_LOCALHOST_WARNING": "false"}
    p = subprocess.run(
        [BIN / "ansible-playbook", "-i", "localhost,", "-c", "local", str(tmp_path / "play.yml")],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=env,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    result = json.loads(out.read_text())
    return 2 if result.get("failed") else 0, result


def test_the_default_accepts_this_ansible_core_and_has_no_upper_bound(tmp_path):
    assert DEFAULTS["preflight_ansible_max_exclusive"] == ""
    rc, result = run(tmp_path)
    assert rc == 0 and not result.get("failed"), result


def test_a_set_upper_bound_refuses_in_one_line(tmp_path):
    rc, result = run(tmp_path, preflight_ansible_max_exclusive="2.19.0")
    assert rc != 0 and result["failed"]
    assert "\n" not in result["msg"] and ", before 2.19.0." in result["msg"], result["msg"]
    assert "pip install 'ansible-core>=2.19.0,<2.19.0'" in result["msg"], result["msg"]
    running = ansible_release.__version__  # the ansible-core this test runs (2.19, 2.20, 2.21: docs/testing.md)
    assert result["msg"].startswith(f"ansible-core {running} is not accepted"), result["msg"]
    assert "needs ansible-core 2.19.0 or newer" in result["msg"]


def test_a_lower_bound_above_this_ansible_core_refuses(tmp_path):
    rc, result = run(tmp_path, preflight_ansible_min="99.0.0")
    assert rc != 0 and "needs ansible-core 99.0.0 or newer. Install one" in result["msg"], result["msg"]


def test_the_bounds_are_meta_runtime_yml_s():
    runtime = yaml.safe_load((ROOT / "meta" / "runtime.yml").read_text())
    assert runtime["requires_ansible"] == f">={DEFAULTS['preflight_ansible_min']}"


@pytest.mark.parametrize("page", ["README.md"])
def test_the_readme_states_the_same_range(page):
    assert f"`>={DEFAULTS['preflight_ansible_min']}`" in (ROOT / page).read_text()
