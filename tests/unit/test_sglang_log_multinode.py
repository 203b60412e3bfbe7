"""The log grammar on multi-node start-ups: the rendezvous timeout (torch's texts, as public reports print them) and
NCCL's remote error after a peer died, each with what the group verdict needs (side, numbers, peer_lost)."""

from __future__ import annotations

from ansible_collections.llmops.sglang.plugins.module_utils.sglang_log import parse_text

SA = (
    "[2026-11-30 10:00:00] server_args=ServerArgs(model_path='/m', tp_size=16, nnodes=2, node_rank={r}, "
    "dist_init_addr='10.0.0.10:20000', dist_timeout=900, port=30000)\n"
)


def test_the_head_whose_store_timed_out_reports_how_many_ranks_joined():
    # text: https://github.com/Liuziyu77/Visual-RFT/issues/123 ("Timed out after 901 seconds waiting for clients")
    log = parse_text(
        SA.format(r=0)
        + "[2026-11-30 10:00:01 TP0] Init torch distributed begin.\n"
        + "[2026-11-30 10:15:02 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        + '  File "x.py", line 1, in <module>\n'
        + "torch.distributed.DistStoreError: Timed out after 901 seconds waiting for clients. 8/16 clients joined.\n"
    )
    res = log.result()
    assert res["outcome"] == "dist_init_timeout" and res["server_args"]["node_rank"] == 0
    assert log.rendezvous == {"side": "head", "seconds": 901, "joined": 8, "world": 16}
    assert "only 8 of 16 ranks joined the rendezvous within 901 s" in res["diagnosis"]


def test_a_node_that_cannot_reach_the_head_reports_the_address_it_tried():
    # text: https://github.com/sgl-project/sglang/issues/2561 (an SGLang scheduler on a node that never joined)
    log = parse_text(
        SA.format(r=1)
        + "[2026-11-30 10:00:01 TP8] Init torch distributed begin.\n"
        + "[2026-11-30 10:10:01 TP8] Scheduler hit an exception: Traceback (most recent call last):\n"
        + "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms while trying to connect "
        + "to (10.0.0.10, 20000).\n"
    )
    assert log.result()["outcome"] == "dist_init_timeout"
    assert log.rendezvous == {"side": "node", "seconds": 600, "host": "10.0.0.10", "port": 20000}
    assert log.result()["server_args"]["dist_init_addr"] == "10.0.0.10:20000"


def test_nccls_remote_error_is_marked_as_a_lost_peer():
    # text: https://github.com/deepseek-ai/DeepEP/issues/106 (ncclRemoteError after a remote process exited)
    log = parse_text(
        SA.format(r=0)
        + "[2026-11-30 10:00:01 TP0] Init torch distributed begin.\n"
        + "[2026-11-30 10:00:09 TP3] Scheduler hit an exception: Traceback (most recent call last):\n"
        + "torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited or "
        + "there was a network error, NCCL version 2.20.5\n"
        + "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting prematurely.\n"
    )
    res = log.result()
    assert res["outcome"] == "nccl_error" and res["failure"]["peer_lost"] is True
    assert "another node (or rank) of this tensor-parallel group failed or was stopped first" in res["diagnosis"]
