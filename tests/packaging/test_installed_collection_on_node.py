"""The installed collection deploys: `ansible-playbook llmops.sglang.site --tags server` (preflight runs too: it is
tagged always), from outside the repository with only the tarball-installed collection, brings a prepared simulated
node to a ready SGLang.

The node (pk1, 10.213.0.95, 8 x RTX PRO 6000, driver 580.95.05) is prepared the way
tests/integration/test_server_stage.py prepares its own, instead of the driver and build stages:
tests/integration/server_prepare.yml (the service user, /opt/sglang/venv with the SGLang stand-in importable) and the
GLM-5-like model from sim/models/make_model.py in llmops_model_dir. The stage variables are the simulation
inventory's (inventories/sim/group_vars).

Environment: PK_NODE_NAME / PK_NODE_IP override the node (names pk*, addresses 10.213.0.95-99).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, clean_env, run, tool
from events import PLAYBOOK_GUARD
from node_ssh import ssh_run

pytestmark = pytest.mark.node

NODE = os.environ.get("PK_NODE_NAME", "pk1")
IP = os.environ.get("PK_NODE_IP", "10.213.0.95")
MODEL_DIR = "/opt/models/GLM-5-NVFP4"  # llmops_model_dir in inventories/sim/group_vars/gpu_servers/server.yml


def sim_node(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    p = run([str(ROOT / "sim" / "node"), *args], cwd=ROOT, env=dict(os.environ), timeout=timeout)
    if check and p.returncode != 0:
        raise AssertionError(f"sim/node {' '.join(args)} exited {p.returncode}: {p.stderr[-2000:]}")
    return p


class Node:
    def __init__(self, key: str):
        self.key = key

    def ssh(self, cmd: str, *, input: bytes | None = None, check: bool = True) -> str:
        return ssh_run(self.key, IP, cmd, check=check, timeout=120, input=input, name=NODE).stdout.decode(
            errors="replace"
        )


@pytest.fixture(scope="module")
def node(request, tmp_path_factory):
    if os.geteuid() != 0 or shutil.which("systemd-nspawn") is None:
        pytest.skip("node tests need root and systemd-nspawn")
    assert re.fullmatch(r"pk[a-z0-9-]{0,10}", NODE) and re.fullmatch(r"10\.213\.0\.9[5-9]", IP)
    work = tmp_path_factory.mktemp("pk")

    def finalize():
        sim_node("down", NODE, check=False)
        sim_node("teardown", check=False)  # never --all: other engineers' nodes stay up

    request.addfinalizer(finalize)
    if NODE in sim_node("list", check=False).stdout.split():
        sim_node("down", NODE, check=False)
    sim_node("up", NODE, IP, "--profile", "rtx-pro-6000-x8", "--driver", "580.95.05", timeout=600)
    n = Node(sim_node("ssh-key").stdout.strip())
    inv = work / "inventory"
    inv.mkdir()
    hostvars = {
        "ansible_host": IP,
        "ansible_user": "root",
        "ansible_ssh_private_key_file": n.key,
        "ansible_ssh_common_args": "-o UserKnownHostsFile=/dev/null -o StrictHostKeyChecking=no",
        "ansible_python_interpreter": "/usr/bin/python3",
    }
    (inv / "hosts.yml").write_text(json.dumps({"gpu_servers": {"hosts": {NODE: hostvars}}}))
    (inv / "group_vars").symlink_to(ROOT / "inventories" / "sim" / "group_vars")
    n.inventory = inv
    # The preparation comes from this repository (test set-up, as in test_server_stage.py), not from the tarball.
    prep = run(
        [tool("ansible-playbook"), "-i", str(inv), str(ROOT / "tests" / "integration" / "server_prepare.yml")],
        cwd=ROOT,
        env=clean_env(
            ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
            MOLECULE_PROJECT_DIRECTORY=str(ROOT),
            MOLECULE_EPHEMERAL_DIRECTORY=str(work),
        ),
        timeout=PLAYBOOK_GUARD,
    )
    assert prep.returncode == 0, prep.stdout[-3000:] + prep.stderr[-3000:]
    model = work / "model"
    subprocess.run(
        [sys.executable, str(ROOT / "sim" / "models" / "make_model.py"), "glm5-nvfp4", str(model)], check=True
    )
    tar = subprocess.run(["tar", "-C", str(model), "-cf", "-", "."], capture_output=True, check=True).stdout
    n.ssh(f"mkdir -p {MODEL_DIR} && tar -C {MODEL_DIR} -xf -", input=tar)
    return n


# Run on the node as root: listens on 127.0.0.1 port 0 (the kernel's ephemeral range), connects as root and as each
# account named in argv (setpriv), prints {account: "open" | "reset" | error}.
LOOPBACK_PROBE = """
import json, pwd, socket, subprocess, sys, threading
srv = socket.socket()
srv.bind(("127.0.0.1", 0))
srv.listen(8)
port = srv.getsockname()[1]
def serve():
    while True:
        c, _ = srv.accept()
        c.sendall(b"ok")
        c.close()
