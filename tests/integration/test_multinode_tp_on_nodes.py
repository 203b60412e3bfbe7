"""One SGLang server tensor-parallel across two simulated nodes (playbooks/server.yml with llmops_replica).

Boots mn1 and mn2 (10.213.0.91-92, 8 x RTX PRO 6000 each), makes the SGLang stand-in importable there with
tests/integration/server_prepare.yml, puts a GLM-5-like model on both and runs the server stage with both hosts in
one replica: TP16 (TP0-7 on mn1, the head; TP8-15 on mn2), a real TCP rendezvous between the nodes at
mn1:llmops_dist_init_port. Cases share the pair, in file order: the TP16 converge
and its idempotent re-run, a capture OOM injected on node 1 (rank TP9), a node that never joins. Prints the module's
wall time and the nodes' memory (sum of the RSS of every process in each node's network namespace).

Environment: MN_NODE_PREFIX (default mn), MN_NODE_BASE (default 91: addresses 10.213.0.91-92).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import listeners
import pytest
from _node_util import CALLBACKS, MAKE_MODEL, ROOT, VENV_BIN, booted_nodes, fleet_inventory, ssh_key
from node_ssh import ssh_run
from transcripts import check as check_transcript

pytestmark = pytest.mark.node

PREFIX = os.environ.get("MN_NODE_PREFIX", "mn")
BASE = int(os.environ.get("MN_NODE_BASE", "91"))
HOSTS = {f"{PREFIX}{i + 1}": f"10.213.0.{BASE + i}" for i in range(2)}
HEAD, NODE1 = list(HOSTS)
MODEL = "/opt/models/GLM-5-NVFP4"
# The distributed-init timeout: a hang guard where both nodes start (their units start a few seconds apart at most,
# however loaded the machine: both are started by the same task), the outcome itself in the never-joins case.
DIST_GUARD = 300
DIST_TIMEOUT = 20
FAULT = "/etc/sglang-sim/fault"  # the stand-in's fault file (sim/sglang/python/sglang/srt/sim_faults.py)
T0 = time.monotonic()


def ssh(key, ip, cmd, check=True):
    return ssh_run(key, ip, cmd, check=check, text=True, timeout=120).stdout


def node_rss_mib(name: str) -> float:
    """RSS (MiB) of every process in the node's network namespace (systemd, sshd, SGLang's ranks, ...)."""
    try:
        ns = os.stat(f"/run/netns/llms-{name}").st_ino
    except OSError:
        return 0.0
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}/ns/net").st_ino != ns:
                continue
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
        except OSError:
            continue
    return total / 1024


class Pair:
    def __init__(self, key, inventory):
        self.key, self.inventory, self.peak_rss = key, inventory, {n: 0.0 for n in HOSTS}

    def sh(self, host, cmd, check=True):
        return ssh(self.key, HOSTS[host], cmd, check)

    def sample_rss(self):
        for name in HOSTS:
            self.peak_rss[name] = max(self.peak_rss[name], node_rss_mib(name))

    def unit_active(self, host):
        return self.sh(host, "systemctl is-active sglang.service", check=False).strip()

    def playbook(self, playbooks, extra=None, json_out=True, env_extra=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
        env.update(ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), PATH=f"{VENV_BIN}:{env.get('PATH', '')}")
        env.update(env_extra or {})
        if json_out:
            env.update(ANSIBLE_CALLBACK_PLUGINS=str(CALLBACKS), ANSIBLE_STDOUT_CALLBACK="it_json")
        cmd = [shutil.which("ansible-playbook", path=env["PATH"]), "-i", str(self.inventory)]
        if extra:
            cmd += ["-e", json.dumps(extra)]
        cmd += [str(ROOT / pb) for pb in playbooks]
        # output to files, not pipes: a playbook's output is larger than a pipe buffer, read only at the end
        with tempfile.TemporaryFile("w+") as fo, tempfile.TemporaryFile("w+") as fe:
            proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=fo, stderr=fe, text=True, stdin=subprocess.DEVNULL)
            t0 = time.monotonic()
            while proc.poll() is None and time.monotonic() - t0 < 900:
                self.sample_rss()
                try:
                    proc.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    pass
            if proc.poll() is None:
                proc.kill()
                proc.wait(30)
            fo.seek(0)
            fe.seek(0)
            out, err = fo.read(), fe.read()
        doc = None
        if json_out:
            line = ([x for x in out.splitlines() if x.startswith('{"plays"')] or [""])[-1]
            assert line, f"no JSON from ansible-playbook (rc {proc.returncode}):\n{out[-3000:]}\n{err[-3000:]}"
            doc = json.loads(line)
        return Run(proc.returncode, out, err, doc, time.monotonic() - t0)


class Run:
    def __init__(self, rc, stdout, stderr, doc, seconds):
        self.rc, self.stdout, self.stderr, self.doc, self.seconds = rc, stdout, stderr, doc, seconds

    def tasks(self, host):
        for play in (self.doc or {}).get("plays", []):
            for task in play["tasks"]:
                res = task["hosts"].get(host)
                if res is not None:
                    yield task["task"].split(" : ", 1)[-1], res

    def changed(self, host):
        return [name for name, res in self.tasks(host) if res.get("changed") and res["_it_status"] == "ok"]

    def failed(self, host):
        return [(name, res) for name, res in self.tasks(host) if res["_it_status"] == "failed"]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    if os.geteuid() != 0 or shutil.which("systemd-nspawn") is None:
        pytest.skip("node tests need root and systemd-nspawn")
    assert re.fullmatch(r"[a-z]{2}[a-z0-9-]{0,8}", PREFIX) and 80 < BASE < 94  # below the packaging node (10.213.0.95)
    work = tmp_path_factory.mktemp("mn")
    with booted_nodes({name: (ip, "rtx-pro-6000-x8") for name, ip in HOSTS.items()}):
        yield prepared_pair(work)


def prepared_pair(work):
    key = ssh_key()
    subprocess.run([sys.executable, str(MAKE_MODEL), "glm5-nvfp4", str(work / "glm5")], check=True, capture_output=True)
    # one replica across both hosts
    group = {
        "hosts": HOSTS,
        "vars": {
            "llmops_replica": "tp16",
            "server_dist_timeout": DIST_GUARD,
            "server_environment": {"SGLANG_SIM_TIME_SCALE": "0.2"},
            "server_nccl_socket_ifname": "eth0",
        },
    }
    inv = fleet_inventory(work / "inventory", {"gpu_servers": group})
    p = Pair(key, inv)
    prep = p.playbook(
        ["tests/integration/server_prepare.yml"],
        json_out=False,
        env_extra={"MOLECULE_PROJECT_DIRECTORY": str(ROOT), "MOLECULE_EPHEMERAL_DIRECTORY": str(work)},
    )
    assert prep.rc == 0, prep.stdout[-3000:] + prep.stderr[-3000:]
    for name, ip in HOSTS.items():
        p.sh(name, f"mkdir -p {os.path.dirname(MODEL)}")
        subprocess.run(
            ["scp", "-q", "-r", "-i", key, "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
             "-o", "LogLevel=ERROR", str(work / "glm5"), f"root@{ip}:{MODEL}"],
            check=True, timeout=120, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        p.sh(name, f"mkdir -p {os.path.dirname(FAULT)}; rm -f {FAULT}")
    return p


SERVER = ["playbooks/server.yml"]


def test_two_nodes_come_up_as_one_tp16_server_and_a_rerun_changes_nothing(pair):
    run = pair.playbook(SERVER)
    assert run.rc == 0, (run.failed(HEAD), run.failed(NODE1), run.stderr[-2000:])
    # the callback's summary: every rank of every node
    assert re.search(
        rf"multi-node server at {HOSTS[HEAD]}:20000: 2 node\(s\) of 2, 16/16 ranks: TP0-TP7 on {HEAD} \(node 0, "
        rf"ready\); TP8-TP15 on {NODE1} \(node 1, ready\)",
        run.stderr,
    ), run.stderr[-3000:]
    flags = pair.sh(NODE1, "systemctl show -p ExecStart --value sglang.service")
    assert "--tp-size 16" in flags.replace('"', "") and "--node-rank 1" in flags.replace('"', ""), flags
    assert f"--dist-init-addr {HOSTS[HEAD]}:20000" in flags.replace('"', ""), flags
    env = pair.sh(NODE1, "systemctl show -p Environment --value sglang.service")
    assert "NCCL_SOCKET_IFNAME=eth0" in env and "GLOO_SOCKET_IFNAME=eth0" in env, env
    # only the head serves the API; node 1 answers SGLang's dummy /health only
    assert pair.sh(HEAD, "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:30000/v1/models") == "200"
    assert pair.sh(NODE1, "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:30000/v1/models") == "404"
    ranks = {h: set(json.loads(pair.sh(h, "cat /var/lib/llmops-sglang/deployment.json"))["kv_tokens_per_rank"])
             for h in HOSTS}  # fmt: skip
    assert ranks == {HEAD: {f"TP{r}" for r in range(8)}, NODE1: {f"TP{r}" for r in range(8, 16)}}, ranks
    again = pair.playbook(SERVER)
    assert again.rc == 0 and again.changed(HEAD) == [] and again.changed(NODE1) == [], (
        again.changed(HEAD),
        again.changed(NODE1),
    )
    print(f"\nTP16 over 2 nodes: converge {run.seconds:.1f} s, re-run {again.seconds:.1f} s")
    # every listener of the serving replica is a row of docs/security.md's table and binds where it says: the head's
    # API (loopback by default) and rendezvous (torch's TCPStore, every interface, while the server runs), node 1's
    # dummy /health on the API's port and bind; no process group store of its own (the rendezvous is the group's)
    seen = {h: listeners.listening(pair.sh(h, "ss -ltnpH")) for h in HOSTS}
    ephemeral = listeners.port_range(pair.sh(HEAD, "cat /proc/sys/net/ipv4/ip_local_port_range"))
    assert listeners.problems(seen, {}, ephemeral) == ([], []), seen
    ports = {h: listeners.ports(rows, ephemeral) for h, rows in seen.items()}
    assert ports == {HEAD: [20000, 30000], NODE1: [30000]}, ports
    # The fleet firewall (llmops_firewall, on by default) is loaded on both nodes; at the head's rendezvous it resets a
    # stranger (this test host, 10.213.0.1, is not in the replica) and lets node 1 through (its rule's counter only
    # counts the stranger).
    for host in HOSTS:
        assert "tcp dport @replica_ports counter" in pair.sh(host, "nft list table inet llmops_sglang"), host
    before = rejected(pair)
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((HOSTS[HEAD], 20000), timeout=10).close()
    after_stranger = rejected(pair)
    assert after_stranger > before, (before, after_stranger)
    pair.sh(NODE1, f"timeout 10 bash -c 'exec 3<>/dev/tcp/{HOSTS[HEAD]}/20000' || true")
    assert rejected(pair) == after_stranger, "the head's table rejected its own replica's node 1"


def rejected(pair) -> int:
    """Packets the head's table reset at the replica's ports (the counter of its reject rule)."""
    table = pair.sh(HEAD, "nft list table inet llmops_sglang")
    m = re.search(r"tcp dport @replica_ports counter packets (\d+)", table)
    assert m, table
    return int(m.group(1))


def test_a_capture_oom_on_node_1_is_named_and_stops_both_nodes(pair):
    pair.sh(NODE1, f"echo 'oom@cuda_graph_capturing rank=9' > {FAULT}")
    try:
        run = pair.playbook(SERVER, {"server_on_capture_oom": "fail", "server_mem_fraction_static": 0.87})
    finally:
        pair.sh(NODE1, f"rm -f {FAULT}")
    assert run.rc != 0
    for host in HOSTS:
        msgs = " ".join(res.get("msg", "") for _, res in run.failed(host))
        # the verdict's own words first: pytest's summary line keeps only the start of the message
        assert f"node {NODE1} (node rank 1), rank TP9 failed first (oom_cuda_graph" in msgs, (
            host,
            msgs[max(0, msgs.find("failed first") - 40) :],
        )
        assert pair.unit_active(host) in ("inactive", "failed"), host
    head_log = pair.sh(HEAD, "tail -c 20000 /var/log/sglang/server.log")
    assert "ncclRemoteError" in head_log  # the head's own log has only the echo; the diagnosis names node 1
    # the operator guide's transcript of a capture OOM, as the head reports it
    task, res = next((n, r) for n, r in run.failed(HEAD) if n.startswith("Stop with SGLang's diagnosis"))
    names = [(HOSTS[HEAD], "192.0.2.10"), (HOSTS[NODE1], "192.0.2.11"), (HEAD, "gpu01"), (NODE1, "gpu02")]
    check_transcript("capture-oom", f"llmops.sglang.server : {task}", HEAD, res, names)


def test_a_node_that_never_joins_is_diagnosed_within_the_distributed_init_timeout(pair):
    pair.sh(NODE1, f"echo nojoin > {FAULT}")
    try:
        run = pair.playbook(SERVER, {"server_mem_fraction_static": 0.86, "server_dist_timeout": DIST_TIMEOUT})
    finally:
        pair.sh(NODE1, f"rm -f {FAULT}")
    assert run.rc != 0
    expected = f"node {NODE1} (rank 1) never joined the rendezvous at {HOSTS[HEAD]}:20000 within the distributed-init"
    for host in HOSTS:
        msgs = " ".join(res.get("msg", "") for _, res in run.failed(host))
        assert expected in msgs, (host, msgs)
        assert pair.unit_active(host) in ("inactive", "failed"), host
    print(
        f"\nnever-joins run {run.seconds:.1f} s (dist timeout {DIST_TIMEOUT} s); module wall time "
        f"{time.monotonic() - T0:.0f} s; peak RSS " + ", ".join(f"{n} {v:.0f} MiB" for n, v in pair.peak_rss.items())
    )
