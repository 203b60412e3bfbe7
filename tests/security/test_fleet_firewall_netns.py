"""Issue 25 item 5: the fleet's firewall table, loaded with Debian's real nft, against real connections.

The test makes two network namespaces of its own (llfw-<random>-head and -peers) joined by a veth pair on
10.214.N.0/24 and fd14:214:N::/64 (N random; the sim bridge's 10.213.0.0/24 is never touched, nor this host's own
namespace). In "head" it loads the table the renderer makes for the head of a two-node replica with the model fan-out
on, and listens (dual-stack, on every interface, as torch's TCPStore does) on the rendezvous port, a port SGLang
derives from it, a port the kernel picks from the namespace's ephemeral range (as NCCL and Gloo get theirs), the
share port, and SSH-like ports the table must leave alone. From "peers", connections leave from three source
addresses: the replica's other node, another host of the fleet, and a stranger.

A refused connection is answered with a TCP reset at once (no timeout to wait out); each refusal is also counted by
the table's own counter, so a refusal that came from anywhere else fails the test. Runs where root, `ip netns` and
nft work; skips with the reason elsewhere. Namespaces are removed also when the test fails.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import textwrap

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import fleet_firewall as fw

NFT = shutil.which("nft") or "/usr/sbin/nft"
N = 1 + secrets.randbelow(250)
V4, V6 = f"10.214.{N}.", f"fd14:214:{N:x}::"
HEAD, NODE, FLEET_HOST, STRANGER = 1, 2, 3, 4
DIST, SHARE, SSH, HTTP = 20000, 8765, 22, 30000

# Listens on each port given (0: the kernel picks one from the ephemeral range), dual-stack, prints the ports, and
# answers each connection with what it reads, until its stdin closes.
SERVER = textwrap.dedent(
    """
    import json, socket, sys, threading
    socks = []
    for p in map(int, sys.argv[1:]):
        s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("::", p))
        s.listen(16)
        socks.append(s)
    def serve(s):
        while True:
            c, _ = s.accept()
            c.settimeout(10)
            try:
                data = c.recv(64)
                c.sendall(data)
            except OSError:
                pass
            c.close()
    for s in socks:
        threading.Thread(target=serve, args=(s,), daemon=True).start()
    print(json.dumps([s.getsockname()[1] for s in socks]), flush=True)
    sys.stdin.read()
    """
)
# Tries each [source, destination, port]: "open" (connected and echoed), "reset" (refused) or the error's name.
CLIENT = textwrap.dedent(
    """
    import json, socket, sys
    out = []
    for src, dst, port in json.loads(sys.argv[1]):
        fam = socket.AF_INET6 if ":" in dst else socket.AF_INET
        s = socket.socket(fam, socket.SOCK_STREAM)
        s.settimeout(10)
        s.bind((src, 0))
        try:
            s.connect((dst, port))
            s.sendall(b"ping")
            out.append("open" if s.recv(4) == b"ping" else "no echo")
        except ConnectionRefusedError:
            out.append("reset")
        except OSError as e:
            out.append(type(e).__name__)
        finally:
            s.close()
    print(json.dumps(out))
    """
)


def run(*argv, check=True):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
    assert not check or proc.returncode == 0, f"{' '.join(argv)}: {proc.returncode} {proc.stderr}"
    return proc


class Lab:
    def __init__(self, tag):
        self.head, self.peers = f"llfw-{tag}-head", f"llfw-{tag}-peers"
        self.server = None

    def up(self):
        run("ip", "netns", "add", self.head)
        run("ip", "netns", "add", self.peers)
        run("ip", "link", "add", "fwh", "netns", self.head, "type", "veth", "peer", "name", "fwp", "netns", self.peers)
        for ns, dev, hosts in ((self.head, "fwh", [HEAD]), (self.peers, "fwp", [NODE, FLEET_HOST, STRANGER])):
            for h in hosts:
                run("ip", "-n", ns, "addr", "add", f"{V4}{h}/24", "dev", dev)
                run("ip", "-n", ns, "addr", "add", f"{V6}{h}/64", "dev", dev, "nodad")
            run("ip", "-n", ns, "link", "set", "lo", "up")
            run("ip", "-n", ns, "link", "set", dev, "up")

    def exec(self, ns, *argv, check=True):
        return run("ip", "netns", "exec", ns, *argv, check=check)

    def listen(self, *ports):
        self.server = subprocess.Popen(
            ["ip", "netns", "exec", self.head, sys.executable, "-c", SERVER, *map(str, ports)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )  # fmt: skip
        return json.loads(self.server.stdout.readline())

    def attempts(self, tries):
        """[(source host, port, family)] -> ["open" | "reset" | error name] from the peers' namespace."""
        spec = [
            [(V4 if fam == 4 else V6) + str(src), (V4 if fam == 4 else V6) + str(HEAD), port]
            for src, port, fam in tries
        ]
        return json.loads(self.exec(self.peers, sys.executable, "-c", CLIENT, json.dumps(spec)).stdout)

    def load(self, text, tmp_path):
        f = tmp_path / "firewall.nft"
        f.write_text(text)
        self.exec(self.head, NFT, "-c", "-f", str(f))
        self.exec(self.head, NFT, "-f", str(f))

    def rejected(self):
        """{rule name: packets} of the table's reject counters in the head namespace."""
        listing = self.exec(self.head, NFT, "list", "table", "inet", fw.TABLE).stdout
        return {m[0]: int(m[1]) for m in re.findall(r"@(\w+)_ports counter packets (\d+)", listing)}

    def down(self):
        if self.server is not None and self.server.poll() is None:
            self.server.stdin.close()
            try:
                self.server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.server.kill()
                self.server.wait(timeout=10)
        for ns in (self.head, self.peers):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30, check=False)


