"""Scheduler process (one per TP/PP rank), simulated."""

from __future__ import annotations

import logging
import os
import signal
import time

from sglang.srt import sim_gpu
from sglang.srt.model_executor.model_runner import ModelRunner
from sglang.srt.sim_dist import remote_error_text
from sglang.srt.sim_faults import FaultInjector
from sglang.srt.utils.common import (
    configure_logger,
    get_exception_traceback,
    kill_itself_when_parent_died,
    set_process_name,
    sim_sleep,
)

logger = logging.getLogger(__name__)


def rank_prefix(server_args, dp_rank: int | None, pp_rank: int, tp_rank: int) -> str:
    """0.5.6+ order: DP PP ATTN_CP MOE_DP TP EP; a tag only when that dimension is > 1."""
    prefix = ""
    if dp_rank is not None:
        prefix += f" DP{dp_rank}"
    if server_args.pp_size > 1:
        prefix += f" PP{pp_rank}"
    if server_args.tp_size > 1:
        prefix += f" TP{tp_rank}"
    if server_args.ep_size > 1:
        prefix += f" EP{tp_rank % server_args.ep_size}"
    return prefix


class Scheduler:
    def __init__(self, *, server_args, model_config, conn, faults, **runner_kwargs):
        self.server_args = server_args
        self.model_config = model_config
        self.conn = conn
        self.faults = faults
        self.tp_rank = runner_kwargs["tp_rank"]
        self.pp_rank = runner_kwargs["pp_rank"]
        self.model_runner = ModelRunner(
            server_args=server_args, model_config=model_config, faults=faults, **runner_kwargs
        )
        # The triton kernels are imported (and their launch configuration computed) once the device is set.
        from sglang.srt.layers.attention.triton_ops import extend_attention

        self.extend_attention = extend_attention
        plan = self.model_runner.plan
        self.max_total_num_tokens = plan.max_total_num_tokens
        self.max_running_requests = plan.max_running_requests
        self.max_prefill_tokens = server_args.max_prefill_tokens
        self.chunked_prefill_size = server_args.chunked_prefill_size
        self.context_len = model_config.context_len
        self.is_first = self.tp_rank == 0 and self.pp_rank == 0
        avail = self.model_runner.mem.free_after_graph / (1 << 30)
        if self.is_first:
            logger.info(
                f"max_total_num_tokens={self.max_total_num_tokens}, chunked_prefill_size={self.chunked_prefill_size}, "
                f"max_prefill_tokens={self.max_prefill_tokens}, max_running_requests={self.max_running_requests}, "
                f"context_len={self.context_len}, available_gpu_mem={avail:.2f} GB"
            )

    def info(self) -> dict:
        m = self.model_runner.mem
        gib = 1 << 30
        return {
            "status": "ready",
            "max_total_num_tokens": self.max_total_num_tokens,
            "max_running_requests": self.max_running_requests,
            "max_req_input_len": self.context_len - 1,
            "memory_usage": {
                "weight": round(m.weights / gib, 2),
                "kvcache": round(m.pool_total / gib, 2),
                "token_capacity": self.max_total_num_tokens,
                "graph": round((m.free_after_pool - m.free_after_graph) / gib, 2),
            },
            "available_gpu_mem": round(m.free_after_graph / gib, 2),
            "load_weights_time": self.model_runner.timing.get("load_weights", 0.0),
        }

    def _forward_extend(self, num_tokens: int) -> None:
        shape = self.model_config.shape
        if shape.attention == "mha":
            self.extend_attention.extend_attention_fwd(shape.head_dim, shape.v_head_dim)
        else:
            self.extend_attention.extend_attention_fwd(
                shape.qk_nope_head_dim + shape.qk_rope_head_dim, shape.v_head_dim, smem_head_dim=shape.qk_nope_head_dim
            )
        sim_sleep(0.02)

    def event_loop(self) -> None:
        while True:
            try:
                req = self.conn.recv()
            except EOFError:
                return
            kind = req.get("type")
            if kind == "ready":
                self.faults.at("ready")
                continue
            if kind == "generate":
                if self.is_first:
                    logger.info(
                        f"Prefill batch, #new-seq: 1, #new-token: {req['input_len']}, #cached-token: 0, "
                        f"token usage: 0.00, #running-req: 0, #queue-req: 0"
                    )
                self._forward_extend(req["input_len"])
                self.conn.send({"ok": True, "rid": req.get("rid")})
            elif kind == "health":
                self.conn.send({"ok": True, "rid": req.get("rid")})


def run_scheduler_process(
    *,
    server_args,
    model_config,
    system,
    group_gpus,
    gpu_ordinal,
    tp_rank,
    pp_rank,
    dp_rank,
    conn,
    faults,
    parent_pid,
    rendezvous=None,
):
    kill_itself_when_parent_died()
    prefix = rank_prefix(server_args, dp_rank, pp_rank, tp_rank)
    set_process_name("sglang::scheduler" + prefix.replace(" ", "_"))
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGQUIT, signal.SIG_DFL)
    configure_logger(server_args.log_level, prefix=prefix)
    injector = FaultInjector(faults, rank=pp_rank * server_args.tp_size + tp_rank)
    if rendezvous is not None:
        # a peer node died (sim_dist.py): NCCL's remote error surfaces in whatever this rank is doing
        def peer_lost(signum, frame):
            raise sim_gpu.DistBackendError(remote_error_text(rendezvous.peer_name(), rendezvous.port))

        signal.signal(signal.SIGUSR1, peer_lost)
    try:
        injector.at("started")
        scheduler = Scheduler(
            server_args=server_args,
            model_config=model_config,
            conn=conn,
            faults=injector,
            system=system,
            group_gpus=group_gpus,
            gpu_ordinal=gpu_ordinal,
            tp_rank=tp_rank,
            pp_rank=pp_rank,
            dp_rank=dp_rank,
            family=server_args.sim_log_format,
            rendezvous=rendezvous,
        )
        conn.send(scheduler.info())
        scheduler.event_loop()
    except Exception:
        traceback = get_exception_traceback()
        logger.error(f"Scheduler hit an exception: {traceback}")
        try:
            os.kill(parent_pid, signal.SIGQUIT)
        except ProcessLookupError:
            pass
        time.sleep(5)  # the parent kills the whole process tree
