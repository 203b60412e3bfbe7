"""Issue 25 item 5 without nodes: the fleet's firewall table (plugins/module_utils/fleet_firewall.py).

Each case is an attack or a bad value, named after what it proves. The rendered tables are checked by Debian's real
`nft -c -f` (and loaded with `nft -f`) in a throwaway network namespace (`unshare --net`), never this host's; the
ports come from the release the roles serve: SGLang's own source, read from the real wheel (tests/sim/real_releases.py:
the shared wheel cache, else pip), must still say what docs/security.md cites, and pyzmq's wheel its random range.
tests/security/test_fleet_firewall_netns.py sends real connections through a loaded table."""

from __future__ import annotations

import ipaddress
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from ansible_collections.llmops.sglang.plugins.filter.fleet_firewall import fleet_firewall as fleet_firewall_filter
from ansible_collections.llmops.sglang.plugins.module_utils import fleet_firewall as fw
from ansible_collections.llmops.sglang.plugins.module_utils.fleet_firewall import FirewallError

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "sim"))
from real_releases import wheel  # noqa: E402

DOC = (ROOT / "docs" / "security.md").read_text()
RELEASE = str(yaml.safe_load((ROOT / "roles" / "sglang" / "defaults" / "main.yml").read_text())["sglang_version"])
PYZMQ = "27.1.0"
NFT = shutil.which("nft") or "/usr/sbin/nft"
EXEMPT = {"ansible_port": 22, "llmops_server_port": 30000, "llmops_router_port": 30080,
          "llmops_router_prometheus_port": 29000}  # fmt: skip
NAMES = {"gpu1.fleet.internal": ["10.20.0.1", "fd20::1"], "gpu2.fleet.internal": ["10.20.0.2"]}


def resolver(name):
    return list(NAMES.get(name, []))


def fleet(*replicas):
    """llmops_fleet's shape (module_utils/sglang_topology.py) for replicas given as lists of host names."""
    hosts = {}
    for members in replicas:
        for h in members:
            hosts[h] = {"replica": members[0] + "-r", "nnodes": len(members), "hosts": list(members)}
    return {"hosts": hosts, "replicas": []}


FLEET = fleet(["h0", "h1"], ["h2"])
HOSTVARS = {
    "h0": {"ansible_host": "10.20.0.10"},
    "h1": {"ansible_host": "10.20.0.11"},
    "h2": {"ansible_host": "10.20.0.12"},
}


def settings(**over):
    base = {"enabled": True, "fanout": False, "share_peers": [], "dist_init_port": 20000, "share_port": 8765,
            "exempt": dict(EXEMPT), "ephemeral": "32768\t60999\n"}  # fmt: skip
    base.update(over)
    return base


def plan(host="h0", topology=FLEET, hostvars=HOSTVARS, **over):
    return fw.plan(host, topology, hostvars, settings(**over), resolver=resolver)


def refusal(**kwargs):
    with pytest.raises(FirewallError) as exc:
        plan(**kwargs)
    text = str(exc.value)
    assert "\n" not in text and text.startswith("fleet firewall: expected") and "Traceback" not in text, text
    return text


def elements(ruleset, name):
    m = re.search(r"set " + re.escape(name) + r" \{[^}]*?elements = \{ ([^}]*) \}", ruleset)
    return [] if m is None else m.group(1).split(", ")


def port_set(ruleset, name):
    out = set()
    for e in elements(ruleset, name + "_ports"):
        low, _, high = e.partition("-")
        out.update(range(int(low), int(high or low) + 1))
    return out


