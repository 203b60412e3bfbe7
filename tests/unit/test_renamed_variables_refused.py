"""A variable that moved to roles/llmops_defaults (preflight's table preflight_renamed) is refused before any change,
naming its successor, on the GPU servers (preflight stage) and on the router hosts (router stage: preflight never runs
there, so a router_port left in group_vars/sglang_routers used to be ignored in silence). The plays run for real
(ansible-playbook --check, local connection: a failing case changes nothing here either); nothing after the refusal
runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}


def ansible_playbook(cwd: Path, inventory: dict, playbook: Path) -> subprocess.CompletedProcess:
    (cwd / "inv.yml").write_text(yaml.safe_dump(inventory))
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(ROOT), "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    binary = str(Path(sys.executable).with_name("ansible-playbook"))
    cmd = [binary, "-i", str(cwd / "inv.yml"), str(playbook), "--check"]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False)


def test_every_old_name_is_unused_by_the_roles_it_was_taken_from():
    # server_python was both an old name and the server role's internal variable: any check that saw the role's vars
    # refused every run. No role's defaults or vars may define an old name.
    renamed = yaml.safe_load((ROOT / "roles/preflight/vars/main.yml").read_text())["preflight_renamed"]
    defined = {}
    for path in [*ROOT.glob("roles/*/defaults/main.yml"), *ROOT.glob("roles/*/vars/*.yml")]:
        for name in yaml.safe_load(path.read_text()) or {}:
            defined.setdefault(name, []).append(str(path.relative_to(ROOT)))
    assert {n: defined[n] for n in renamed if n in defined} == {}
    assert set(renamed.values()) <= set(yaml.safe_load((ROOT / "roles/llmops_defaults/defaults/main.yml").read_text()))


# (playbook, the group of the host that sets the old name, old, new, a task after the check that must not run)
CASES = {
    "router": ("router.yml", "sglang_routers", "router_port", "llmops_router_port", "Install Python's venv support"),
    "preflight": ("preflight.yml", "gpu_servers", "server_port", "llmops_server_port", "Check the operating system"),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_an_old_name_is_refused_with_its_successor_before_any_change(tmp_path, case):
    playbook, group, old, new, after = case
    inventory = {
        "all": {
            "children": {
                "gpu_servers": {"hosts": {"g1": {**LOCAL, "llmops_server_host": "0.0.0.0"}}},
                "sglang_routers": {"hosts": {"r1": dict(LOCAL)}},
            }
        }
    }
    host = next(iter(inventory["all"]["children"][group]["hosts"].values()))
    host[old] = 31000
    run = ansible_playbook(tmp_path, inventory, ROOT / "playbooks" / playbook)
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-2000:]
    refusal = [line for line in out.splitlines() if "Expected the settings several roles share" in line]
    assert refusal, out[-3000:]
    assert f"found {old} set. Rename {old} to {new}." in refusal[0], refusal[0]
    assert after not in out, out[-3000:]
    assert "Traceback" not in out


def test_an_unsupported_ansible_core_is_refused_with_what_to_install(tmp_path):
    """The first check of preflight, in words for a user of the installed collection (no checkout, no make)."""
    inventory = {"all": {"children": {"gpu_servers": {"hosts": {"g1": {**LOCAL, "preflight_ansible_min": "99.0"}}}}}}
    run = ansible_playbook(tmp_path, inventory, ROOT / "playbooks" / "preflight.yml")
    out = " ".join((run.stdout + run.stderr).split())
    assert run.returncode != 0, out[-2000:]
    assert "this collection needs ansible-core 99.0 or newer." in out, out[-2000:]
    assert "python3 -m pip install 'ansible-core>=99.0'" in out and "make setup" not in out, out[-2000:]


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("llmops_build_sets_dir", "/opt", "Expected llmops_build_sets_dir to be a directory of its own"),
        ("llmops_model_revisions_dir", "/var/lib", "Expected llmops_model_revisions_dir to be a directory of its own"),
        ("llmops_env_file", "/etc/sglang.env", "Expected llmops_env_file's directory to be a directory of its own"),
        ("llmops_venv", "/opt/sglang/../venv", "Expected llmops_venv to be a normal path"),
    ],
)
def test_a_shared_path_the_stages_prune_or_chown_is_refused_before_the_first_stage(tmp_path, variable, value, expected):
    """The build and model stages prune their roots long before the server role checks its paths: preflight refuses
    a system directory (or a path that is not normal) on the GPU servers, before anything changes."""
    inventory = {"all": {"children": {"gpu_servers": {"hosts": {"g1": {**LOCAL, variable: value}}}}}}
    run = ansible_playbook(tmp_path, inventory, ROOT / "playbooks" / "preflight.yml")
    out = " ".join((run.stdout + run.stderr).split())
    assert run.returncode != 0, out[-2000:]
    assert f"g1: nothing was changed. {expected}" in out, out[-2000:]
    assert "Check the operating system" not in out and "Traceback" not in out
