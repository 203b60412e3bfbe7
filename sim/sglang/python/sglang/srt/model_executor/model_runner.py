"""ModelRunner (simulated): torch.distributed init, weight loading, KV pool, CUDA graphs — with SGLang's log lines."""

from __future__ import annotations

import logging
import time

from sglang.srt import sim_gpu, sim_memory
from sglang.srt.mem_cache.memory_pool import MHATokenToKVPool, MLATokenToKVPool, NSATokenToKVPool
from sglang.srt.model_executor.cuda_graph_runner import CudaGraphRunner
from sglang.srt.model_loader.loader import DefaultModelLoader, find_checkpoint
from sglang.srt.sim_faults import NCCL_ERROR_TEXT
from sglang.srt.sim_memory import GiB, GpuMem, MiB, Overheads
from sglang.srt.utils.common import FAMILY_0514, sim_sleep

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
        self.overheads = Overheads.from_env()
        self.plan: sim_memory.GroupPlan | None = None
        self.mem: sim_memory.RankMemory | None = None
        self.graph_runner = None
        self.timing = {}

        sim_gpu.set_device(gpu_ordinal)
        self.gpu = system.gpus[gpu_ordinal]
        self.init_torch_distributed()
        self.load_model()
        self.init_memory_pool()
        self.init_device_graphs()

    # -------------------------------------------------------------------------------------------------------------
    def _phase(self, name: str) -> None:
        self.faults.at(name)
        if name not in ("started", "cuda_graph_capturing") and self.faults.find("nccl", name) is not None:
            raise sim_gpu.DistBackendError(NCCL_ERROR_TEXT)

    def _world(self) -> int:
        return self.tp_size * self.pp_size

    def init_torch_distributed(self) -> None:
        tic = time.monotonic()
        logger.info("Init torch distributed begin.")
        sim_sleep(0.3 + 0.002 * self.rank)
        if self.faults.find("nccl", "started") is not None:
            raise sim_gpu.DistBackendError(NCCL_ERROR_TEXT)
        if self._world() > 1 and self.tp_rank == 0 and self.pp_rank == 0:
            logger.info(f"sglang is using nccl=={NCCL_VERSION}")
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
            logger.warning(
                "The memory capacity is unbalanced. Some GPUs may be occupied by other processes. "
                f"{min_per_gpu_memory=}, {local_gpu_memory=}, {local_gpu_memory * 0.9=}"
            )

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
            logger.info(
                f"Load weight end. elapsed={elapsed:.2f} s, type={cls}, dtype=torch.{self.model_config.dtype}, "
                f"avail mem={m.free_after_weights / GiB:.2f} GB, mem usage={m.weights / GiB:.2f} GB."
            )
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
        self._phase("kv_allocated")
        logger.info(f"Memory pool end. avail mem={m.free_after_pool / GiB:.2f} GB")
        self._phase("memory_pool_ready")

    def init_device_graphs(self) -> None:
        if self.server_args.disable_cuda_graph:
            return
        m = self.mem
        tic = time.monotonic()
        before = m.free_after_pool / GiB
        if self.family == FAMILY_0514:
            logger.info(
                f"Capture target decode CUDA graph begin. backend=full, num_tokens_per_bs=1, bs={m.capture_bs}, "
                f"avail mem={before:.2f} GB"
            )
        else:
            logger.info(f"Capture cuda graph begin. This can take up to several minutes. avail mem={before:.2f} GB")
        self.faults.at("cuda_graph_capturing")
        self.graph_runner = CudaGraphRunner(self)
        after = m.free_after_graph / GiB
        elapsed = time.monotonic() - tic
        if self.family == FAMILY_0514:
            logger.info(
                f"Capture target decode CUDA graph end. elapsed={elapsed:.2f} s, mem usage={before - after:.2f} GB, "
                f"avail mem={after:.2f} GB."
            )
        else:
            logger.info(
                f"Capture cuda graph end. Time elapsed: {elapsed:.2f} s. mem usage={before - after:.2f} GB. "
                f"avail mem={after:.2f} GB."
            )
        self._phase("cuda_graph_captured")