def nft_in_throwaway_netns(*scripts):
    """Run `nft` commands (lists of arguments) in a new network namespace of their own; skip where it cannot run."""
    if os.geteuid() != 0 or not os.path.exists(NFT) or not shutil.which("unshare"):
        pytest.skip("needs root, nft (Debian's nftables, make setup installs it) and unshare")
    script = " && ".join(" ".join(a) for a in scripts)
    proc = subprocess.run(
        ["unshare", "--net", "sh", "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    if proc.returncode != 0 and "unshare failed" in proc.stderr:
        pytest.skip(f"network namespaces are not available here: {proc.stderr.strip()}")
    return proc


# -- the ports: what the release the roles serve opens between nodes --------------------------------------------------
def test_a_multi_node_host_restricts_the_rendezvous_sglangs_derived_ports_and_the_ephemeral_ranges():
    got = plan()
    assert got["state"] == "present"
    ports = port_set(got["ruleset"], "replica")
    for p in (20000, 20001, 20002, 20003, 20004, 20005, 20013, 32768, 45000, 60999, 49152, 65535):
        assert p in ports, p
    for p in (20006, 20012, 22, 30000, 30080, 29000, 8765, 32767):
        assert p not in ports, p


def test_the_replica_rule_admits_only_the_replicas_own_nodes():
    got = plan()
    assert elements(got["ruleset"], "replica_v4") == ["10.20.0.10", "10.20.0.11"]  # h2 is another replica
    assert "share_ports" not in got["ruleset"]  # no fan-out: no share rule


def test_the_share_rule_admits_the_fleets_hosts_and_the_share_allow_list():
    got = plan(host="h2", fanout=True, share_peers=["10.99.0.0/24"])
    assert got["state"] == "present" and elements(got["ruleset"], "replica_v4") == []  # single node: this host only
    assert elements(got["ruleset"], "share_v4") == ["10.20.0.10", "10.20.0.11", "10.20.0.12", "10.99.0.0/24"]
    assert port_set(got["ruleset"], "share") == {8765}


@pytest.fixture(scope="module")
def sglang_source():
    """{path: lines} of the SGLang release the roles serve (roles/sglang/defaults/main.yml), from its real wheel."""
    files = ["sglang/srt/server_args.py", "sglang/srt/managers/data_parallel_controller.py",
             "sglang/srt/utils/common.py", "sglang/srt/model_executor/model_runner.py",
             "sglang/srt/distributed/device_communicators/shm_broadcast.py",
             "sglang/srt/distributed/parallel_state.py"]  # fmt: skip
    with zipfile.ZipFile(wheel(RELEASE.lstrip("v"))) as z:
        return {f: z.read(f).decode().splitlines() for f in files}


# (file, line, text on that line): each citation of docs/security.md's "Fleet firewall" section
CITATIONS = [
    ("sglang/srt/model_executor/model_runner.py", 777, 'dist_init_method = f"tcp://{self.server_args.dist_init_addr}"'),
    ("sglang/srt/server_args.py", 5627, "nccl_port = get_free_port()"),
    ("sglang/srt/server_args.py", 5665, "port_base = dist_init_port + 1"),
    ("sglang/srt/server_args.py", 5671, "scheduler_input_port = port_base + 4"),
    ("sglang/srt/server_args.py", 5596, "DP_ATTENTION_HANDSHAKE_PORT_DELTA = 13"),
    ("sglang/srt/managers/data_parallel_controller.py", 305, "int(port) + DP_ATTENTION_HANDSHAKE_PORT_DELTA"),
    ("sglang/srt/managers/data_parallel_controller.py", 378, "get_zmq_socket(self.context, zmq.PUSH)"),
    ("sglang/srt/utils/common.py", 1439, 'socket.bind_to_random_port("tcp://*")'),
    ("sglang/srt/utils/common.py", 755, 's.bind(("", 0))'),
    ("sglang/srt/utils/common.py", 2597, 's.bind(("", 0))'),
    ("sglang/srt/distributed/device_communicators/shm_broadcast.py", 231, "remote_subscribe_port = get_open_port()"),
    ("sglang/srt/distributed/device_communicators/shm_broadcast.py", 195, 'get_local_ip_auto("0.0.0.0")'),
    ("sglang/srt/distributed/parallel_state.py", 1681, '"SGLANG_USE_MESSAGE_QUEUE_BROADCASTER", "true"'),
    ("sglang/srt/distributed/parallel_state.py", 283, 'backend="gloo"'),
    ("sglang/srt/utils/common.py", 1313, "data = pickle.loads(serialized_data)"),
    ("sglang/srt/distributed/device_communicators/shm_broadcast.py", 464, "obj = pickle.loads(recv)"),
]


@pytest.mark.parametrize("path, line, text", CITATIONS, ids=[f"{p.rsplit('/', 1)[1]}:{n}" for p, n, _ in CITATIONS])
def test_each_citation_in_the_docs_is_what_the_real_release_says(sglang_source, path, line, text):
    assert text in sglang_source[path][line - 1], (path, line, sglang_source[path][line - 1])
    assert f"{path.split('sglang/srt/', 1)[1]}:{line}" in DOC, f"docs/security.md does not cite {path}:{line}"


def test_the_derived_ports_are_the_ones_the_real_release_derives_from_the_dist_init_port(sglang_source):
    text = "\n".join(sglang_source["sglang/srt/server_args.py"])
    base = int(re.search(r"port_base = dist_init_port \+ (\d+)", text).group(1))
    steps = [int(re.search(rf"{name} = port_base \+ (\d+)", text).group(1))
             for name in ("detokenizer_port", "rpc_port", "metrics_ipc_name", "scheduler_input_port")]  # fmt: skip
    handshake = int(re.search(r"DP_ATTENTION_HANDSHAKE_PORT_DELTA = (\d+)", text).group(1))
    assert set(fw.DP_ATTENTION_OFFSETS) == {base, handshake} | {base + s for s in steps}


def test_pyzmqs_random_port_range_is_the_one_the_table_restricts():
    with zipfile.ZipFile(wheel(PYZMQ, package="pyzmq")) as z:
        src = z.read("zmq/sugar/socket.py").decode()
    m = re.search(
        r"def bind_to_random_port\(\s*self[^,]*,\s*addr: str,\s*min_port: int = (\d+),\s*max_port: int = (\d+)", src
    )
    assert m, "bind_to_random_port's signature changed"
    assert fw.ZMQ_RANDOM_PORTS == (int(m.group(1)), int(m.group(2)) - 1)  # max_port is exclusive
    assert f"pyzmq {PYZMQ}" in DOC


# -- nothing but those ports, never SSH -------------------------------------------------------------------------------
def test_ssh_inside_the_ephemeral_range_is_never_restricted_so_the_operator_cannot_be_locked_out():
    ports = port_set(plan(exempt={**EXEMPT, "ansible_port": 40022})["ruleset"], "replica")
    assert 40022 not in ports and 40021 in ports and 40023 in ports


def test_the_keyed_http_api_inside_the_ephemeral_range_stays_reachable_for_the_router():
    ports = port_set(plan(exempt={**EXEMPT, "llmops_server_port": 40000})["ruleset"], "replica")
    assert 40000 not in ports


# -- SGLang's HTTP API behind a router: the router hosts (and the listed clients) only --------------------------------
ROUTED = {**HOSTVARS, "r1": {"ansible_host": "10.20.0.20", "fleet_firewall_addresses": ["fd20::20"]}}


@pytest.mark.parametrize("host", ["h0", "h1", "h2"])
def test_behind_a_router_the_api_port_admits_only_the_router_hosts(host):
    got = plan(host=host, hostvars=ROUTED, routers=["r1"], server_port=30000)
    ruleset = got["ruleset"]
    assert port_set(ruleset, "api") == {30000}
    assert elements(ruleset, "api_v4") == ["10.20.0.20"] and elements(ruleset, "api_v6") == ["fd20::20"]
    assert "tcp dport @api_ports counter reject with tcp reset" in ruleset
    # the replica's own nodes are not routers: they get no way in (nothing in a replica calls its head's API)
    assert "10.20.0.11" not in elements(ruleset, "api_v4")
    assert "30000 (SGLang's API) only from 1 router host(s) and 0 listed client(s)" in got["summary"]


def test_listed_clients_join_the_routers_and_a_list_alone_restricts_a_server_without_a_router():
    got = plan(
        hostvars=ROUTED, routers=["r1"], server_port=30000, server_clients=["10.99.0.0/24", "gpu2.fleet.internal"]
    )
    assert elements(got["ruleset"], "api_v4") == ["10.20.0.2", "10.20.0.20", "10.99.0.0/24"]
    alone = plan(host="h2", server_port=30000, server_clients=["10.99.0.7"])
    assert elements(alone["ruleset"], "api_v4") == ["10.99.0.7"]


@pytest.mark.parametrize("routers, clients", [([], []), ([], None)])
def test_without_a_router_or_a_client_list_the_keyed_api_port_is_left_open(routers, clients):
    ruleset = plan(host="h2", routers=routers, server_port=30000, server_clients=clients)["ruleset"]
    assert "api" not in re.findall(r"set (\w+)_ports", ruleset)
    assert 30000 not in port_set(ruleset, "replica")


@pytest.mark.parametrize(
    "over, word",
    [
        ({"server_clients": "10.0.0.1"}, "fleet_firewall_server_clients to be a list"),
        ({"server_clients": ["0.0.0.0/0"]}, "fleet_firewall_server_clients"),
        ({"server_clients": ["10.0.0.1\nx"]}, "fleet_firewall_server_clients"),
        ({"routers": ["r1"], "server_port": "http"}, "llmops_server_port"),
        ({"routers": "r1", "server_port": 30000}, "sglang_routers group to be a list"),
    ],
)
def test_bad_api_client_input_is_a_one_line_refusal(over, word):
    assert word in refusal(hostvars=ROUTED, **{"server_port": 30000, **over})


def test_a_share_port_inside_the_ephemeral_range_gets_the_fleet_rule_not_the_replica_rule():
    got = plan(fanout=True, share_port=45000)
    assert 45000 not in port_set(got["ruleset"], "replica") and port_set(got["ruleset"], "share") == {45000}


def test_only_new_tcp_connections_to_the_listed_ports_are_rejected_nothing_is_dropped():
    text = plan(fanout=True, local_accounts=["sglang"])["ruleset"]
    chain, output = text.split("chain input {", 1)[1].split("chain output {", 1)
    rules = [ln.strip() for ln in chain.splitlines()[1:] if ln.strip() and ln.strip() != "}"]
    assert rules[:3] == ["type filter hook input priority filter; policy accept;", 'iif "lo" accept',
                         "ct state established,related accept"]  # fmt: skip
    for rule in rules[3:]:
        assert re.fullmatch(r"tcp dport @(replica|share)_ports .*", rule), rule
    # over loopback: only new connections to the replica's ports, only from accounts outside the list, and a reset
    local = [ln.strip() for ln in output.splitlines() if ln.strip() and ln.strip() != "}"]
    assert local[0] == "type filter hook output priority filter; policy accept;"
    match = 'oif "lo" tcp dport @replica_ports ct state new meta skuid != { "root", "sglang" }'
    assert local[1:] == [
        match + ' limit rate 6/minute log prefix "llmops_sglang replica local reject: "',
        match + " counter reject with tcp reset",
    ], local
    assert " drop" not in text and "flush" not in text and "policy drop" not in text


def test_the_file_swaps_only_its_own_table_in_one_transaction():
    lines = [ln for ln in plan()["ruleset"].splitlines() if ln and not ln.startswith(("#", "\t", "}"))]
    assert lines == ["table inet llmops_sglang", "delete table inet llmops_sglang", "table inet llmops_sglang {"]


# -- bad values: one line, before any change --------------------------------------------------------------------------
@pytest.mark.parametrize(
    "over, word",
    [
        ({"dist_init_port": 70000}, "llmops_dist_init_port"),
        ({"dist_init_port": 0}, "llmops_dist_init_port"),
        ({"dist_init_port": "20000\nchain x"}, "llmops_dist_init_port"),
        ({"dist_init_port": True}, "llmops_dist_init_port"),
        ({"fanout": True, "share_port": "8765x"}, "llmops_model_share_port"),
        ({"exempt": {**EXEMPT, "ansible_port": -1}}, "ansible_port"),
    ],
    ids=["above_65535", "zero", "newline_would_add_a_rule", "boolean", "share_port_not_a_number", "negative_ssh"],
)
def test_a_bad_port_is_a_one_line_refusal(over, word):
    assert word in refusal(**over)


@pytest.mark.parametrize("value", ["60999 32768", "32768", "a b", "0 100", "32768 70000"],
                         ids=["reversed", "one_number", "words", "zero", "above_65535"])  # fmt: skip
def test_a_bad_ephemeral_range_is_a_one_line_refusal(value):
    text = refusal(ephemeral=value)
    assert "ip_local_port_range" in text
    if value == "60999 32768":
        assert "reversed" in text and "'32768 60999'" in text


def test_a_rendezvous_on_the_ssh_port_is_refused_rather_than_cutting_ssh():
    assert "ansible_port" in refusal(dist_init_port=22)


def test_a_share_port_on_the_http_port_is_refused():
    assert "llmops_server_port" in refusal(fanout=True, share_port=30000)


@pytest.mark.parametrize(
    "address",
    ["10.0.0.1 }\n\tchain x { type filter hook input priority -1; policy drop; }", "10.0.0.1\n", "10.0.0.1; drop",
     "10.0.0.\u202e1", "", "10.0.0.256", "1.2.3.4/33", "fe80::1%eth0"],
    ids=["newline_injects_a_chain", "trailing_newline", "semicolon_adds_a_statement", "bidi_override",
         "empty_and_unresolvable", "not_an_address", "bad_prefix", "zone_index"],
)  # fmt: skip
def test_an_address_that_would_change_the_ruleset_is_refused(address):
    text = refusal(hostvars={**HOSTVARS, "h1": {"ansible_host": address}})
    assert "\n" not in text and "ansible_host of h1" in text  # the value is shown escaped, on the one line


@pytest.mark.parametrize("net", ["0.0.0.0/0", "::/0", "0.0.0.0", "::", "224.0.0.1"],
                         ids=["every_ipv4", "every_ipv6", "unspecified_v4", "unspecified_v6", "multicast"])  # fmt: skip
def test_a_catch_all_or_multicast_source_is_refused_because_it_lets_anyone_in(net):
    text = refusal(hostvars={**HOSTVARS, "h1": {"ansible_host": "10.20.0.11", "fleet_firewall_addresses": [net]}})
    assert "llmops_firewall: false" in text or "Fix the value" in text


def test_a_host_with_no_address_that_resolves_is_refused_in_one_line():
    text = refusal(hostvars={**HOSTVARS, "h1": {}})  # ansible_host unset: the inventory name h1, which resolves nowhere
    assert "'h1' does not" in text and "ansible_host" in text


def test_extra_addresses_must_be_a_list_not_a_string():
    assert "a list" in refusal(hostvars={**HOSTVARS, "h1": {"ansible_host": "10.20.0.11",
                                                            "fleet_firewall_addresses": "10.1.1.1"}})  # fmt: skip


@pytest.mark.parametrize("value", ["maybe", None, [True]], ids=["word", "null", "list"])
def test_llmops_firewall_must_be_true_or_false(value):
    assert "llmops_firewall" in refusal(enabled=value)


def test_a_topology_error_is_refused_not_ignored():
    text = refusal(topology={"error": "fleet topology: expected X; found Y.", "hosts": {}, "replicas": []})
    assert "the fleet's topology" in text and "expected X; found Y." in text


def test_the_filter_returns_the_refusal_as_one_line_never_a_traceback():
    got = fleet_firewall_filter("h0", {**HOSTVARS, "h1": {"ansible_host": "10.0.0.1\nx"}}, FLEET, settings())
    assert got["state"] is None and "\n" not in got["error"] and got["error"].startswith("fleet firewall: expected")


# -- names, IPv6 ------------------------------------------------------------------------------------------------------
def test_host_names_are_resolved_on_the_controller_to_every_address_v4_and_v6():
    hv = {"h0": {"ansible_host": "gpu1.fleet.internal"}, "h1": {"ansible_host": "gpu2.fleet.internal"}}
    text = plan(topology=fleet(["h0", "h1"]), hostvars=hv)["ruleset"]
    assert elements(text, "replica_v4") == ["10.20.0.1", "10.20.0.2"] and elements(text, "replica_v6") == ["fd20::1"]


def test_a_name_that_resolves_to_loopback_only_is_refused_with_the_real_resolver():
    """Debian maps a machine's own name to 127.0.1.1: allowing it would leave the node's real address out."""
    with pytest.raises(FirewallError) as exc:
        fw.plan("h0", fleet(["h0", "h1"]), {"h0": {"ansible_host": "localhost"}, "h1": {"ansible_host": "10.0.0.2"}},
                settings())  # fmt: skip
    assert "loopback" in str(exc.value) and "\n" not in str(exc.value)


def test_ipv6_and_ipv4_mapped_addresses_land_in_the_right_sets():
    hv = {"h0": {"ansible_host": "fd20::10"}, "h1": {"ansible_host": "::ffff:10.20.0.11"}}
    text = plan(topology=fleet(["h0", "h1"]), hostvars=hv)["ruleset"]
    assert elements(text, "replica_v4") == ["10.20.0.11"] and elements(text, "replica_v6") == ["fd20::10"]


def test_the_table_is_the_same_whatever_the_order_of_the_hosts_so_a_rerun_changes_nothing():
    a = plan(fanout=True)["ruleset"]
    reordered = {"hosts": dict(reversed(list(FLEET["hosts"].items()))), "replicas": []}
    b = plan(fanout=True, topology=reordered, hostvars=dict(reversed(list(HOSTVARS.items()))))["ruleset"]
    assert a == b


# -- when there is no table -------------------------------------------------------------------------------------------
def test_a_single_node_replica_keeps_its_tcpstore_and_ephemeral_listeners_to_itself():
    # torch's TCPStore of a single-node replica (--nccl-port unset: a port the kernel picks, every interface, for the
    # life of the server), Gloo, SGLang's message queue and pyzmq's ports: only the host's own processes (over "lo")
    got = plan(host="h2")
    assert got["state"] == "present", got
    assert elements(got["ruleset"], "replica_v4") == [] and elements(got["ruleset"], "replica_v6") == []
    ports = port_set(got["ruleset"], "replica")
    assert (
        set(range(32768, 61000)) | set(range(49152, 65536)) >= ports >= set(range(32768, 65536)) - set(EXEMPT.values())
    )
    assert not ports & set(EXEMPT.values()) and 20000 not in ports  # no rendezvous on a single node
    assert 'iif "lo" accept' in got["ruleset"]
    assert got["summary"] == (
        "h2: TCP 32768-65535 only from this host (single-node replica h2-r); over loopback only from root"
    ), got["summary"]


def test_the_loopback_accounts_are_root_the_service_account_and_the_listed_ones_or_every_account_when_open():
    got = plan(host="h2", local_accounts=["sglang", "jupyter", 1001, "1002", "sglang"])
    assert got["summary"].endswith("over loopback only from jupyter, root, sglang, 1001, 1002"), got["summary"]
    assert 'meta skuid != { "jupyter", "root", "sglang", 1001, 1002 }' in got["ruleset"]
    opened = plan(host="h0", loopback="open", local_accounts=["sglang"])
    assert "chain output" not in opened["ruleset"] and "skuid" not in opened["ruleset"]
    assert "over loopback from every local account (fleet_firewall_loopback: open)" in opened["summary"]


@pytest.mark.parametrize(
    "over",
    [
        {"local_accounts": ['sglang" } accept #']},
        {"local_accounts": ["sglang\nchain x"]},
        {"local_accounts": ["Root"]},
        {"local_accounts": [True]},
        {"local_accounts": [-1]},
        {"local_accounts": [4294967295]},
        {"local_accounts": "sglang"},
        {"loopback": "closed"},
    ],
    ids=["quote_would_add_a_rule", "newline", "upper_case", "boolean", "negative_uid", "uid_too_big", "a_string",
         "unknown_loopback_mode"],
)  # fmt: skip
def test_a_loopback_account_that_is_not_a_name_or_uid_is_a_one_line_refusal(over):
    text = refusal(**over)
    assert "fleet_firewall_l" in text, text


def test_llmops_firewall_false_removes_the_table_even_on_a_multi_node_replica():
    assert plan(enabled="false")["state"] == "absent"


# -- the real nft accepts every table, and a reload replaces the old one -----------------------------------------------
CASES = {
    "ipv4_multinode": {},
    "ipv6_and_names": {"hostvars": {**HOSTVARS, "h0": {"ansible_host": "gpu1.fleet.internal"}}},
    "fanout_and_cidr": {"fanout": True, "share_peers": ["10.99.0.0/16", "fd99::/64"]},
    "ssh_and_share_inside_the_range": {
        "fanout": True,
        "share_port": 45000,
        "exempt": {**EXEMPT, "ansible_port": 40022},
    },
    "narrow_range_below_zmq": {"ephemeral": "1024 1100"},
    "rendezvous_at_the_top": {"dist_init_port": 65530},
    "loopback_accounts": {"local_accounts": ["nobody", 1001]},
    "single_node_loopback_open": {"host": "h2", "loopback": "open"},
    "routed_api": {"hostvars": ROUTED, "routers": ["r1"], "server_port": 30000, "server_clients": ["fd99::/64"]},
}


@pytest.mark.parametrize("case", list(CASES))
def test_debians_nft_accepts_every_rendered_table(tmp_path, case):
    f = tmp_path / "t.nft"
    f.write_text(plan(**CASES[case])["ruleset"])
    proc = nft_in_throwaway_netns([NFT, "-c", "-f", str(f)])
    assert proc.returncode == 0, proc.stderr


def test_loading_twice_keeps_one_table_and_the_second_file_replaces_the_first(tmp_path):
    first, second = tmp_path / "a.nft", tmp_path / "b.nft"
    first.write_text(plan()["ruleset"])
    second.write_text(plan(hostvars={**HOSTVARS, "h1": {"ansible_host": "10.20.0.99"}})["ruleset"])
    proc = nft_in_throwaway_netns([NFT, "-f", str(first)], [NFT, "-f", str(first)], [NFT, "-f", str(second)],
                                  [NFT, "list", "ruleset"])  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("table inet llmops_sglang") == 1 and "table " not in proc.stdout.replace(
        "table inet llmops_sglang", ""
    )
    assert elements(proc.stdout, "replica_v4") == ["10.20.0.10", "10.20.0.99"]  # .11 is gone: replaced, not merged


def test_nft_refuses_what_the_renderer_refuses_so_the_check_is_not_the_only_guard(tmp_path):
    """The role's copy validates with `nft -c -f`: a table with a hand-made overlapping interval never loads."""
    f = tmp_path / "bad.nft"
    f.write_text(plan()["ruleset"].replace("elements = { 20000-20005", "elements = { 20000-20010, 20004-20005"))
    proc = nft_in_throwaway_netns([NFT, "-c", "-f", str(f)])
    assert proc.returncode != 0 and "conflicting intervals" in proc.stderr, proc.stderr


def test_address_sets_are_collapsed_to_non_overlapping_intervals():
    hv = {"h0": {"ansible_host": "10.20.0.10", "fleet_firewall_addresses": ["10.20.0.0/24", "10.20.0.11"]},
          "h1": {"ansible_host": "10.20.0.11"}}  # fmt: skip
    got = elements(plan(hostvars=hv)["ruleset"], "replica_v4")
    assert got == ["10.20.0.0/24"]
    assert all(ipaddress.ip_network(e) for e in got)
