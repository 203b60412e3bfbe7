# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The fleet's own firewall: one nftables table owned by the collection.

The one home of this knowledge (the filter llmops.sglang.fleet_firewall adapts it to Jinja; the role fleet_firewall
writes, checks and loads what it renders; docs/security.md, *Fleet firewall*, says why each port is here):

* which TCP ports a multi-node SGLang replica opens between its nodes, read in the release the roles serve
  (sglang 0.5.9, ``sglang/srt/...`` line numbers in docs/security.md): the rendezvous (``--dist-init-addr``, torch's
  TCPStore on the head, every interface), the ZMQ ports SGLang derives from it with ``--enable-dp-attention``
  (``DP_ATTENTION_OFFSETS``), and the ports the kernel picks for NCCL, Gloo, SGLang's message queue and
  ``get_free_port()`` (the host's ``net.ipv4.ip_local_port_range``) or pyzmq picks (``ZMQ_RANDOM_PORTS``);
* who may open a connection to them: the replica's own nodes; to the model fan-out share: the fleet's hosts; to
  SGLang's HTTP API behind a router: the router hosts and ``fleet_firewall_server_clients``;
* the ruleset: ``table inet llmops_sglang`` (declared, deleted and defined again in one file, so ``nft -f`` swaps it
  in one transaction), a base chain on the input hook with policy accept that rejects (TCP reset) new connections to
  those ports from anyone else and never names another port;
* who may open one over loopback, where every local account arrives (``iif "lo"``): on the output hook, where the
  kernel knows the connecting socket's owner (``meta skuid``), a new connection to a replica's ports from an account
  outside root, SGLang's service account and ``fleet_firewall_local_accounts`` is reset (``fleet_firewall_loopback:
  open`` leaves loopback to every account).

Addresses are IP addresses, networks (CIDR) or host names resolved here, on the controller (``resolve``), so the
table holds numbers and needs no DNS at boot. Every refusal is a FirewallError of one line: what was expected, what
was found, what to do; values are shown with control characters escaped.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ipaddress
import json
import re
import socket

from ansible_collections.llmops.sglang.plugins.module_utils import inventory_values

TABLE = "llmops_sglang"
FAMILY = "inet"
# sglang 0.5.9 PortArgs.init_new with --enable-dp-attention: tokenizer (+1), detokenizer (+2), rpc (+3), metrics (+4),
# scheduler input (+5) at tcp://DIST_INIT_HOST (server_args.py:5665-5671); the DP handshake's REP socket at +13
# (DP_ATTENTION_HANDSHAKE_PORT_DELTA, server_args.py:5596; data_parallel_controller.py:305-308).
DP_ATTENTION_OFFSETS = (1, 2, 3, 4, 5, 13)
# pyzmq's Socket.bind_to_random_port(min_port=49152, max_port=65536) (pyzmq 27.1.0 zmq/sugar/socket.py:469-474), used
# by sglang 0.5.9's get_zmq_socket for the DP-attention worker ports on node 0 (data_parallel_controller.py:378).
ZMQ_RANDOM_PORTS = (49152, 65535)
# A local account as the table names it: a user name of the portable set (useradd(8); Debian's adduser NAME_REGEX is
# narrower) or a uid. nft resolves names when it loads the table, so an account that does not exist there fails the
# load (the role checks them first).
ACCOUNT_NAME = re.compile(r"[a-z_][a-z0-9_.-]{0,31}\$?\Z")
MAX_UID = 4294967294
LOOPBACK = ("restricted", "open")
TRUE_WORDS = ("true", "yes", "on", "1")
FALSE_WORDS = ("false", "no", "off", "0")


class FirewallError(ValueError):
    """Bad firewall input; str() is one line (expected, found, what to do)."""


def _refuse(text, *args, **kwargs):
    raise FirewallError("fleet firewall: " + text.format(*args, **kwargs))


def resolve(name):
    """Every address ``name`` resolves to on the controller (getaddrinfo, IPv4 and IPv6), sorted; [] when none."""
    try:
        infos = socket.getaddrinfo(name, None, 0, socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError, OSError):
        return []
    return sorted(set(info[4][0] for info in infos))


