"""The stand-in across two simulated nodes (two launchers on loopback): a real TCP rendezvous at --dist-init-addr,
global rank numbers per node, only node 0 serving the API, and torch's own texts when a node never joins or dies."""

from __future__ import annotations

import re
import urllib.error
import urllib.request

import listeners
from conftest import free_port
from events import GUARD

READY = "The server is fired up and ready to roll!"
LLAMA = "llama3-8b"


def ranks_with(log: str, text: str) -> set[str]:
    return {
        m.group(1) for m in re.finditer(r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d (TP\d+)\] (.*)", log) if text in m.group(2)
    }


def pair(launch, models, *, timeout=int(GUARD), node1_fault="", extra=()):
    # --dist-timeout: how long the head waits for the other node. A hang guard where both nodes start (they meet
    # within a second or two); the never-joins case sets its own 3 s, whose expiry is the outcome it checks.
    dist = free_port()
    common = ["--model-path", str(models[LLAMA]), "--tp-size", "16", "--nnodes", "2"]
    common += ["--dist-init-addr", f"127.0.0.1:{dist}", "--dist-timeout", str(timeout), *extra]
    head = launch([*common, "--node-rank", "0"])
    node1 = launch([*common, "--node-rank", "1"], env={"SGLANG_SIM_FAULT": node1_fault})
    head.dist_port = dist
    return head, node1


def status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:  # a hang guard on a loopback answer
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


def test_two_nodes_rendezvous_and_log_global_ranks_only_the_head_serves_the_api(launch, models):
    head, node1 = pair(launch, models)
    assert head.wait_for(READY), head.log
    assert node1.wait_for("Capture cuda graph end"), node1.log
    assert ranks_with(head.log, "Load weight end") == {f"TP{r}" for r in range(8)}
    assert ranks_with(node1.log, "Load weight end") == {f"TP{r}" for r in range(8, 16)}
    assert READY not in node1.log
    # the head's rendezvous (torch's TCPStore at --dist-init-addr) stays listening while the server runs
    found = listeners.of_process(head.proc.pid)
    assert head.dist_port in {p for _, p, _ in found}, found
    assert status(f"http://127.0.0.1:{head.port}/v1/models") == 200
    # node_rank >= 1: SGLang's dummy health server (200 on /health), no API
    assert status(f"http://127.0.0.1:{node1.port}/health") == 200
    assert status(f"http://127.0.0.1:{node1.port}/v1/models") == 404
    # the head notices a peer that dies: NCCL's remote error, and it exits
    node1.stop()
    assert head.wait_exit() != 0
    assert "ncclRemoteError: A call failed possibly due to a network error or a remote process" in head.log


def test_a_capture_oom_on_node_1_fails_there_first_and_the_head_sees_the_remote_error(launch, models):
    head, node1 = pair(launch, models, node1_fault="oom@cuda_graph_capturing rank=9")
    assert node1.wait_exit() != 0, node1.log
    assert head.wait_exit() != 0, head.log
    assert "[" in node1.log and "TP9] Scheduler hit an exception" in node1.log
    assert "torch.OutOfMemoryError: CUDA out of memory" in node1.log
    assert "Capture cuda graph failed" in node1.log
    assert "ncclRemoteError" in head.log and "OutOfMemoryError" not in head.log


def test_a_node_that_never_joins_times_out_with_torchs_store_and_client_texts(launch, models):
    head, node1 = pair(launch, models, timeout=3, node1_fault="nojoin")
    assert head.wait_exit() != 0, head.log
    assert node1.wait_exit() != 0, node1.log
    assert (
        "torch.distributed.DistStoreError: Timed out after 4 seconds waiting for clients. 8/16 clients joined."
        in head.log
    )
    assert re.search(
        r"torch\.distributed\.DistNetworkError: The client socket has timed out after 3000ms while trying to connect "
        r"to \(127\.0\.0\.1, \d+\)\.",
        node1.log,
    ), node1.log
    assert "Load weight begin" not in head.log + node1.log
