"""SGLang's unit does not start without the fleet's firewall table (roles/server/templates/sglang.service.j2, with
the fact roles/fleet_firewall publishes): it is ordered after the unit that loads the table and its first step, run
as root, lists the table - a host whose table is gone (a flush, nftables stopped) keeps SGLang from starting with
listeners that would answer anyone. Rendered by ansible-playbook on this machine; checked by systemd-analyze."""

from __future__ import annotations

import json
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "roles" / "server" / "templates" / "sglang.service.j2"
DEFAULTS_VARS = ROOT / "roles" / "llmops_defaults" / "vars" / "main.yml"  # the unit's sandbox, as roles read it
GUARD = {"unit": "llmops-sglang-firewall.service", "check": ["/usr/sbin/nft", "list", "table", "inet", "llmops_sglang"]}
VARS = {
    "server_served_model_name": "glm-5", "server_restart": "no", "llmops_service_user": "sglang",
    "llmops_service_group": "sglang", "llmops_env_file": "/etc/sglang/sglang.env", "server_sglang_release": "0.5.9",
    "server_unit_environment": {}, "server_venv_python": "/opt/sglang/venv/bin/python",
    "server_launcher": "/usr/local/libexec/llmops-sglang/sglang-launch", "server_argv": ["--port", "30000"],
    "server_log_dir": "/var/log/sglang",
}  # fmt: skip


def render(tmp_path: Path, **extra) -> str:
    out = tmp_path / "sglang.service"
    task = {"ansible.builtin.template": {"src": str(TEMPLATE), "dest": str(out), "mode": "0644"}}
    # the argv prefix of the build stage's import checks, beside the unit that shares its sandbox
    argv = {"ansible.builtin.copy": {"content": "{{ llmops_defaults_as_server | to_json }}",
                                     "dest": str(tmp_path / "as-server.json"), "mode": "0644"}}  # fmt: skip
    play = [{"hosts": "localhost", "connection": "local", "gather_facts": False, "vars_files": [str(DEFAULTS_VARS)],
             "tasks": [task, argv]}]  # fmt: skip
    (tmp_path / "play.yml").write_text(json.dumps(play))
    env = {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_COLLECTIONS_PATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(tmp_path / "play.yml")]
    cmd += ["-e", json.dumps({**VARS, **extra, "ansible_python_interpreter": sys.executable})]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300, check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    return out.read_text()


def test_with_the_table_sglang_starts_after_it_and_only_when_it_is_loaded(tmp_path):
    unit = render(tmp_path, fleet_firewall_guard=GUARD)
    lines = unit.splitlines()
    assert "Wants=llmops-sglang-firewall.service" in lines and "After=llmops-sglang-firewall.service" in lines
    pre = [ln for ln in lines if ln.startswith("ExecStartPre=")]
    assert pre == [
        'ExecStartPre=+/bin/sh -c \'exec "$$0" "$$@" >/dev/null\' /usr/sbin/nft list table inet llmops_sglang'
    ], pre
    assert lines.index(pre[0]) < next(i for i, ln in enumerate(lines) if ln.startswith("ExecStart="))
    if shutil.which("systemd-analyze"):
        proc = subprocess.run(["systemd-analyze", "verify", "--man=no", str(tmp_path / "sglang.service")],
                              capture_output=True, text=True, timeout=60, check=False)  # fmt: skip
        assert "ExecStartPre" not in proc.stderr and "Unknown key" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("guard", [None, "absent"])
def test_without_a_table_the_unit_names_none(tmp_path, guard):
    unit = render(tmp_path, **({"fleet_firewall_guard": None} if guard is None else {}))
    assert "ExecStartPre" not in unit and "llmops-sglang-firewall" not in unit


@pytest.mark.parametrize(
    ("check", "rc", "stderr"),
    [
        (["/bin/echo", "table", "inet", "llmops_sglang", "{"], 0, ""),  # nft's answer for a loaded table
        (["/bin/ls", "/nonexistent/llmops_sglang"], 2, "llmops_sglang"),  # a failing check with an error on stderr
    ],
)
def test_the_guard_keeps_the_listed_table_out_of_the_log_and_passes_on_the_answer(tmp_path, check, rc, stderr):
    # the command line as systemd runs it ("$$" is a literal "$"): what nft prints on success (the whole table) never
    # reaches SGLang's log (StandardOutput), its error does (StandardError), its exit status decides the start
    unit = render(tmp_path, fleet_firewall_guard={"unit": GUARD["unit"], "check": check})
    line = next(ln for ln in unit.splitlines() if ln.startswith("ExecStartPre=+"))
    argv = shlex.split(line.removeprefix("ExecStartPre=+").replace("$$", "$"))
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert stderr in proc.stderr
    assert (proc.returncode, proc.stdout, bool(proc.stderr.strip())) == (rc, "", bool(stderr)), proc


def test_the_import_checks_run_as_the_servers_account_in_the_units_own_sandbox(tmp_path):
    """llmops_defaults_as_server (the build stage's import checks of torch and SGLang) and the unit take their sandbox
    from one list: every --property= of the check is a line of the unit's [Service], and the account is the unit's."""
    unit = render(tmp_path, fleet_firewall_guard=GUARD)
    argv = json.loads((tmp_path / "as-server.json").read_text())
    assert argv[:5] == ["systemd-run", "--quiet", "--wait", "--pipe", "--collect"], argv
    assert "--uid=sglang" in argv and "--gid=sglang" in argv and "User=sglang" in unit and "Group=sglang" in unit
    props = [a.removeprefix("--property=") for a in argv if a.startswith("--property=")]
    service = unit.split("[Service]", 1)[1].split("[Install]", 1)[0].splitlines()
    assert len(props) >= 15 and all(p in service for p in props), sorted(set(props) - set(service))
    sandbox = [ln for ln in service if ln.split("=", 1)[0] in {p.split("=", 1)[0] for p in props}]
    assert sandbox == props  # the unit's lines are exactly the list, in its order
    for needed in ("NoNewPrivileges=true", "ProtectSystem=full", "ProtectHome=true", "PrivateTmp=true"):
        assert needed in props
