# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""One verdict per multi-node SGLang server from its nodes' readiness results: which node and rank failed FIRST.

Every node of a tensor-parallel group waits on its own log (sglang_server); when one node fails, the others usually
fail after it with a consequence - NCCL's "remote process exited" when a peer died, the head's rendezvous timeout
"J/W clients joined" when a node is missing. This module orders the failures so the cause is named, not its echo:

1. a node that never joined the rendezvous (its own "client socket has timed out ... (HEAD, PORT)", or no result at
   all while the head's store timed out) is the cause: "node X (rank N) never joined the rendezvous at ADDR:PORT";
2. otherwise the earliest failure by its log timestamp among the failures that are not consequences (a capture OOM,
   a crash), then the consequences (a peer lost, a head whose store timed out), then timeouts and stalls.

The topology (sglang_topology.fleet_topology) names the nodes and ranks; results are the sglang_server results of
each host (None when the host has none: unreachable, or it failed before waiting).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

CONSEQUENCE = "consequence"


def _rank_number(rank):
    digits = "".join(ch for ch in str(rank or "") if ch.isdigit())
    return int(digits) if digits else None


def _kind(result):
    """(order, label) of one node's result: lower order = more likely the cause."""
    if result is None:
        return 3, "no_result"
    outcome = result.get("outcome")
    failure = result.get("failure") or {}
    if outcome == "ready":
        return 9, "ready"
    if outcome == "dist_init_timeout" and (result.get("rendezvous") or {}).get("side") == "node":
        return 0, "never_joined"
    if outcome in ("incomplete", "stalled"):
        return 5, outcome
    if failure.get("peer_lost") or outcome == "dist_init_timeout":
        return 4, CONSEQUENCE
    return 1, "cause"


def group_verdict(topology, results):
    """{replica name: verdict} for the replicas of more than one node.

    verdict: ``ready`` (bool), ``host``/``node_rank``/``rank``/``outcome``/``phase`` of the node that failed first,
    ``never_joined`` (hosts), ``diagnosis`` (one paragraph naming the node and rank), ``result`` (that node's result,
    for the retry arithmetic) and ``nodes`` ({host: outcome}).
    """
    verdicts = {}
    for replica in topology["replicas"]:
        if replica["nnodes"] < 2:
            continue
        hosts = replica["hosts"]
        node_results = dict((h, results.get(h)) for h in hosts)
        outcomes = dict((h, (r or {}).get("outcome", "no result")) for h, r in node_results.items())
        if all(o == "ready" for o in outcomes.values()):
            verdicts[replica["name"]] = {"ready": True, "nodes": outcomes, "diagnosis": ""}
            continue
        head_result = node_results[replica["head"]] or {}
        head_store_timeout = (head_result.get("rendezvous") or {}).get("side") == "head"
        never = [h for h in hosts if _kind(node_results[h])[1] == "never_joined"]
        if head_store_timeout:
            never += [h for h in hosts if h != replica["head"] and node_results[h] is None and h not in never]
        ranked = sorted(
            hosts,
            key=lambda h: (
                0 if h in never else _kind(node_results[h])[0],
                ((node_results[h] or {}).get("failure") or {}).get("t") or float("inf"),
                topology["hosts"][h]["node_rank"],
            ),
        )
        first = ranked[0]
        info = topology["hosts"][first]
        result = node_results[first] or {}
        failure = result.get("failure") or {}
        rank = failure.get("rank")
        others = "; ".join(
            "%s (node rank %d): %s" % (h, topology["hosts"][h]["node_rank"], outcomes[h]) for h in hosts if h != first
        )
        if never:
            seconds = (head_result.get("rendezvous") or result.get("rendezvous") or {}).get("seconds")
            names = ", ".join(
                "node %s (rank %d)" % (h, topology["hosts"][h]["node_rank"]) for h in sorted(never, key=hosts.index)
            )
            diagnosis = (
                "%s never joined the rendezvous at %s%s. Check that SGLang runs there with the same "
                % (
                    names,
                    replica["dist_init_addr"],
                    " within the distributed-init timeout (%s s)" % seconds if seconds else "",
                )
                + (
                    "--nnodes/--dist-init-addr, that the head's port %s is open between the nodes, and the NCCL/Gloo "
                    % (replica["dist_init_addr"].rsplit(":", 1)[1])
                )
                + "interface (server_nccl_socket_ifname). Other nodes: %s." % others
            )
            outcome = "dist_init_timeout"
        else:
            outcome = result.get("outcome") or "no result"
            where = "node %s (node rank %d)%s" % (
                first,
                info["node_rank"],
                ", rank %s" % rank if rank else "",
            )
            diagnosis = "%s failed first (%s in phase %s): %s The other nodes followed: %s." % (
                where,
                outcome,
                result.get("phase") or failure.get("phase"),
                " ".join(str(result.get("diagnosis") or result.get("msg") or "no result from this host").split()),
                others,
            )
        verdicts[replica["name"]] = {
            "ready": False,
            "host": first,
            "node_rank": info["node_rank"],
            "rank": rank,
            "rank_number": _rank_number(rank),
            "outcome": outcome,
            "phase": result.get("phase"),
            "never_joined": sorted(never, key=hosts.index),
            "diagnosis": diagnosis,
            "result": result,
            "nodes": outcomes,
        }
    return verdicts