@pytest.fixture
def lab():
    if os.geteuid() != 0:
        pytest.skip("needs root to create network namespaces")
    if not shutil.which("ip") or not os.path.exists(NFT):
        pytest.skip("needs iproute2 and nft (Debian's nftables: make setup installs both)")
    probe = f"llfw-probe-{secrets.token_hex(3)}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True, timeout=30, check=False)
    subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30, check=False)
    if made.returncode != 0:
        pytest.skip(f"ip netns does not work here: {made.stderr.strip()}")
    env = Lab(secrets.token_hex(3))
    try:
        env.up()
        yield env
    finally:
        env.down()


def head_plan(lab, replica_node=True, router=False):
    """The renderer's table for the head, as the role plans it: the head namespace's own ephemeral range. With
    ``router``, the fleet has a router host whose addresses are FLEET_HOST's."""
    ephemeral = lab.exec(lab.head, "cat", "/proc/sys/net/ipv4/ip_local_port_range").stdout
    members = ["head", "node1"] if replica_node else ["head", "node9"]
    hosts = {h: {"replica": "tp16", "nnodes": 2, "hosts": members} for h in members}
    hosts["other"] = {"replica": "other", "nnodes": 1, "hosts": ["other"]}
    hostvars = {
        "head": {"ansible_host": f"{V4}{HEAD}", "fleet_firewall_addresses": [f"{V6}{HEAD}"]},
        "node1": {"ansible_host": f"{V4}{NODE}", "fleet_firewall_addresses": [f"{V6}{NODE}"]},
        "node9": {"ansible_host": f"{V4}99"},
        "other": {"ansible_host": f"{V6}{FLEET_HOST}", "fleet_firewall_addresses": [f"{V4}{FLEET_HOST}"]},
    }
    settings = {"enabled": True, "fanout": True, "share_peers": [], "dist_init_port": DIST, "share_port": SHARE,
                "exempt": {"ansible_port": SSH, "llmops_server_port": HTTP, "llmops_router_port": 30080,
                           "llmops_router_prometheus_port": 29000},
                "ephemeral": ephemeral}  # fmt: skip
    if router:
        hostvars["router1"] = {"ansible_host": f"{V4}{FLEET_HOST}", "fleet_firewall_addresses": [f"{V6}{FLEET_HOST}"]}
        settings.update(routers=["router1"], server_port=HTTP)
    return fw.plan("head", {"hosts": hosts, "replicas": []}, hostvars, settings)


def test_behind_a_router_only_the_router_host_reaches_sglangs_api_port(lab, tmp_path):
    (http,) = lab.listen(HTTP)
    tries = [(src, http, fam) for src in (NODE, FLEET_HOST, STRANGER) for fam in (4, 6)]
    lab.load(head_plan(lab, router=True)["ruleset"], tmp_path)
    got = dict(zip(tries, lab.attempts(tries), strict=True))
    want = {NODE: "reset", FLEET_HOST: "open", STRANGER: "reset"}
    assert {t: got[t] for t in tries} == {t: want[t[0]] for t in tries}, got
    assert lab.rejected()["api"] == 2 * 2  # the replica's other node and the stranger, over both families