def flag(what, value):
    """A boolean from a bool or a yes/no word (an -e value arrives as a string)."""
    if isinstance(value, bool):
        return value
    word = str(value).strip().lower() if isinstance(value, (str, int)) else None
    if word in TRUE_WORDS:
        return True
    if word in FALSE_WORDS:
        return False
    return _refuse(
        "expected {0} to be true or false; found {1}. Set it to true or false.", what, inventory_values.shown(value)
    )


def port(what, value):
    """A TCP port 1-65535 from an int or a string of digits."""
    number = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif isinstance(value, str) and value.strip().isdigit() and value.strip().isascii():
        number = int(value.strip())
    if number is None or not 1 <= number <= 65535:
        _refuse(
            "expected {0} to be a TCP port (1-65535); found {1}. Set it to such a number.",
            what,
            inventory_values.shown(value),
        )
    return number


def port_range(what, value):
    """(low, high) from the two numbers of /proc/sys/net/ipv4/ip_local_port_range (or a list of two)."""
    words = value.split() if isinstance(value, str) else value
    if not isinstance(words, (list, tuple)) or len(words) != 2:
        _refuse(
            "expected {0} to be two port numbers, low and high; found {1}. Check the host's "
            "net.ipv4.ip_local_port_range (sysctl).",
            what,
            inventory_values.shown(value),
        )
    low, high = (port(what, w) for w in words)
    if low > high:
        _refuse(
            "expected {0} from low to high; found {1} (reversed). Set net.ipv4.ip_local_port_range to "
            "'{3} {2}' with sysctl on the host.",
            what,
            inventory_values.shown(value),
            low,
            high,
        )
    return low, high


def networks(what, values, resolver=resolve):
    """The networks of ``values`` (IP addresses, CIDR networks, host names resolved with ``resolver``), refused in
    one line when one is not usable as a source an nftables set can hold."""
    if isinstance(values, str) or not isinstance(values, (list, tuple)):
        _refuse(
            "expected {0} to be a list of addresses; found {1}. Give a YAML list, e.g. [10.0.0.5, 'fd00::5'].",
            what,
            inventory_values.shown(values),
        )
    out = []
    for value in values:
        if not isinstance(value, str) or inventory_values.WHITESPACE_OR_CONTROL.search(value) or not value:
            _refuse(
                "expected {0} to hold IP addresses, networks or host names; found {1}. Remove the whitespace or "
                "control characters.",
                what,
                inventory_values.shown(value),
            )
        out.extend(_value_networks(what, value, resolver))
    return out


def _value_networks(what, value, resolver):
    if "%" in value:  # a zone index (fe80::1%eth0) names an interface, not a source a set can hold
        found = None
    elif "/" in value:
        try:
            found = [ipaddress.ip_network(value, strict=False)]
        except ValueError:
            found = None
    elif inventory_values.is_ip(value):
        found = [ipaddress.ip_network(value)]
    elif inventory_values.is_host_name(value):
        addresses = [ipaddress.ip_address(a.split("%")[0]) for a in resolver(value) if inventory_values.is_ip(a)]
        if not addresses:
            _refuse(
                "expected {0} to resolve on the controller; {1} does not. Put its IP address in ansible_host "
                "(or in fleet_firewall_addresses), or fix the name.",
                what,
                inventory_values.shown(value),
            )
        usable = [a for a in addresses if not a.is_loopback]
        if not usable:
            _refuse(
                "expected {0} to resolve to the host's network address on the controller; {1} resolves to {2} "
                "only (loopback: Debian maps a machine's own name to 127.0.1.1). Put its IP address in "
                "ansible_host.",
                what,
                inventory_values.shown(value),
                ", ".join(str(a) for a in addresses),
            )
        found = [ipaddress.ip_network(a) for a in usable]
    else:
        found = None
    if found is None:
        _refuse(
            "expected {0} to hold IP addresses, networks (CIDR) or host names; found {1}. Fix the value.",
            what,
            inventory_values.shown(value),
        )
    for net in found:
        if net.prefixlen == 0 or net.network_address.is_unspecified or net.is_multicast:
            _refuse(
                "expected {0} to name hosts of the fleet; found {1}, which lets anyone in. Name the hosts' "
                "addresses, or set llmops_firewall: false to manage your own firewall.",
                what,
                inventory_values.shown(value),
            )
    return [_unmapped(net) for net in found]


