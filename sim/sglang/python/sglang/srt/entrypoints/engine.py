"""Launcher side: resolve the arguments, start one scheduler process per rank, wait until all are ready."""

from __future__ import annotations

import logging
import multiprocessing as mp
import multiprocessing.connection
import os
import signal
import sys

from sglang.srt.configs.model_config import load_model_config
from sglang.srt.managers.scheduler import run_scheduler_process
from sglang.srt.sim_dist import Rendezvous, open_store
from sglang.srt.sim_faults import FaultSpecError, load_faults
from sglang.srt.sim_gpu import Gpu, load_system
from sglang.srt.utils.common import CHILD_PROCESSES, configure_logger, kill_process_tree

logger = logging.getLogger(__name__)
# the listeners this launcher keeps for the life of the server (a single-node replica's TCPStore)
STORES: list = []

_state = {"phase": "launch", "handling": False}


def _launch_phase_sigquit_handler(signum, frame):
    if _state["handling"]:
        return
    _state["handling"] = True
    logger.error("Received sigquit from a child process. It usually means the child failed.")
    kill_process_tree(os.getpid())


def _launch_phase_sigterm_handler(signum, frame):
    kill_process_tree(os.getpid(), include_parent=False)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)


def _set_envs_and_config() -> None:
    signal.signal(signal.SIGQUIT, _launch_phase_sigquit_handler)
    signal.signal(signal.SIGTERM, _launch_phase_sigterm_handler)
    signal.signal(signal.SIGINT, _launch_phase_sigterm_handler)


def _group_gpus(system, server_args, dp_rank: int) -> list[Gpu]:
    """GPUs of one TP x PP group, by rank; ranks on other nodes are assumed to have this node's GPUs."""
    world = server_args.tp_size * server_args.pp_size
    per_node = max(1, world // max(1, server_args.nnodes))
    out = []
    for r in range(world):
        local = (dp_rank * world + r) if server_args.nnodes <= 1 else r % per_node
        ordinal = server_args.base_gpu_id + local * server_args.gpu_id_step
        if ordinal < len(system.gpus):
            out.append(system.gpus[ordinal])
        elif system.gpus:
            out.append(system.gpus[0])
    return out


def prepare(server_args):
    """Resolve automatic values; log ``server_args=...`` and the model-specific warnings."""
    configure_logger(server_args.log_level)
    try:
        faults = [f for f in load_faults() if f.serves(server_args.model_path)]
    except FaultSpecError as e:
        logger.error(f"Invalid SGLANG_SIM_FAULT: {e}")
        sys.exit(2)
    system = load_system()
    model_config = load_model_config(server_args.model_path, server_args.context_length, server_args.dtype)
    gpu_mem = min(g.memory_total_mib for g in system.gpus) if system.gpus else None
    capability = system.gpus[0].capability if system.gpus else None
    warnings = server_args.resolve(gpu_mem, capability, model_config)
    logger.info(f"server_args={server_args!r}")
    for w in warnings:
        logger.warning(w)
    return system, model_config, faults


def launch_subprocesses(server_args, system, model_config, faults):
    """Start the scheduler processes of this node and wait until every one of them reports ready."""
    _set_envs_and_config()
    ctx = mp.get_context("fork")
    world = server_args.tp_size * server_args.pp_size
    nnodes = max(1, server_args.nnodes)
    per_node = max(1, world // nnodes)
    if nnodes > 1:
        ranks = [(None, r) for r in range(server_args.node_rank * per_node, (server_args.node_rank + 1) * per_node)]
    elif server_args.enable_dp_attention and server_args.dp_size > 1:
        # DP attention: one TP group of tp_size ranks; rank r serves attention replica r // (tp / dp)
        # (data_parallel_controller.py launches the group once; scheduler.py prefixes " DP{dp_rank}")
        attn_tp = max(1, server_args.tp_size // server_args.dp_size)
        ranks = [(r // attn_tp, r) for r in range(world)]
    else:
        dps = range(server_args.dp_size) if server_args.dp_size > 1 else [None]
        ranks = [(d, r) for d in dps for r in range(world)]
    dp_attention = server_args.enable_dp_attention and server_args.dp_size > 1
    rendezvous = None
    if nnodes > 1:
        # torch.distributed's TCPStore at --dist-init-addr: node 0 serves it, the others connect (sim_dist.py)
        rendezvous = Rendezvous(server_args, skip_join=any(f.kind == "nojoin" for f in faults))
        rendezvous.local_ranks = len(ranks)
        rendezvous.start()
    conns, procs = [], []
    for dp_rank, r in ranks:
        replica = 0 if dp_attention else (dp_rank or 0)
        group = _group_gpus(system, server_args, replica)
        local = (replica * world + r) if nnodes <= 1 else r % per_node
        ordinal = server_args.base_gpu_id + local * server_args.gpu_id_step
        parent_conn, child_conn = ctx.Pipe(duplex=True)
        proc = ctx.Process(
            target=run_scheduler_process,
            kwargs={
                "server_args": server_args,
                "model_config": model_config,
                "system": system,
                "group_gpus": group,
                "gpu_ordinal": ordinal,
                "tp_rank": r % server_args.tp_size,
                "pp_rank": r // server_args.tp_size,
                "dp_rank": dp_rank,
                "conn": child_conn,
                "faults": faults,
                "parent_pid": os.getpid(),
                "rendezvous": rendezvous,
            },
            daemon=False,
        )
        proc.start()
        child_conn.close()
        CHILD_PROCESSES.append(proc)
        conns.append(parent_conn)
        procs.append(proc)
        if rendezvous is not None:
            rendezvous.children.append(proc.pid)

    if nnodes <= 1:
        # a single-node replica's process group: torch's TCPStore, listening on every interface while the server runs
        STORES.append(open_store(server_args.nccl_port))

    infos: list[dict | None] = [None] * len(conns)
    pending = dict(enumerate(conns))
    while pending:
        ready = multiprocessing.connection.wait(list(pending.values()))
        for i, c in list(pending.items()):
            if c not in ready:
                continue
            try:
                data = c.recv()
            except EOFError:
                logger.error(f"Rank {i} scheduler is dead. Please check if there are relevant logs.")
                procs[i].join()
                logger.error(f"Exit code: {procs[i].exitcode}")
                raise
            if data.get("status") != "ready":
                raise RuntimeError("Initialization failed. Please see the error messages above.")
            infos[i] = data
            del pending[i]
    return conns, procs, infos


def launch_dummy_health_check_server(host: str, port: int) -> None:
    """node_rank >= 1 (0.5.9 engine.py _launch_subprocesses -> utils/common.py launch_dummy_health_check_server, the
    same in 0.5.23): once its schedulers are ready, a daemon-thread server answers GET /ping, /health and
    /health_generate with an empty 200 - nothing else, no tokenizer, no OpenAI routes; uvicorn at log level warning,
    so it prints no line."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Dummy(BaseHTTPRequestHandler):
        def do_GET(self):
            code = 200 if self.path.split("?")[0] in ("/ping", "/health", "/health_generate") else 404
            self.send_response(code)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    try:
        server = ThreadingHTTPServer((host, port), Dummy)
    except OSError as e:
        logger.error(f"Dummy health check server failed to start: {e}")
        return
    threading.Thread(target=server.serve_forever, daemon=True).start()