def test_only_the_replicas_node_reaches_the_rendezvous_the_fleet_reaches_the_share_and_ssh_stays_open(lab, tmp_path):
    dist, derived, ephemeral, share, ssh, http = lab.listen(DIST, DIST + 13, 0, SHARE, SSH, HTTP)
    low, high = map(int, lab.exec(lab.head, "cat", "/proc/sys/net/ipv4/ip_local_port_range").stdout.split())
    assert low <= ephemeral <= high  # the kernel's pick, as NCCL's and Gloo's listeners get theirs
    ports = {"rendezvous": dist, "derived": derived, "ephemeral": ephemeral, "share": share, "ssh": ssh, "http": http}
    tries = [(src, port, fam) for src in (NODE, FLEET_HOST, STRANGER) for port in ports.values() for fam in (4, 6)]

    before = lab.attempts(tries)
    assert set(before) == {"open"}, before  # without the table every address reaches every port: the table decides

    lab.load(head_plan(lab)["ruleset"], tmp_path)
    after = dict(zip(tries, lab.attempts(tries), strict=True))
    expected = {
        NODE: {"rendezvous": "open", "derived": "open", "ephemeral": "open", "share": "open", "ssh": "open",
               "http": "open"},
        FLEET_HOST: {"rendezvous": "reset", "derived": "reset", "ephemeral": "reset", "share": "open", "ssh": "open",
                     "http": "open"},
        STRANGER: {"rendezvous": "reset", "derived": "reset", "ephemeral": "reset", "share": "reset", "ssh": "open",
                   "http": "open"},
    }  # fmt: skip
    got = {src: {name: after[(src, port, fam)] for name, port in ports.items() for fam in (4, 6)} for src in expected}
    for src, want in expected.items():
        for fam in (4, 6):
            seen = {name: after[(src, port, fam)] for name, port in ports.items()}
            assert seen == want, (src, fam, seen)
    # every refusal came from the table's own reject rules: 2 families x (3 replica ports x 2 outsiders + 1 share)
    assert lab.rejected() == {"replica": 2 * 3 * 2, "share": 2 * 1}, got