def _unmapped(net):
    """An IPv4-mapped IPv6 address (::ffff:10.0.0.5) as the IPv4 address the kernel sees."""
    if net.version == 6 and net.prefixlen == 128 and net.network_address.ipv4_mapped is not None:
        return ipaddress.ip_network(net.network_address.ipv4_mapped)
    return net


def merge(ranges):
    """Sorted, merged (low, high) port ranges (nftables refuses overlapping interval elements)."""
    out = []
    for low, high in sorted(ranges):
        if out and low <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], high))
        else:
            out.append((low, high))
    return out


def subtract(ranges, ports):
    """``ranges`` without the single ``ports``."""
    out = merge(ranges)
    for p in sorted(set(ports)):
        cut = []
        for low, high in out:
            if low <= p <= high:
                if low < p:
                    cut.append((low, p - 1))
                if p < high:
                    cut.append((p + 1, high))
            else:
                cut.append((low, high))
        out = cut
    return out


def replica_ports(dist_init_port, ephemeral):
    """The TCP ports only a multi-node replica's own nodes may open: the rendezvous, the ports SGLang derives from
    it, the kernel's ephemeral range and pyzmq's random range."""
    fixed = [dist_init_port] + [dist_init_port + o for o in DP_ATTENTION_OFFSETS if dist_init_port + o <= 65535]
    return merge([(p, p) for p in fixed] + [tuple(ephemeral), ZMQ_RANDOM_PORTS])


def local_accounts(loopback, accounts):
    """None when ``loopback`` is "open" (every local account may connect over loopback), else the sorted, distinct
    accounts (user names, then uids; root always) that may: each checked to be a name or a uid, never text that
    could change the table."""
    if loopback not in LOOPBACK:
        _refuse(
            "expected fleet_firewall_loopback to be one of {0}; found {1}. Set restricted (the default) or open.",
            ", ".join(LOOPBACK),
            inventory_values.shown(loopback),
        )
    if loopback == "open":
        return None
    if not isinstance(accounts, (list, tuple)):
        _refuse(
            "expected fleet_firewall_local_accounts to be a list of account names or uids; found {0}. Write it as a "
            "YAML list, e.g. [jupyter].",
            inventory_values.shown(accounts),
        )
    names, uids = set(["root"]), set()  # root passes any table it could rewrite: always named, never an empty set
    for account in accounts:
        if isinstance(account, int) and not isinstance(account, bool) and 0 <= account <= MAX_UID:
            uids.add(account)
        elif isinstance(account, str) and account.isdigit() and int(account) <= MAX_UID:
            uids.add(int(account))
        elif isinstance(account, str) and ACCOUNT_NAME.match(account):
            names.add(account)
        else:
            _refuse(
                "expected each account allowed over loopback (root, llmops_service_user, fleet_firewall_local_accounts)"
                " to be a user name (letters, digits, _ . -) or a uid; found {0}. Fix that name.",
                inventory_values.shown(account),
            )
    return sorted(names) + sorted(uids)


def _covering(nets):
    """``nets`` sorted, without duplicates and without those inside another (nftables refuses overlapping interval
    elements); neighbours stay apart, so each host's address is still shown as itself."""
    out = []
    for net in sorted(set(nets), key=lambda n: (n.network_address, -n.prefixlen)):
        if not any(net.subnet_of(wider) for wider in out):
            out.append(net)
    return out


def _collapse(nets):
    return _covering([n for n in nets if n.version == 4]), _covering([n for n in nets if n.version == 6])


def _element(net):
    return str(net.network_address) if net.num_addresses == 1 else str(net)


def _ports_text(ranges):
    return ", ".join(str(a) if a == b else "{0}-{1}".format(a, b) for a, b in ranges)


def _set(name, kind, elements):
    lines = ["\tset {0} {{".format(name), "\t\ttype {0}".format(kind), "\t\tflags interval"]
    if elements:
        lines.append("\t\telements = {{ {0} }}".format(", ".join(elements)))
    lines.append("\t}")
    return lines