threading.Thread(target=serve, daemon=True).start()
client = (
    "import socket, sys\\n"
    "try:\\n"
    "    print('open' if socket.create_connection(('127.0.0.1', %d), timeout=10).recv(2) == b'ok' else 'no answer')\\n"
    "except ConnectionRefusedError:\\n"
    "    print('reset')\\n" % port
)
out = {"root": subprocess.run([sys.executable, "-c", client], capture_output=True, text=True).stdout.strip()}
for name in sys.argv[1:]:
    uid = pwd.getpwnam(name).pw_uid
    argv = ["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid, "--clear-groups", sys.executable, "-c", client]
    got = subprocess.run(argv, capture_output=True, text=True)
    out[name] = got.stdout.strip() or got.stderr.strip()[-200:]
print(json.dumps(out))
"""


def test_the_installed_site_playbook_brings_a_prepared_node_to_ready(installed, node):
    p = installed.run(
        [tool("ansible-playbook"), "-i", str(node.inventory), "llmops.sglang.site", "--tags", "server", "-vv"],
        timeout=PLAYBOOK_GUARD,
        ANSIBLE_CALLBACKS_ENABLED="llmops.sglang.sglang_progress",
    )
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-5000:]
    assert "No config file found; using defaults" in out  # nothing of this repository's configuration
    # every task came from the installed collection: its playbooks and its roles
    paths = {Path(m) for m in re.findall(r"^task path: (/\S+):\d+$", p.stdout, re.M)}
    assert paths and all(path.is_relative_to(installed.path) for path in paths), sorted(map(str, paths))
    # only preflight and server did anything, the server with the fleet firewall it includes (on by default), and
    # the shared role its once-per-run read of the installed packages; every role's argument validation is tagged
    # always, so the other stages' roles show up with that one task
    roles = set(re.findall(r"TASK \[llmops\.sglang\.(\w+) : (?!Validating arguments against arg spec)", out))
    assert roles == {"llmops_defaults", "preflight", "server", "fleet_firewall"}, roles
    # the installed callback printed its end-of-play summary
    assert re.search(rf"^\[sglang\] {NODE}: ready", out, re.M), out[-3000:]
    # what the node is left with: preflight's record, a ready server and its deployment record
    pre = json.loads(node.ssh("cat /var/lib/llmops-sglang/preflight.json"))
    assert pre["gpu_count"] in (8, "8") and pre["driver_version"] == "580.95.05", pre
    rec = json.loads(node.ssh("cat /var/lib/llmops-sglang/deployment.json"))
    assert rec["memory"]["attempts"][-1]["outcome"] == "ready", rec["memory"]["attempts"]
    assert len(rec["kv_tokens_per_rank"]) == 8 and min(rec["kv_tokens_per_rank"].values()) > 0
    assert node.ssh("systemctl is-active sglang", check=False).strip() == "active"
    health = node.ssh("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:30000/health", check=False)
    assert health == "200", health
    # the installed fleet_firewall role ran and gave the single-node replica its table (plugins/module_utils/
    # fleet_firewall.py plan()): its ephemeral and pyzmq ranges answer only the host itself; the table file, its unit
    # and the loaded table are there (the node image has no nftables: the role installed it from the mirror)
    assert re.search(rf"{NODE}: TCP [0-9, -]+ only from this host \(single-node replica {NODE}\)", out), out[-3000:]
    left = node.ssh(
        "ls /etc/llmops-sglang/firewall.nft /etc/systemd/system/llmops-sglang-firewall.service"
        " /etc/systemd/system/llmops-sglang-firewall-watch.service;"
        " systemctl is-active llmops-sglang-firewall llmops-sglang-firewall-watch; nft list tables"
    )
    assert "/etc/llmops-sglang/firewall.nft" in left and "llmops-sglang-firewall.service" in left, left
    assert "llmops-sglang-firewall-watch.service" in left, left
    assert "\nactive\nactive\n" in left and "table inet llmops_sglang" in left, left
    # over loopback, a root listener in the ephemeral range (as the TCPStore's) takes SGLang's account and root, and
    # resets another local account's new connection (the table's output chain)
    probe = node.ssh("python3 - sglang nobody", input=LOOPBACK_PROBE.encode())
    assert json.loads(probe) == {"root": "open", "sglang": "open", "nobody": "reset"}, probe
    # SGLang's unit checked the table before the start (ExecStartPre) without writing it into SGLang's log
    unit = node.ssh("systemctl cat sglang")
    assert "ExecStartPre=+/bin/sh -c" in unit and "list table inet llmops_sglang" in unit, unit
    assert "llmops_sglang" not in node.ssh("cat /var/log/sglang/server.log")