def test_a_reload_swaps_the_table_and_keeps_established_connections(lab, tmp_path):
    (ephemeral,) = lab.listen(0)
    lab.load(head_plan(lab)["ruleset"], tmp_path)
    client = textwrap.dedent(
        f"""
        import socket, sys
        s = socket.create_connection(("{V4}{HEAD}", {ephemeral}), timeout=10, source_address=("{V4}{NODE}", 0))
        print("connected", flush=True)
        sys.stdin.readline()
        s.sendall(b"ping")
        print(s.recv(4).decode(), flush=True)
        """
    )
    held = subprocess.Popen(
        ["ip", "netns", "exec", lab.peers, sys.executable, "-c", client],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert held.stdout.readline().strip() == "connected"
        # the node leaves the replica: the new table no longer lists its address
        lab.load(head_plan(lab, replica_node=False)["ruleset"], tmp_path)
        assert lab.attempts([(NODE, ephemeral, 4)]) == ["reset"]  # a new connection is refused at once
        held.stdin.write("go\n")
        held.stdin.flush()
        assert held.stdout.readline().strip() == "ping"  # the one opened before the reload still works
    finally:
        held.kill()
        held.wait(timeout=10)
    listing = lab.exec(lab.head, NFT, "list", "ruleset").stdout
    assert listing.count("table inet llmops_sglang") == 1 and f"{V4}{NODE}" not in listing


@pytest.mark.parametrize(
    "spec, listed, refused",
    [
        ("fwh", True, False),
        ("=fwh", True, False),
        ("fw", True, False),
        ("fwh", False, True),
        ("^lo,docker", False, False),
        ("ib0", False, False),
    ],
    ids=[
        "the_nccl_interface_is_listed",
        "exact_name",
        "prefix_as_nccl_matches_it",
        "a_second_network_not_listed_is_refused_before_any_change",
        "an_exclusion_list_leaves_nccls_choice_unchecked",
        "an_interface_the_host_lacks_is_the_server_roles_to_report",
    ],
)
def test_the_address_nccl_and_gloo_use_must_be_one_the_other_nodes_let_in(lab, spec, listed, refused):
    """The head's real `ip -j addr show` (the role reads the same): its NCCL interface fwh carries 10.214.N.1. When the
    inventory lists the head only by another address, the other nodes' tables would refuse its NCCL connections."""
    links = lab.exec(lab.head, "ip", "-j", "addr", "show").stdout
    own = [f"{V4}{HEAD}"] if listed else ["192.0.2.1"]
    hosts = {h: {"replica": "r", "nnodes": 2, "hosts": ["head", "node1"]} for h in ("head", "node1")}
    hostvars = {"head": {"ansible_host": own[0]}, "node1": {"ansible_host": f"{V4}{NODE}"}}
    settings = {"enabled": True, "dist_init_port": DIST, "share_port": SHARE, "exempt": {"ansible_port": SSH},
                "ephemeral": "32768 60999", "nccl_ifname": spec, "links": links}  # fmt: skip
    if refused:
        with pytest.raises(fw.FirewallError) as exc:
            fw.plan("head", {"hosts": hosts}, hostvars, settings)
        text = str(exc.value)
        assert "\n" not in text and f"{V4}{HEAD} on fwh" in text and "fleet_firewall_addresses of head" in text
    else:
        assert fw.plan("head", {"hosts": hosts}, hostvars, settings)["state"] == "present"


# Connects over loopback as the account it runs as: "open" (connected and echoed), "reset" or the error's name.
LOCAL_CLIENT = textwrap.dedent(
    """
    import json, socket, sys
    out = []
    for port in json.loads(sys.argv[1]):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            s.sendall(b"ping")
            out.append("open" if s.recv(4) == b"ping" else "no echo")
            s.close()
        except ConnectionRefusedError:
            out.append("reset")
        except OSError as e:
            out.append(type(e).__name__)
    print(json.dumps(out))
    """
)
SYSTEM_PYTHON = "/usr/bin/python3"  # readable by any account, unlike this test's own interpreter under /root


def test_over_loopback_only_root_sglangs_account_and_the_listed_ones_open_a_replicas_ports(lab, tmp_path):
    """Every local account arrives on "lo", which the input chain accepts: the output chain resets a new connection to
    the replica's ports from any account but root, the service account and fleet_firewall_local_accounts (the
    connecting socket's owner). A listener of another account on a port outside the table answers every account:
    its replies go to the client's port inside the range, but they belong to a connection already made."""
    if not os.path.exists(SYSTEM_PYTHON) or not shutil.which("setpriv"):
        pytest.skip("needs the system's python3 and setpriv (util-linux)")
    service, listed, other, outsider_listener = 64101, 64102, 64103, 64104  # uids no account of this machine has
    (ephemeral,) = lab.listen(0)  # a root listener in the range, as SGLang's TCPStore or a Gloo port
    plan = head_plan(lab)
    settings_open = fw.plan(
        "head",
        {"hosts": {"head": {"replica": "r", "nnodes": 1, "hosts": ["head"]}}, "replicas": []},
        {"head": {"ansible_host": f"{V4}{HEAD}"}},
        {"enabled": True, "dist_init_port": DIST, "share_port": SHARE, "exempt": {"ansible_port": SSH},
         "ephemeral": "32768 60999", "loopback": "open"},
    )  # fmt: skip
    assert "chain output" not in settings_open["ruleset"] and "every local account" in settings_open["summary"]
    settings = {"enabled": True, "dist_init_port": DIST, "share_port": SHARE, "exempt": {"ansible_port": SSH},
                "ephemeral": lab.exec(lab.head, "cat", "/proc/sys/net/ipv4/ip_local_port_range").stdout,
                "local_accounts": [str(service), listed]}  # fmt: skip
    single = fw.plan(
        "head",
        {"hosts": {"head": {"replica": "r", "nnodes": 1, "hosts": ["head"]}}, "replicas": []},
        {"head": {"ansible_host": f"{V4}{HEAD}"}},
        settings,
    )
    assert plan["state"] == single["state"] == "present"
    other_listener = subprocess.Popen(
        ["ip", "netns", "exec", lab.head, "setpriv", f"--reuid={outsider_listener}", f"--regid={outsider_listener}",
         "--clear-groups", SYSTEM_PYTHON, "-c", SERVER, str(HTTP)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert json.loads(other_listener.stdout.readline()) == [HTTP]

        def tries(uid):
            who = [] if uid == 0 else ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups"]
            argv = [*who, SYSTEM_PYTHON, "-c", LOCAL_CLIENT, json.dumps([ephemeral, HTTP])]
            return json.loads(lab.exec(lab.head, *argv).stdout)

        before = {uid: tries(uid) for uid in (0, service, listed, other)}
        assert all(v == ["open", "open"] for v in before.values()), before
        lab.load(single["ruleset"], tmp_path)
        after = {uid: tries(uid) for uid in (0, service, listed, other)}
        assert after == {0: ["open", "open"], service: ["open", "open"], listed: ["open", "open"],
                         other: ["reset", "open"]}, after  # fmt: skip
        listing = lab.exec(lab.head, NFT, "list", "table", "inet", fw.TABLE).stdout
        counted = re.search(r'oif "lo" .*meta skuid != \{ ([^}]*) \} counter packets (\d+)', listing)
        assert counted and counted.group(1) == f"0, {service}, {listed}" and int(counted.group(2)) == 1, listing
    finally:
        other_listener.stdin.close()
        try:
            other_listener.wait(timeout=10)
        except subprocess.TimeoutExpired:
            other_listener.kill()
            other_listener.wait(timeout=10)
