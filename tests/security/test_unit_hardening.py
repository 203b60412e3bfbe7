"""How exposed SGLang's and the router's units are, as systemd measures it: `systemd-analyze security --offline=true`
on the units the roles render (Ansible's own templating, the roles' templates), against the bounds docs/security.md
states (router at most 3.0, SGLang at most 5.0, whose gaps are CUDA's) and the figures it gives, which must be the
ones measured here."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "unit"))
from test_server_unit_firewall import DEFAULTS_VARS, GUARD, VARS  # noqa: E402

ROUTER_VARS = {
    "router_package": "sglang-router", "router_version": "0.3.2", "router_user": "sglang-router",
    "router_keys_file": "/etc/sglang-router/router-keys.json",
    "router_workers_file": "/etc/sglang-router/router-workers.json", "router_venv": "/opt/sglang-router/venv",
    "router_launcher": "/usr/local/lib/llmops-sglang/sglang-router-launch", "router_argv": ["--port", "30080"],
    "router_log_dir": "/var/log/sglang-router",
}  # fmt: skip
ROLES = ROOT / "roles"
ROUTER_ROLE_VARS = ROLES / "router" / "vars" / "main.yml"  # the router unit's sandbox (router_sandbox)
UNITS = {
    "sglang.service": (ROLES / "server" / "templates" / "sglang.service.j2", {**VARS, "fleet_firewall_guard": GUARD}),
    "sglang-router.service": (ROLES / "router" / "templates" / "sglang-router.service.j2", ROUTER_VARS),
}
BOUNDS = {"sglang.service": 5.0, "sglang-router.service": 3.0}

pytestmark = pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="needs systemd-analyze")


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    """The two units as the roles render them, and the argv prefix of the router's import check (router_as_router)."""
    work = tmp_path_factory.mktemp("units")
    tasks = [{"ansible.builtin.template": {"src": str(src), "dest": str(work / name), "mode": "0644"}, "vars": v}
             for name, (src, v) in UNITS.items()]  # fmt: skip
    argv = {"content": "{{ router_as_router | to_json }}", "dest": str(work / "as-router.json"), "mode": "0644"}
    tasks.append({"ansible.builtin.copy": argv, "vars": ROUTER_VARS})
    (work / "play.yml").write_text(json.dumps([{"hosts": "localhost", "connection": "local", "gather_facts": False,
                                                 "vars_files": [str(DEFAULTS_VARS), str(ROUTER_ROLE_VARS)],
                                                 "tasks": tasks}]))  # fmt: skip
    env = {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_COLLECTIONS_PATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(work / "play.yml")]
    cmd += ["-e", json.dumps({"ansible_python_interpreter": sys.executable})]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work, timeout=300, check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    return work


@pytest.fixture(scope="module")
def exposure(rendered) -> dict[str, float]:
    out = {}
    for name in UNITS:
        proc = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", str(rendered / name)],
                              capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
        m = re.search(r"Overall exposure level for \S+: (\d+\.\d)", proc.stdout + proc.stderr)
        assert m, proc.stdout[-2000:] + proc.stderr[-2000:]
        out[name] = float(m.group(1))
    return out


def test_the_routers_import_check_runs_as_its_account_in_the_units_own_sandbox(rendered):
    """router_as_router (the router role's import check of its Rust extension) and the unit take their sandbox from
    one list (router_sandbox): every --property= of the check is a line of the unit's [Service], in the same order,
    and the account is the unit's."""
    unit = (rendered / "sglang-router.service").read_text()
    argv = json.loads((rendered / "as-router.json").read_text())
    assert argv[:5] == ["systemd-run", "--quiet", "--wait", "--pipe", "--collect"], argv
    assert "--uid=sglang-router" in argv and "--gid=sglang-router" in argv
    assert "User=sglang-router" in unit and "Group=sglang-router" in unit
    props = [a.removeprefix("--property=") for a in argv if a.startswith("--property=")]
    service = unit.split("[Service]", 1)[1].split("[Install]", 1)[0].splitlines()
    assert len(props) >= 25 and all(p in service for p in props), sorted(set(props) - set(service))
    sandbox = [ln for ln in service if ln.split("=", 1)[0] in {p.split("=", 1)[0] for p in props}]
    assert sandbox == props  # the unit's lines are exactly the list, in its order
    for needed in ("ProtectSystem=strict", "ReadWritePaths=/var/log/sglang-router", "MemoryDenyWriteExecute=true",
                   "SystemCallFilter=~@privileged @resources", "CapabilityBoundingSet="):  # fmt: skip
        assert needed in props


def test_each_unit_is_within_its_bound(exposure):
    assert {n: v for n, v in exposure.items() if v > BOUNDS[n]} == {}, exposure


def test_the_figures_in_docs_security_md_are_the_measured_ones(exposure):
    text = (ROOT / "docs" / "security.md").read_text()
    stated = dict(re.findall(r"^\| `(sglang(?:-router)?\.service)` \| (\d+\.\d) \|", text, re.M))
    assert {n: float(v) for n, v in stated.items()} == exposure, (stated, exposure)
