"""Which node of a multi-node SGLang server failed first (plugins/module_utils/sglang_group.py): the cause is named,
not the consequences the other nodes log after it."""

from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.module_utils.sglang_group import group_verdict
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_topology import fleet_topology

HV = {
    "n0": {"ansible_host": "10.0.0.10", "llmops_replica": "big"},
    "n1": {"ansible_host": "10.0.0.11", "llmops_replica": "big"},
    "solo": {"ansible_host": "10.0.0.12"},
}
TOPO = fleet_topology(
    list(HV), HV, {"llmops_server_port": 30000, "llmops_dist_init_port": 20000}, {"n0": 8, "n1": 8, "solo": 8}
)


def failed(outcome, t, rank, phase="cuda_graph_capturing", **extra):
    failure = {"outcome": outcome, "t": t, "rank": rank, "phase": phase, "line": "..."}
    failure.update(extra.pop("failure", {}))
    return dict(outcome=outcome, phase=phase, failure=failure, diagnosis=f"diag of {outcome}", **extra)


def test_a_ready_group_is_ready_and_single_node_replicas_are_left_alone():
    v = group_verdict(TOPO, {"n0": {"outcome": "ready"}, "n1": {"outcome": "ready"}, "solo": None})
    assert list(v) == ["big"] and v["big"]["ready"] is True


def test_a_capture_oom_on_node_1_is_named_even_when_the_heads_remote_error_has_the_same_second():
    results = {
        "n0": failed("nccl_error", 100.0, "TP3", failure={"peer_lost": True}),
        "n1": failed("oom_cuda_graph", 100.0, "TP9"),
    }
    v = group_verdict(TOPO, results)["big"]
    assert (v["host"], v["node_rank"], v["rank"], v["outcome"]) == ("n1", 1, "TP9", "oom_cuda_graph")
    assert v["diagnosis"].startswith("node n1 (node rank 1), rank TP9 failed first (oom_cuda_graph")
    assert "n0 (node rank 0): nccl_error" in v["diagnosis"]


def test_between_two_causes_the_earlier_log_timestamp_wins():
    results = {"n0": failed("crash", 105.0, "TP1"), "n1": failed("oom_cuda_graph", 101.0, "TP12")}
    assert group_verdict(TOPO, results)["big"]["host"] == "n1"
    results = {"n0": failed("crash", 99.0, "TP1"), "n1": failed("oom_cuda_graph", 101.0, "TP12")}
    assert group_verdict(TOPO, results)["big"]["host"] == "n0"


def test_a_node_whose_client_timed_out_never_joined():
    results = {
        "n0": failed("dist_init_timeout", 50.0, "TP0", "started", rendezvous={"side": "head", "seconds": 30}),
        "n1": failed("dist_init_timeout", 49.0, "TP8", "started", rendezvous={"side": "node", "seconds": 30}),
    }
    v = group_verdict(TOPO, results)["big"]
    assert v["never_joined"] == ["n1"] and v["outcome"] == "dist_init_timeout"
    assert v["diagnosis"].startswith(
        "node n1 (rank 1) never joined the rendezvous at 10.0.0.10:20000 within the distributed-init timeout (30 s)"
    )


def test_a_node_without_any_result_never_joined_when_the_heads_store_timed_out():
    results = {
        "n0": failed("dist_init_timeout", 50.0, "TP0", "started", rendezvous={"side": "head", "seconds": 30}),
        "n1": None,
    }
    v = group_verdict(TOPO, results)["big"]
    assert v["never_joined"] == ["n1"] and v["host"] == "n1"
    assert "n0 (node rank 0): dist_init_timeout" in v["diagnosis"]


def test_a_failure_beats_a_node_still_waiting():
    results = {"n0": {"outcome": "incomplete", "phase": "cuda_graph_capturing"}, "n1": failed("crash", 10.0, "TP15")}
    assert group_verdict(TOPO, results)["big"]["rank_number"] == 15
