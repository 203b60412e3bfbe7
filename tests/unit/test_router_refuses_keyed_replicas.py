"""The router stage refuses, before any change, replicas that require an API key: the role does not give
sglang-router the replicas' key, so every routed request would be refused with 401. The play runs for real
(ansible-playbook, local connection): the refusal comes before the first task that touches the host."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SECRET = "sk-router-test-4e1f"


def test_a_keyed_replica_is_refused_in_one_line_without_the_key(tmp_path):
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inventory = {
        "all": {
            "children": {
                "gpu_servers": {
                    "hosts": {
                        "g1": {**local, "llmops_server_host": "0.0.0.0", "llmops_server_api_key": SECRET},
                        "g2": {**local, "llmops_server_host": "0.0.0.0"},
                    }
                },
                "sglang_routers": {"hosts": {"r1": local}},
            }
        }
    }
    inv = tmp_path / "hosts.yml"
    inv.write_text(yaml.safe_dump(inventory))
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_COLLECTIONS_PATH": str(ROOT)}
    playbook = Path(sys.executable).parent / "ansible-playbook"
    run = subprocess.run(
        [str(playbook), "-i", str(inv), str(ROOT / "playbooks" / "router.yml"), "-vvv"],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = run.stdout + run.stderr
    assert run.returncode != 0, out[-2000:]
    refusal = [line for line in out.splitlines() if "Expected replicas without llmops_server_api_key" in line]
    assert refusal, out[-3000:]
    assert "found llmops_server_api_key set on g1." in refusal[0], refusal[0]
    assert "g2" not in refusal[0].split("found", 1)[1].split(".")[0]
    assert SECRET not in out
    assert "Traceback" not in out
    # Nothing after the refusal ran: the venv package step is the first change the role makes.
    assert "Install Python's venv support" not in out, out[-3000:]
