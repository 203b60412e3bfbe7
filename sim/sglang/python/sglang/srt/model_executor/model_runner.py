"""ModelRunner (simulated): torch.distributed init, weight loading, KV pool, CUDA graphs — with SGLang's log lines."""

from __future__ import annotations

import logging
import time

from sglang.srt import sim_dist, sim_gpu, sim_memory
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool, NSATokenToKVPool
from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner
from sglang.srt.model_loader.loader import DefaultModelLoader, find_checkpoint
from sglang.srt.sim_faults import NCCL_ERROR_TEXT
from sglang.srt.sim_memory import RESERVED_UNALLOCATED_MIB, GiB, GpuMem, MiB, Overheads
from sglang.srt.utils.common import FAMILY_0514, sim_sleep, write_stderr

logger = logging.getLogger(__name__)

NCCL_VERSION = "2.27.5"


class ModelRunner:
    def __init__(
        self,
        *,
        server_args,
        model_config,
        system,
        group_gpus,
        gpu_ordinal: int,
        tp_rank: int,
        pp_rank: int,
        dp_rank: int | None,
        faults,
        family: str,
        rendezvous=None,
    ):
        self.server_args = server_args
        self.model_config = model_config
        self.system = system
        self.group_gpus = group_gpus
        self.gpu_ordinal = gpu_ordinal
        self.tp_rank = tp_rank
        self.pp_rank = pp_rank
        self.dp_rank = dp_rank
        self.tp_size = server_args.tp_size
        self.pp_size = server_args.pp_size
        self.rank = pp_rank * self.tp_size + tp_rank
        self.faults = faults
        self.family = family
        self.rendezvous = rendezvous
        self.overheads = Overheads.from_env()
        self.plan: sim_memory.GroupPlan | None = None
        self.mem: sim_memory.RankMemory | None = None
        self.graph_runner = None
        self.timing = {}
        self.draft_layers = self._draft_layers()

        sim_gpu.set_device(gpu_ordinal)
        self.gpu = system.gpus[gpu_ordinal]
        self.init_torch_distributed()
        self.load_model()
        self.init_memory_pool()
        self.init_device_graphs()
        if self.draft_layers:
            self.init_draft_runner()

    # -------------------------------------------------------------------------------------------------------------
    def _phase(self, name: str) -> None:
        self.faults.at(name)
        if name not in ("started", "cuda_graph_capturing") and self.faults.find("nccl", name) is not None:
            raise sim_gpu.DistBackendError(NCCL_ERROR_TEXT)

    def _world(self) -> int:
        return self.tp_size * self.pp_size

    def _draft_layers(self) -> int:
        """Layers of the draft model: the draft config's num_nextn_predict_layers, else its num_hidden_layers."""
        sa = self.server_args
        if sa.speculative_algorithm in (None, "NGRAM"):
            return 0
        path = sa.speculative_draft_model_path or self.model_config.model_path
        if path == self.model_config.model_path:
            cfg = self.model_config.hf_config
        else:
            import json
            import os

            with open(os.path.join(path, "config.json"), encoding="utf-8") as fh:
                cfg = json.load(fh)
        return int(cfg.get("num_nextn_predict_layers") or cfg.get("num_hidden_layers") or 1)

    def _attn_tp_size(self) -> int:
        sa = self.server_args
        return self.tp_size // sa.dp_size if sa.enable_dp_attention and sa.dp_size > 1 else self.tp_size

    def init_torch_distributed(self) -> None:
        tic = time.monotonic()
        logger.info("Init torch distributed begin.")
        sim_sleep(0.3 + 0.002 * self.rank)
        if self.rendezvous is not None:
            self._rendezvous()
        if self.faults.find("nccl", "started") is not None:
            raise sim_gpu.DistBackendError(NCCL_ERROR_TEXT)
        if self._world() > 1 and self.tp_rank == 0 and self.pp_rank == 0:
            logger.info("sglang is using nccl==%s", NCCL_VERSION)
        if self.tp_size > 2 and not self.system.nvswitch and not self.server_args.disable_custom_all_reduce:
            logger.warning(
                "Custom allreduce is disabled because it's not supported on more than two PCIe-only GPUs. "
                "To silence this warning, specify disable_custom_all_reduce=True explicitly."
            )
        ov = self.overheads
        nccl = int(ov.nccl_mib * MiB) if self._world() > 1 else 0
        frees = [g.total_bytes - g.used_bytes - int(ov.cuda_context_mib * MiB) - nccl for g in self.group_gpus]
        local = frees[self.rank]
        logger.info(
            f"Init torch distributed ends. elapsed={time.monotonic() - tic:.2f} s, mem usage={nccl / GiB:.2f} GB"
        )
        min_per_gpu_memory = round(min(frees) / GiB, 2)
        local_gpu_memory = round(local / GiB, 2)
        if min_per_gpu_memory < local_gpu_memory * 0.9:
            msg = "The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
            msg += f"{min_per_gpu_memory=}, {local_gpu_memory=}, {local_gpu_memory * 0.9=}"
            logger.warning(msg)

    def _rendezvous(self) -> None:
        """Multi-node: wait for every node at --dist-init-addr (sim_dist.py); fail with torch's texts."""
        rdv = self.rendezvous
        status = rdv.wait()
        if status == sim_dist.JOINED:
            return
        if status == sim_dist.LOST:
            raise sim_gpu.DistBackendError(sim_dist.remote_error_text(rdv.peer_name(), rdv.port))
        if rdv.node_rank == 0:
            if self.rank == 0:  # the rank that hosts the store reports it; the others wait in it
                raise sim_gpu.DistStoreError(
                    sim_dist.store_timeout_text(
                        rdv.timeout, rdv.joined.value * (self._world() // rdv.nnodes), self._world()
                    )
                )
            from sglang.srt.sim_faults import hang_forever

            hang_forever()
        text = sim_dist.client_timeout_text(rdv.timeout, rdv.host, rdv.port)
        now = time.time()
        stamp = time.strftime("%m%d %H:%M:%S", time.localtime(now)) + f".{int(now % 1 * 1e9):09d}"
        write_stderr(f"[E{stamp} socket.cpp:1011] [c10d] {text}\n")
        raise sim_gpu.DistNetworkError(text)

    def load_model(self) -> None:
        sa = self.server_args
        tic = time.monotonic()
        ov = self.overheads
        nccl = int(ov.nccl_mib * MiB) if self._world() > 1 else 0
        g = self.group_gpus[self.rank]
        before = g.total_bytes - g.used_bytes - int(ov.cuda_context_mib * MiB) - nccl
        logger.info(f"Load weight begin. avail mem={before / GiB:.2f} GB")
        self._phase("weights_loading")
        checkpoint = find_checkpoint(self.model_config.model_path)
        self.plan = sim_memory.plan_group(
            self.model_config.shape,
            [GpuMem(x.total_bytes, x.used_bytes) for x in self.group_gpus],
            tp_size=self.tp_size,
            pp_size=self.pp_size,
            weights_total_bytes=checkpoint.total_size,
            mem_fraction_static=sa.mem_fraction_static,
            kv_cache_dtype=sa.kv_cache_dtype,
            page_size=sa.page_size,
            max_total_tokens=sa.max_total_tokens,
            max_running_requests=sa.max_running_requests,
            cuda_graph_bs=sa.cuda_graph_bs,
            disable_cuda_graph=sa.disable_cuda_graph,
            overheads=ov,
            attn_tp_size=self._attn_tp_size(),
            draft_layers=self.draft_layers,
            draft_budgeted=self.family == FAMILY_0514,
            spare_req_row=self.family == FAMILY_0514,
            draft_tokens=(sa.speculative_num_draft_tokens or 0) if sa.speculative_algorithm else 0,
        )
        self.mem = self.plan.ranks[self.rank]
        DefaultModelLoader(checkpoint).load_model(
            mem=self.mem,
            gpu_ordinal=self.gpu_ordinal,
            show_progress=self.rank == 0,
            sleep=sim_sleep,
        )
        if self.plan.weights_oom:  # another rank is the one short of memory: it fails, this one waits in a collective
            from sglang.srt.sim_faults import hang_forever

            hang_forever()
        m = self.mem
        elapsed = time.monotonic() - tic
        self.timing["load_weights"] = elapsed
        cls = self.model_config.architecture
        if self.family == FAMILY_0514:
            quant = f"quant={self.model_config.quantization}, " if self.model_config.quantization else ""
            logger.info(
                f"Load weight end. elapsed={elapsed:.2f} s, type={cls}, {quant}"
                f"avail mem={m.free_after_weights / GiB:.2f} GB, mem usage={m.weights / GiB:.2f} GB."
            )
        else:
            dtype = f"torch.{self.model_config.dtype}"
            logger.info(
                f"Load weight end. elapsed={elapsed:.2f} s, type={cls}, dtype={dtype}, "
                f"avail mem={m.free_after_weights / GiB:.2f} GB, mem usage={m.weights / GiB:.2f} GB."
            )
        if self.rendezvous is not None:  # the memory profile's all-reduce (min over every rank)
            self.rendezvous.barrier()
        self._phase("weights_loaded")

    def init_memory_pool(self) -> None:
        sa = self.server_args
        plan = self.plan
        m = self.mem
        if plan.max_total_tokens_warning is not None:
            a, b = plan.max_total_tokens_warning
            logger.warning(
                f"max_total_tokens={a} is larger than the profiled value {b}. Use the profiled value instead."
            )
        if plan.not_enough_memory:
            if self.family == FAMILY_0514:
                mem_fraction_static = sa.mem_fraction_static
                raise RuntimeError(
                    "Not enough memory. Please try to increase --mem-fraction-static. "
                    f"Current value: {mem_fraction_static=}"
                )
            raise RuntimeError(
                "Not enough memory. Please try to increase --mem-fraction-static. "
                f"Current value: {self.server_args.mem_fraction_static=}"
            )
        self.max_total_num_tokens = plan.max_total_num_tokens
        shape = self.model_config.shape
        dtype = sim_memory.kv_torch_dtype(sa.kv_cache_dtype, shape.dtype)
        if self.rank == 0:
            logger.info(f"Using KV cache dtype: {dtype}")
        sim_sleep(0.2)
        cls = {"mha": MHATokenToKVPool, "mla": MLATokenToKVPool, "dsa": NSATokenToKVPool}[shape.attention]
        self.token_to_kv_pool = cls(
            plan.max_total_num_tokens,
            page_size=sa.page_size,
            dtype=dtype,
            k_bytes=m.pool_k,
            v_bytes=m.pool_v,
            family=self.family,
        )
        if m.pool_oom is not None:  # a tensor of the pool does not fit: torch raises while the pool is built
            self._raise_pool_oom(m)
        if plan.pool_oom:  # another rank is the one short of memory: it fails, this one waits in a collective
            from sglang.srt.sim_faults import hang_forever

            hang_forever()
        self._phase("kv_allocated")
        logger.info(f"Memory pool end. avail mem={m.free_after_pool / GiB:.2f} GB")
        self._phase("memory_pool_ready")

    def _raise_pool_oom(self, m) -> None:
        oom = m.pool_oom
        raise sim_gpu.OutOfMemoryError(
            sim_gpu.cuda_oom_message(
                alloc=oom.alloc,
                ordinal=self.gpu_ordinal,
                total=m.total,
                free=oom.free,
                process_in_use=m.total - oom.free - m.used_by_others,
                allocated=oom.allocated,
                private_pools=0,
                reserved_unallocated=RESERVED_UNALLOCATED_MIB * MiB,
            )
        )

    def _prefill_graphs_on(self) -> bool:
        """0.5.14+: prefill graphs (backend tc_piecewise) unless speculative decoding, DP attention or PP is on."""
        sa = self.server_args
        return (
            self.family == FAMILY_0514
            and sa.speculative_algorithm is None
            and not sa.enable_dp_attention
            and self.pp_size == 1
            and not getattr(sa, "disable_piecewise_cuda_graph", False)
        )

    def init_prefill_graphs(self) -> None:
        """The 0.5.14 prefill capture (model_runner.py init_prefill_cuda_graphs): its own begin/end lines and memory
        (a simulation constant per captured token size, taken from what the decode capture would have had)."""
        sa = self.server_args
        m = self.mem
        max_tokens = 2048 if self.model_config.is_mla else sa.chunked_prefill_size
        sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64)]
        sizes = [t for t in [*sizes, *range(1280, 4097, 256), *range(4608, max_tokens + 1, 512)] if t <= max_tokens]
        tic = time.monotonic()
        before = m.free_after_pool / GiB
        capture_name, prefill_backend = "target prefill", "tc_piecewise"
        logger.info(
            f"Capture {capture_name} CUDA graph begin. backend={prefill_backend}, num_tokens={sizes}, "
            f"avail mem={before:.2f} GB"
        )
        used = int(len(sizes) * self.overheads.graph_per_graph_mib * MiB)
        m.free_after_pool -= used
        m.free_after_graph -= used
        sim_sleep(0.01 * len(sizes))
        logger.info(
            f"Capture {capture_name} CUDA graph end. elapsed={time.monotonic() - tic:.2f} s, "
            f"mem usage={used / GiB:.2f} GB, avail mem={m.free_after_pool / GiB:.2f} GB."
        )

    def init_device_graphs(self) -> None:
        if self.server_args.disable_cuda_graph:
            return
        m = self.mem
        if self._prefill_graphs_on():
            self.init_prefill_graphs()
        tic = time.monotonic()
        before = m.free_after_pool / GiB
        # 0.5.9 model_runner.py "Capture {capture_name} begin..." / 0.5.14 "Capture {role} {capture_name} begin..."
        if self.family == FAMILY_0514:
            role, capture_name, backend, tokens_per_bs = "target", "decode CUDA graph", "full", 1
            logger.info(
                f"Capture {role} {capture_name} begin. backend={backend}, num_tokens_per_bs={tokens_per_bs}, "
                f"bs={m.capture_bs}, avail mem={before:.2f} GB"
            )
        else:
            capture_name = "cuda graph"
            logger.info(f"Capture {capture_name} begin. This can take up to several minutes. avail mem={before:.2f} GB")
        self.faults.at("cuda_graph_capturing")
        self.graph_runner = CudaGraphRunner(self)
        after = m.free_after_graph / GiB
        elapsed = time.monotonic() - tic
        if self.family == FAMILY_0514:
            logger.info(
                f"Capture {role} {capture_name} end. elapsed={elapsed:.2f} s, mem usage={before - after:.2f} GB, "
                f"avail mem={after:.2f} GB."
            )
        else:
            logger.info(
                f"Capture {capture_name} end. Time elapsed: {elapsed:.2f} s. mem usage={before - after:.2f} GB. "
                f"avail mem={after:.2f} GB."
            )
        self._phase("cuda_graph_captured")

    def init_draft_runner(self) -> None:
        """The speculative draft runner, built after the target: its own weight, pool and graph lines (0.5.9
        eagle_worker.py / 0.5.14 eagle_worker_v2.py), on the same rank prefix."""
        m = self.mem
        cls = self.model_config.architecture + "NextN"
        begin = (m.free_after_graph if m.capture_bs else m.free_after_pool) / GiB
        logger.info(f"Load weight begin. avail mem={begin:.2f} GB")
        sim_sleep(0.1)
        if m.draft_oom is not None:
            raise sim_gpu.OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {m.draft_oom.alloc / GiB:.2f} GiB. GPU {self.gpu_ordinal} has "
                f"a total capacity of {m.total / GiB:.2f} GiB of which {m.draft_oom.free / MiB:.2f} MiB is free."
            )
        after_weights = m.free_after_draft_weights / GiB
        elapsed = 0.1
        if self.family == FAMILY_0514:
            quant = ""
            logger.info(
                f"Load weight end. elapsed={elapsed:.2f} s, type={cls}, {quant}avail mem={after_weights:.2f} GB, "
                f"mem usage={m.draft_weights / GiB:.2f} GB."
            )
        else:
            dtype = f"torch.{self.model_config.dtype}"
            logger.info(
                f"Load weight end. elapsed={elapsed:.2f} s, type={cls}, dtype={dtype}, "
                f"avail mem={after_weights:.2f} GB, mem usage={m.draft_weights / GiB:.2f} GB."
            )
        shape = self.model_config.shape
        dtype = sim_memory.kv_torch_dtype(self.server_args.kv_cache_dtype, shape.dtype)
        pool_cls = {"mha": MHATokenToKVPool, "mla": MLATokenToKVPool, "dsa": NSATokenToKVPool}[shape.attention]
        pool_cls(
            self.plan.max_total_num_tokens,
            page_size=self.server_args.page_size,
            dtype=dtype,
            k_bytes=m.draft_pool_k,
            v_bytes=m.draft_pool_v,
            family=self.family,
        )
        logger.info(f"Memory pool end. avail mem={m.free_after_draft_pool / GiB:.2f} GB")
        if self.server_args.disable_cuda_graph:
            return
        before, after = m.free_after_draft_pool / GiB, m.free_after_draft_graph / GiB
        if self.family == FAMILY_0514:
            if self.tp_rank == 0:  # log_info_on_rank0 (0.5.14 eagle_worker_v2.py:393-409)
                decode_backend, topk = "full", 1
                logger.info(
                    f"Capture draft decode CUDA graph begin. backend={decode_backend}, num_tokens_per_bs={topk}, "
                    f"bs={m.capture_bs}, avail mem={before:.2f} GB"
                )
                logger.info(
                    f"Capture draft decode CUDA graph end. elapsed={elapsed:.2f} s, "
                    f"mem usage={(before - after):.2f} GB, avail mem={after:.2f} GB."
                )
        else:  # 0.5.9 eagle_worker.py:248-257
            logger.info(
                f"Capture draft cuda graph begin. This can take up to several minutes. avail mem={before:.2f} GB"
            )
            logger.info(
                f"Capture draft cuda graph end. Time elapsed: {elapsed:.2f} s. mem usage={(before - after):.2f} GB. "
                f"avail mem={after:.2f} GB."
            )
        sim_sleep(0.1)
