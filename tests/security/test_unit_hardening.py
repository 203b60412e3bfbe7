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
UNITS = {
    "sglang.service": (ROLES / "server" / "templates" / "sglang.service.j2", {**VARS, "fleet_firewall_guard": GUARD}),
    "sglang-router.service": (ROLES / "router" / "templates" / "sglang-router.service.j2", ROUTER_VARS),
}
BOUNDS = {"sglang.service": 5.0, "sglang-router.service": 3.0}

pytestmark = pytest.mark.skipif(not shutil.which("systemd-analyze"), reason="needs systemd-analyze")


@pytest.fixture(scope="module")
def exposure(tmp_path_factory) -> dict[str, float]:
    work = tmp_path_factory.mktemp("units")
    tasks = [{"ansible.builtin.template": {"src": str(src), "dest": str(work / name), "mode": "0644"}, "vars": v}
             for name, (src, v) in UNITS.items()]  # fmt: skip
    (work / "play.yml").write_text(json.dumps([{"hosts": "localhost", "connection": "local", "gather_facts": False,
                                                 "vars_files": [str(DEFAULTS_VARS)], "tasks": tasks}]))  # fmt: skip
    env = {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_COLLECTIONS_PATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(work / "play.yml")]
    cmd += ["-e", json.dumps({"ansible_python_interpreter": sys.executable})]
    p = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=work, timeout=300, check=False)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    out = {}
    for name in UNITS:
        proc = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager", str(work / name)],
                              capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
        m = re.search(r"Overall exposure level for \S+: (\d+\.\d)", proc.stdout + proc.stderr)
        assert m, proc.stdout[-2000:] + proc.stderr[-2000:]
        out[name] = float(m.group(1))
    return out


def test_each_unit_is_within_its_bound(exposure):
    assert {n: v for n, v in exposure.items() if v > BOUNDS[n]} == {}, exposure


def test_the_figures_in_docs_security_md_are_the_measured_ones(exposure):
    text = (ROOT / "docs" / "security.md").read_text()
    stated = dict(re.findall(r"^\| `(sglang(?:-router)?\.service)` \| (\d+\.\d) \|", text, re.M))
    assert {n: float(v) for n, v in stated.items()} == exposure, (stated, exposure)
