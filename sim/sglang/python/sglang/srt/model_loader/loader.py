"""Checkpoint discovery and (simulated) weight loading.

The declared size of a checkpoint is ``metadata.total_size`` of ``model.safetensors.index.json`` when present (so a
tiny checkpoint can declare a 500 GB model), else the sum of the tensor data of every ``*.safetensors`` file.
Every shard named by the index must exist and have a valid safetensors header (8-byte little-endian length + JSON).
"""

from __future__ import annotations

import glob
import json
import os
import struct
from dataclasses import dataclass

from sglang.srt.sim_gpu import SafetensorError

INDEX_FILE = "model.safetensors.index.json"
_MAX_HEADER = 100 * 1024 * 1024


@dataclass
class Checkpoint:
    path: str
    shards: list[str]
    total_size: int
    declared: bool  # total_size came from the index metadata


def read_safetensors_header(path: str) -> dict:
    with open(path, "rb") as fh:
        raw = fh.read(8)
        if len(raw) < 8:
            raise SafetensorError("Error while deserializing header: HeaderTooSmall")
        (n,) = struct.unpack("<Q", raw)
        if n > _MAX_HEADER:
            raise SafetensorError("Error while deserializing header: HeaderTooLarge")
        data = fh.read(n)
        size = os.fstat(fh.fileno()).st_size
    if len(data) < n:
        raise SafetensorError("Error while deserializing header: InvalidHeaderLength")
    try:
        header = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise SafetensorError("Error while deserializing header: InvalidHeaderDeserialization") from None
    end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
    if 8 + n + end > size:
        raise SafetensorError("Error while deserializing header: MetadataIncompleteBuffer")
    return header


def find_checkpoint(model_path: str) -> Checkpoint:
    index_path = os.path.join(model_path, INDEX_FILE)
    if os.path.isfile(index_path):
        with open(index_path, encoding="utf-8") as fh:
            index = json.load(fh)
        shards = sorted(set((index.get("weight_map") or {}).values()))
        if not shards:
            raise RuntimeError(f"No model weights found in: `{model_path}`")
        total = int((index.get("metadata") or {}).get("total_size") or 0)
        paths = []
        for name in shards:
            p = os.path.join(model_path, name)
            if not os.path.isfile(p):
                raise FileNotFoundError(2, "No such file or directory", p)
            paths.append(p)
        declared = total > 0
        if not declared:
            total = sum(_data_size(p) for p in paths)
        return Checkpoint(model_path, paths, total, declared)
    paths = sorted(glob.glob(os.path.join(model_path, "*.safetensors")))
    if not paths:
        raise RuntimeError(f"Cannot find any model weights with `{model_path}`")
    return Checkpoint(model_path, paths, sum(_data_size(p) for p in paths), False)


def _data_size(path: str) -> int:
    header = read_safetensors_header(path)
    return max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)


def validate_shard(path: str) -> None:
    read_safetensors_header(path)


class DefaultModelLoader:
    """Walks the shards like the safetensors loader (tqdm on rank 0) and "allocates" the rank's share of weights."""

    # Simulated load throughput per rank at time scale 1 (GiB/s).
    GIB_PER_SECOND = 12.0

    def __init__(self, checkpoint: Checkpoint):
        self.checkpoint = checkpoint

    def load_model(self, *, mem, gpu_ordinal: int, show_progress: bool, sleep) -> None:
        from sglang.srt.utils.common import Tqdm

        shards = self.checkpoint.shards
        pbar = (
            Tqdm(total=len(shards), desc="Loading safetensors checkpoint shards", bar_format="sglang-shards")
            if (show_progress)
            else None
        )
        seconds = mem.weights / (1 << 30) / self.GIB_PER_SECOND
        oom = mem.weights_oom
        fail_at = len(shards)
        if oom is not None and mem.weights:
            fail_at = min(len(shards) - 1, int(len(shards) * oom.allocated / mem.weights))
        for i, shard in enumerate(shards):
            validate_shard(shard)
            if i == fail_at:
                self._raise_oom(mem, gpu_ordinal)
            sleep(seconds / len(shards))
            if pbar is not None:
                pbar.update(1)
        if pbar is not None:
            pbar.close()

    @staticmethod
    def _raise_oom(mem, gpu_ordinal: int) -> None:
        from sglang.srt import sim_gpu
        from sglang.srt.sim_memory import RESERVED_UNALLOCATED_MIB

        oom = mem.weights_oom
        free = max(oom.free, 0)
        raise sim_gpu.OutOfMemoryError(
            sim_gpu.cuda_oom_message(
                alloc=oom.alloc,
                ordinal=gpu_ordinal,
                total=mem.total,
                free=free,
                process_in_use=mem.total - free - mem.used_by_others,
                allocated=oom.allocated,
                private_pools=0,
                reserved_unallocated=RESERVED_UNALLOCATED_MIB << 20,
            )
        )
