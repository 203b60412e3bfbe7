# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The fleet's shape: which hosts form one SGLang server (a replica), each host's node rank, the head's address.

The one owner of this arithmetic (the filter plugin llmops.sglang.fleet_topology; the shared role llmops_defaults
publishes the fleet as ``llmops_fleet``, the server role adds each host's GPUs). Inputs are inventory variables
(HOST_VARIABLES; their defaults come from the caller, which has them from llmops_defaults) and, optionally, the GPUs
each host gives its replica, so it runs on the controller before any host changes:

* ``llmops_replica`` (default: the host's inventory name): hosts with the same value form ONE replica, one SGLang
  server tensor-parallel across them (``--nnodes`` = their count).
* ``gpus`` (given by the caller, e.g. the server role's resolved ``server_tp``): GPUs each host gives the replica;
  all hosts of a replica must agree, and ``--tp-size`` = GPUs x ``nnodes`` (SGLang splits tp_size evenly over the
  nodes). Without them (the router, the restart plan) the tensor-parallel fields are None.
* node rank = the host's position among its replica's hosts in the order of the hosts given (``groups['gpu_servers']``
  order, stable across runs); rank 0 is the head.
* ``--dist-init-addr`` = the head's ``ansible_host`` (else its inventory name) and ``llmops_dist_init_port``; only
  the head serves HTTP, at ``llmops_server_port``: ``url`` is ``http://<head address>:<llmops_server_port>``, the
  address a router uses.

Inconsistent input raises TopologyError with one line: what was expected, what was found, what to do.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from ansible_collections.llmops.sglang.plugins.module_utils import inventory_values

# The host variables read here (scripts/role_reads.py counts a call of the filter as a read of each). Role defaults
# are not host variables: the caller passes the ports' defaults (llmops_defaults owns them).
HOST_VARIABLES = ("llmops_replica", "llmops_server_port", "llmops_dist_init_port")
DEFAULTED = ("llmops_server_port", "llmops_dist_init_port")

REPLICA_NAME = inventory_values.NAME  # full match: "$" would also accept a name ending in a newline


class TopologyError(ValueError):
    """Inconsistent fleet input; str() is one line (expected, found, what to do)."""


def _int(host, name, value, low, high):
    if isinstance(value, bool):
        value = None
    try:
        number = int(str(value).strip())
    except (TypeError, ValueError):
        number = None
    if number is None or not low <= number <= high:
        raise TopologyError(
            "fleet topology: expected {name} of {host} to be an integer from {low} to {high}; found {value!r}. "
            "Set {name} to such a number in the inventory.".format(
                name=name, host=host, low=low, high=high, value=value
            )
        )
    return number


def _get(host_vars, name, default):
    value = host_vars.get(name) if hasattr(host_vars, "get") else None
    return default if value is None else value


def _address(host_vars, host):
    address = _get(host_vars, "ansible_host", host)
    address = address.strip() if isinstance(address, str) else address
    if address == "":
        return host
    problem = inventory_values.address_problem("ansible_host of %s" % host, address)
    if problem:  # it becomes --dist-init-addr and the router's worker URL: a newline would add lines to a unit file
        raise TopologyError("fleet topology: " + problem[0].lower() + problem[1:])
    return address


def _url_host(address):
    return "[" + address + "]" if ":" in address else address


def host_settings(host, hostvars, defaults=None, gpus=None):
    """The validated topology inputs of one host (replica, address, GPUs or None, ports)."""
    defaults = defaults or {}
    missing = [name for name in DEFAULTED if defaults.get(name) is None]
    if missing:
        raise TopologyError(
            "fleet topology: expected the defaults of {0} (from llmops_defaults); found none. Apply the filter as "
            "groups['gpu_servers'] | llmops.sglang.fleet_topology(hostvars, "
            "{{'llmops_server_port': llmops_server_port, 'llmops_dist_init_port': llmops_dist_init_port}}).".format(
                ", ".join(missing)
            )
        )
    # One lookup per host: Ansible's hostvars[host] gathers every variable of the host again on each access.
    host_vars = hostvars[host]
    replica = _get(host_vars, "llmops_replica", host)
    if not isinstance(replica, str) or not REPLICA_NAME.fullmatch(replica):
        raise TopologyError(
            "fleet topology: expected llmops_replica of {host} to be a name of letters, digits, '.', '_' or '-' "
            "(at most 63, starting with a letter or digit); found {value!r}. Set llmops_replica to such a name "
            "(the same on every host of one replica).".format(host=host, value=replica)
        )
    count = (gpus or {}).get(host)
    return {
        "replica": replica,
        "address": _address(host_vars, host),
        "gpus": None if count is None else _int(host, "server_tp", count, 1, 1024),
        "port": _int(
            host,
            "llmops_server_port",
            _get(host_vars, "llmops_server_port", defaults["llmops_server_port"]),
            1,
            65535,
        ),
        "dist_port": _int(
            host,
            "llmops_dist_init_port",
            _get(host_vars, "llmops_dist_init_port", defaults["llmops_dist_init_port"]),
            1,
            65535,
        ),
    }


def _agree(replica, hosts, settings, key, variable_what):
    variable, what = variable_what
    values = {h: settings[h][key] for h in hosts if settings[h][key] is not None}
    if len(set(values.values())) > 1:
        found = ", ".join("{0}={1}".format(h, v) for h, v in values.items())
        raise TopologyError(
            "fleet topology: expected every host of replica {replica} to have the same {variable} ({what}); found "
            "{found}. Set one {variable} for the whole replica (a group variable).".format(
                replica=replica, variable=variable, what=what, found=found
            )
        )


def fleet_topology(hosts, hostvars, defaults=None, gpus=None):
    """Group ``hosts`` (inventory order) into replicas.

    ``defaults``: the values of HOST_VARIABLES for a host that does not set them (the ports are required);
    ``gpus``: {host: GPUs the host gives its replica} for the hosts whose count is known (others: None).
    Returns ``{"hosts": {HOST: {...}}, "replicas": [{...}]}`` (see the module docstring); replicas are listed in the
    order of their first host.
    """
    if isinstance(hosts, str) or not hasattr(hosts, "__iter__"):
        raise TopologyError(
            "fleet topology: expected a list of host names (groups['gpu_servers']); found {0!r}. Apply the filter as "
            "groups['gpu_servers'] | llmops.sglang.fleet_topology(hostvars).".format(hosts)
        )
    hosts = list(hosts)
    seen = set()
    for host in hosts:
        if not isinstance(host, str) or host in seen:
            raise TopologyError(
                "fleet topology: expected each host once in the host list; found {0!r} {1}. Pass "
                "groups['gpu_servers'] as it is.".format(host, "twice" if host in seen else "(not a host name)")
            )
        seen.add(host)
        if host not in hostvars:
            raise TopologyError(
                "fleet topology: expected every host of the list in hostvars; found no variables for {0}. Pass the "
                "play's hostvars: groups['gpu_servers'] | llmops.sglang.fleet_topology(hostvars).".format(host)
            )
    if gpus is not None and not isinstance(gpus, dict):
        raise TopologyError(
            "fleet topology: expected gpus to be a mapping of host to GPUs per node; found {0!r}.".format(gpus)
        )
    settings = dict((host, host_settings(host, hostvars, defaults, gpus)) for host in hosts)

    members = {}
    order = []
    for host in hosts:
        name = settings[host]["replica"]
        if name not in members:
            members[name] = []
            order.append(name)
        members[name].append(host)

    result = {"hosts": {}, "replicas": []}
    endpoints = {}
    for name in order:
        group = members[name]
        _agree(name, group, settings, "gpus", ("server_tp", "the GPUs each node gives the replica"))
        _agree(
            name,
            group,
            settings,
            "port",
            ("llmops_server_port", "only the head serves it, a router reaches every head"),
        )
        _agree(name, group, settings, "dist_port", ("llmops_dist_init_port", "the head's rendezvous port"))
        head = group[0]
        head_set = settings[head]
        if len(group) > 1:
            addresses = {}
            for host in group:
                other = addresses.setdefault(settings[host]["address"], host)
                if other != host:
                    raise TopologyError(
                        "fleet topology: expected the hosts of multi-node replica {0} on different machines; found {1} "
                        "and {2} both at {3}. Give each host its own ansible_host, or put them in different "
                        "replicas.".format(name, other, host, settings[host]["address"])
                    )
            if head_set["dist_port"] == head_set["port"]:
                raise TopologyError(
                    "fleet topology: expected llmops_dist_init_port of replica {0} to differ from llmops_server_port; "
                    "found both {1}. Set llmops_dist_init_port to a free port other than the HTTP port.".format(
                        name, head_set["port"]
                    )
                )
        endpoint = (head_set["address"], head_set["port"])
        if endpoint in endpoints:
            raise TopologyError(
                "fleet topology: expected each replica's head at its own address and port; found replicas {0} and {1} "
                "both at {2}:{3}. Give them different ansible_host or llmops_server_port.".format(
                    endpoints[endpoint], name, head_set["address"], head_set["port"]
                )
            )
        endpoints[endpoint] = name
        nnodes = len(group)
        url = "http://{0}:{1}".format(_url_host(head_set["address"]), head_set["port"])
        dist_init_addr = "{0}:{1}".format(_url_host(head_set["address"]), head_set["dist_port"])
        per_node = head_set["gpus"]
        if per_node is None:  # a host of the replica whose GPUs are known gives them (all agree, checked above)
            per_node = next((settings[h]["gpus"] for h in group if settings[h]["gpus"] is not None), None)
        tp_size = None if per_node is None else per_node * nnodes
        for rank, host in enumerate(group):
            result["hosts"][host] = {
                "replica": name,
                "node_rank": rank,
                "nnodes": nnodes,
                "head": head,
                "dist_init_addr": dist_init_addr,
                "url": url,
                "tp_size": tp_size,
                "gpus_per_node": per_node,
                "first_rank": None if per_node is None else rank * per_node,
                "hosts": list(group),
            }
        result["replicas"].append(
            {
                "name": name,
                "hosts": list(group),
                "head": head,
                "nnodes": nnodes,
                "url": url,
                "dist_init_addr": dist_init_addr,
                "tp_size": tp_size,
            }
        )
    return result


def roll_batches(replicas, batch_size):
    """{replica name: batch index} for a rolling restart of ``replicas`` (names, in order), ``batch_size`` at a time.

    ``batch_size`` (router_roll_batch_size) is a whole number from 1 to the number of replicas; anything else is a
    one-line TopologyError (0 or a word used to end in a division error, a negative number dropped replicas from the
    roll and a number above the fleet was silently cut to it)."""
    names = list(replicas)
    size = batch_size
    if isinstance(size, str) and re.fullmatch(r"-?[0-9]+", size):
        size = int(size)
    if isinstance(size, bool) or not isinstance(size, int):
        raise TopologyError(
            "rolling restart: expected router_roll_batch_size to be a whole number of replicas restarted at once; "
            "found {0!r}. Set it to 1 (one replica at a time) or another number up to {1}.".format(
                batch_size, max(len(names), 1)
            )
        )
    if size < 1 or (names and size > len(names)):
        raise TopologyError(
            "rolling restart: expected router_roll_batch_size from 1 to {0} (the replicas in gpu_servers); found {1}. "
            "Set it to 1 (one replica at a time) or another number up to {0}.".format(max(len(names), 1), size)
        )
    return dict((name, index // size) for index, name in enumerate(names))