def render(host, rules):
    """The nftables file for ``host``. ``rules``: a list of {"name", "ports": [(low, high)], "sources": [networks],
    "why", "local"} (at most one per name); a rule rejects new TCP connections to its ports from anything but its
    sources and, with ``local`` (accounts from ``local_accounts``), new ones over loopback from other accounts."""
    out = [
        "#!/usr/sbin/nft -f",
        "# llmops.sglang fleet firewall of {0}: written by the role fleet_firewall, do not edit".format(host),
        "# (docs/security.md 'Fleet firewall'; llmops_firewall: false removes it). Only the TCP ports below are",
        "# touched, only for new connections from addresses outside each set; every other port and protocol is left",
        "# to your own firewall.",
    ]
    for rule in rules:
        out.append("#   {0}: {1} ({2})".format(rule["name"], _ports_text(rule["ports"]), rule["why"]))
    out += [
        "table {0} {1}".format(FAMILY, TABLE),
        "delete table {0} {1}".format(FAMILY, TABLE),
        "table {0} {1} {{".format(FAMILY, TABLE),
    ]
    chain = [
        "\tchain input {",
        "\t\ttype filter hook input priority filter; policy accept;",
        '\t\tiif "lo" accept',
        "\t\tct state established,related accept",
    ]
    for rule in rules:
        name = rule["name"]
        v4, v6 = _collapse(rule["sources"])
        out += _set(name + "_ports", "inet_service", [_ports_text([r]) for r in rule["ports"]])
        out += _set(name + "_v4", "ipv4_addr", [_element(n) for n in v4])
        out += _set(name + "_v6", "ipv6_addr", [_element(n) for n in v6])
        chain += [
            "\t\ttcp dport @{0}_ports ip saddr @{0}_v4 accept".format(name),
            "\t\ttcp dport @{0}_ports ip6 saddr @{0}_v6 accept".format(name),
            '\t\ttcp dport @{0}_ports limit rate 6/minute log prefix "llmops_sglang {0} reject: "'.format(name),
            "\t\ttcp dport @{0}_ports counter reject with tcp reset".format(name),
        ]
    out += [*chain, "\t}"]
    local = [rule for rule in rules if rule.get("local") is not None]
    if local:
        out += [
            "\tchain output {",
            "\t\ttype filter hook output priority filter; policy accept;",
        ]
        for rule in local:
            match = 'oif "lo" tcp dport @{0}_ports ct state new meta skuid != {{ {1} }}'.format(
                rule["name"], ", ".join('"{0}"'.format(a) if isinstance(a, str) else str(a) for a in rule["local"])
            )
            out += [
                '\t\t{0} limit rate 6/minute log prefix "llmops_sglang {1} local reject: "'.format(match, rule["name"]),
                "\t\t{0} counter reject with tcp reset".format(match),
            ]
        out.append("\t}")
    out.append("}")
    return "\n".join(out) + "\n"


def nccl_interface_problem(host, spec, links, own):
    """None, or one line when the address NCCL and Gloo take on ``host`` (the first IPv4 address of the interface
    ``spec`` names, server_nccl_socket_ifname; else its first global IPv6 one) is not among ``own``, the addresses the
    table lets in for ``host``: its peers' connections would come from there and be refused. ``links``: the host's
    ``ip -j addr show``. Only a plain interface name or prefix (``eth0``, ``=ib0``, ``ib``) is checked; a list or an
    exclusion (``^lo,docker``) leaves NCCL's choice, which is not known here."""
    if not isinstance(spec, str) or not spec.strip() or any(c in spec for c in "^,") or not links:
        return None
    exact, name = spec.startswith("="), spec.lstrip("=").strip()
    try:
        found = json.loads(links)
    except ValueError:
        return None
    match = [
        link
        for link in found
        if isinstance(found, list)
        if isinstance(link, dict)
        and (link.get("ifname") == name if exact else str(link.get("ifname", "")).startswith(name))
    ]
    if not match:
        return None  # NCCL refuses an interface that does not exist; that is the server role's to report
    infos = [a for a in match[0].get("addr_info") or [] if isinstance(a, dict)]
    chosen = [a for a in infos if a.get("family") == "inet"] or [
        a for a in infos if a.get("family") == "inet6" and a.get("scope") == "global"
    ]
    if not chosen or not inventory_values.is_ip(str(chosen[0].get("local"))):
        return None
    address = ipaddress.ip_address(chosen[0]["local"])
    if any(address in net for net in own):
        return None
    return (
        "fleet firewall: expected the address NCCL and Gloo use on {0} ({1} on {2}, server_nccl_socket_ifname) among "
        "the addresses the table lets in from {0} ({3}); found it missing, so the other nodes would refuse its "
        "connections. Add {1} to fleet_firewall_addresses of {0}, or set llmops_firewall: false.".format(
            host, address, match[0].get("ifname"), ", ".join(str(n) for n in own)
        )
    )


