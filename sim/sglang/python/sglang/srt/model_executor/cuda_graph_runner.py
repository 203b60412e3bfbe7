"""Decode CUDA-graph capture (simulated): memory per batch size from ``sim_memory.graph_allocations``."""

from __future__ import annotations

import logging
import time

from sglang.srt import sim_gpu
from sglang.srt.sim_faults import NCCL_ERROR_TEXT
from sglang.srt.sim_memory import RESERVED_UNALLOCATED_MIB, GiB, MiB
from sglang.srt.utils.common import FAMILY_0514, Tqdm, sim_sleep

logger = logging.getLogger(__name__)

# 0.4.7 - 0.5.12 (cuda_graph_runner.py)
CUDA_GRAPH_CAPTURE_FAILED_MSG = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --disable-cuda-graph. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)
# 0.5.16+ (model_executor/runner_backend_utils/__init__.py), used with the 0.5.14 log family
CUDA_GRAPH_CAPTURE_FAILED_MSG_0516 = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
    "3. disable decode CUDA graph by --cuda-graph-backend-decode=disabled. (Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)

# Simulated seconds per captured batch size (time scale 1).
CAPTURE_SECONDS_PER_GRAPH = 0.06


class CudaGraphRunner:
    def __init__(self, model_runner):
        self.model_runner = model_runner
        self.rm = model_runner.mem
        self.capture_bs = list(self.rm.capture_bs)
        if model_runner.tp_rank == 0 and model_runner.pp_rank == 0 and model_runner.family != FAMILY_0514:
            logger.info(f"Capture cuda graph bs {self.capture_bs}")
        try:
            self.capture()
            return
        except RuntimeError as e:
            error = e
        msg = (
            CUDA_GRAPH_CAPTURE_FAILED_MSG_0516 if model_runner.family == FAMILY_0514 else CUDA_GRAPH_CAPTURE_FAILED_MSG
        )
        exc = Exception(f"Capture cuda graph failed: {error}\n{msg}")
        exc.__context__ = error  # printed as "During handling of the above exception, ..." like upstream
        raise exc

    def capture(self) -> None:
        mr = self.model_runner
        rm = self.rm
        show = mr.tp_rank == 0 and mr.pp_rank == 0
        steps = rm.graph_steps
        extra = mr.faults.slow_capture_seconds()
        free = rm.free_after_pool
        used = 0
        pbar = Tqdm(total=len(steps), desc="Capturing batches") if show else None
        for i, (bs, allocs) in enumerate(steps):
            if pbar is not None:
                pbar.set_description(f"Capturing batches (bs={bs} avail_mem={free / GiB:.2f} GB)")
            if i == 0:
                nccl = mr.faults.find("nccl", "cuda_graph_capturing")
                if nccl is not None:
                    raise sim_gpu.DistBackendError(NCCL_ERROR_TEXT)
                if mr.faults.find("oom", "cuda_graph_capturing") is not None:
                    want = max(sum(allocs), 1 << 30)
                    self._raise_oom(want, min(free, want // 2), used)
            sim_sleep(CAPTURE_SECONDS_PER_GRAPH)
            if extra:
                time.sleep(extra / len(steps))
            for a in allocs:
                if a > free:
                    self._raise_oom(a, free, used)
                free -= a
                used += a
            if pbar is not None:
                pbar.update(1)
        if pbar is not None:
            pbar.close()

    def _raise_oom(self, alloc: int, free: int, used: int) -> None:
        rm = self.rm
        reserved = RESERVED_UNALLOCATED_MIB * MiB
        allocated = rm.allocated_before_graph + used
        in_use = rm.total - max(free, 0) - rm.used_by_others
        raise sim_gpu.OutOfMemoryError(
            sim_gpu.cuda_oom_message(
                alloc=alloc,
                ordinal=self.model_runner.gpu.ordinal,
                total=rm.total,
                free=max(free, 0),
                process_in_use=in_use,
                allocated=allocated,
                private_pools=used,
                reserved_unallocated=reserved,
            )
        )