def _host_networks(host, hostvars, resolver):
    got = hostvars[host] if host in hostvars else {}
    get = got.get if hasattr(got, "get") else (lambda name, default=None: default)
    address = get("ansible_host", None)
    address = host if address is None or (isinstance(address, str) and not address.strip()) else address
    extra = get("fleet_firewall_addresses", None)
    nets = networks("ansible_host of {0}".format(host), [address], resolver)
    if extra is not None:
        nets += networks("fleet_firewall_addresses of {0}".format(host), extra, resolver)
    return nets


def plan(host, fleet, hostvars, settings, resolver=resolve):
    """What the role does on ``host``: {"state": "present" | "absent", "ruleset": text or "", "summary": one line}.

    ``fleet``: llmops_fleet (module_utils/sglang_topology.py); ``hostvars``: every host's variables (ansible_host,
    fleet_firewall_addresses); ``settings``: enabled (llmops_firewall), fanout (model_fleet_fanout), share_peers
    (model_fleet_peer_addresses), dist_init_port, share_port, exempt ({variable: port} never in the replica's and
    the share's ranges: SSH, the HTTP API, the router's ports), ephemeral (the host's ip_local_port_range), routers
    (the sglang_routers hosts) and server_clients (fleet_firewall_server_clients): with either, the HTTP API
    (server_port) takes new connections only from the routers' and those addresses.
    """
    if not flag("llmops_firewall", settings.get("enabled")):
        return {"state": "absent", "ruleset": "", "summary": "{0}: llmops_firewall is false: no table".format(host)}
    if not isinstance(fleet, dict) or not isinstance(fleet.get("hosts"), dict):
        _refuse("expected llmops_fleet (the fleet's topology); found {0}.", inventory_values.shown(fleet))
    if fleet.get("error"):
        _refuse("expected the fleet's topology to name each replica's nodes; found its refusal: {0}", fleet["error"])
    node = fleet["hosts"].get(host) or {"nnodes": 1, "hosts": [host], "replica": host}
    multinode = int(node.get("nnodes") or 1) > 1
    fanout = flag("model_fleet_fanout", settings.get("fanout", False))
    exempt = dict((name, port(name, value)) for name, value in sorted((settings.get("exempt") or {}).items()))
    local = local_accounts(settings.get("loopback", "restricted"), settings.get("local_accounts") or [])
    share_port = port("llmops_model_share_port", settings.get("share_port")) if fanout else None
    rules, summary = [], []
    if not multinode:
        # A single-node replica's own listeners - torch's TCPStore (--nccl-port unset: a port the kernel picks, on
        # every interface, for the life of the server), Gloo, SGLang's message queue, pyzmq's random ports - serve
        # its own processes only, which reach them over loopback (a connection to the host's own address arrives on
        # "lo" too): nobody else may open one.
        ephemeral = port_range("net.ipv4.ip_local_port_range of {0}".format(host), settings.get("ephemeral"))
        ranges = subtract(
            merge([tuple(ephemeral), ZMQ_RANDOM_PORTS]), list(exempt.values()) + ([share_port] if fanout else [])
        )
        rules.append(
            {
                "name": "replica",
                "ports": ranges,
                "sources": [],
                "local": local,
                "why": "TCPStore, NCCL/Gloo/ZMQ ephemeral ports of single-node replica {0}: this host only".format(
                    node.get("replica", host)
                ),
            }
        )
        summary.append(
            "TCP {0} only from this host (single-node replica {1})".format(
                _ports_text(ranges), node.get("replica", host)
            )
        )
    if multinode:
        dist = port("llmops_dist_init_port", settings.get("dist_init_port"))
        for name, value in sorted(exempt.items()) + ([("llmops_model_share_port", share_port)] if fanout else []):
            if value == dist:
                _refuse(
                    "expected llmops_dist_init_port ({0}) to differ from {1}, a port the firewall must leave open to "
                    "others; found both {0}. Set llmops_dist_init_port to another free port.",
                    dist,
                    name,
                )
        ephemeral = port_range("net.ipv4.ip_local_port_range of {0}".format(host), settings.get("ephemeral"))
        ranges = subtract(replica_ports(dist, ephemeral), list(exempt.values()) + ([share_port] if fanout else []))
        sources = []
        for member in node["hosts"]:
            sources += _host_networks(member, hostvars, resolver)
        problem = nccl_interface_problem(
            host, settings.get("nccl_ifname"), settings.get("links"), _host_networks(host, hostvars, resolver)
        )
        if problem:
            raise FirewallError(problem)
        rules.append(
            {
                "name": "replica",
                "ports": ranges,
                "sources": sources,
                "local": local,
                "why": "rendezvous, SGLang's DP-attention ports, NCCL/Gloo/ZMQ ephemeral ports: replica {0} "
                "only".format(node.get("replica", host)),
            }
        )
        summary.append(
            "TCP {0} only from replica {1} ({2} node(s))".format(
                _ports_text(ranges), node.get("replica", host), len(node["hosts"])
            )
        )
    if fanout:
        for name, value in sorted(exempt.items()):
            if value == share_port:
                _refuse(
                    "expected llmops_model_share_port ({0}) to differ from {1}; found both {0}. Set "
                    "llmops_model_share_port to another free port.",
                    share_port,
                    name,
                )
        sources = []
        for member in sorted(fleet["hosts"]):
            sources += _host_networks(member, hostvars, resolver)
        sources += networks("model_fleet_peer_addresses", settings.get("share_peers") or [], resolver)
        rules.append(
            {
                "name": "share",
                "ports": [(share_port, share_port)],
                "sources": sources,
                "why": "the model fan-out share: the fleet's hosts only",
            }
        )
        summary.append(
            "TCP {0} (model share) only from the fleet's {1} host(s)".format(share_port, len(fleet["hosts"]))
        )
    routers, clients = settings.get("routers") or [], settings.get("server_clients") or []
    if routers or clients:
        # SGLang's HTTP API (keyed) behind a router: the router hosts send it every request with the replica's key
        # over plain HTTP, so the port takes new connections only from them and from the clients the inventory names
        # (a scraper of /metrics, a monitoring host); the host's own processes reach it over loopback.
        if isinstance(routers, str) or not isinstance(routers, (list, tuple)):
            _refuse(
                "expected the sglang_routers group to be a list of hosts; found {0}.", inventory_values.shown(routers)
            )
        api = port("llmops_server_port", settings.get("server_port"))
        sources = []
        for router in sorted(routers):
            sources += _host_networks(router, hostvars, resolver)
        sources += networks("fleet_firewall_server_clients", clients, resolver)
        rules.append(
            {
                "name": "api",
                "ports": [(api, api)],
                "sources": sources,
                "why": "SGLang's HTTP API: the router host(s) and fleet_firewall_server_clients only",
            }
        )
        summary.append(
            "TCP {0} (SGLang's API) only from {1} router host(s) and {2} listed client(s)".format(
                api, len(routers), len(clients)
            )
        )
    summary.insert(
        1,
        "over loopback only from {0}".format(", ".join(str(a) for a in local))
        if local is not None
        else "over loopback from every local account (fleet_firewall_loopback: open)",
    )
    return {"state": "present", "ruleset": render(host, rules), "summary": "{0}: {1}".format(host, "; ".join(summary))}
