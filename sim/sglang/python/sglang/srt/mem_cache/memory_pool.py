"""KV-cache pools (simulated): only their sizes and the ``KV Cache is allocated`` log line."""

from __future__ import annotations

import logging

from sglang.srt.utils.common import FAMILY_0514

logger = logging.getLogger(__name__)

GB = 1024 * 1024 * 1024


class KVCache:
    def __init__(self, size: int, *, page_size: int, dtype: str, k_bytes: int, v_bytes: int, family: str):
        self.size = size
        self.page_size = page_size
        self.dtype = dtype
        self.k_bytes = k_bytes
        self.v_bytes = v_bytes
        self.family = family
        self._finalize_allocation_log(size)

    def mem_usage_bytes(self) -> int:
        return self.k_bytes + self.v_bytes

    def _finalize_allocation_log(self, num_tokens: int) -> None:
        raise NotImplementedError


class MHATokenToKVPool(KVCache):
    def _finalize_allocation_log(self, num_tokens: int) -> None:
        k_size_GB, v_size_GB = self.k_bytes / GB, self.v_bytes / GB
        if self.family == FAMILY_0514:  # 0.5.14 adds the dtype
            logger.info(
                f"KV Cache is allocated. dtype: {self.dtype}, #tokens: {num_tokens}, K size: {k_size_GB:.2f} GB, "
                f"V size: {v_size_GB:.2f} GB"
            )
        else:  # 0.5.9 mem_cache/memory_pool.py:652
            logger.info(
                f"KV Cache is allocated. #tokens: {num_tokens}, K size: {k_size_GB:.2f} GB, V size: {v_size_GB:.2f} GB"
            )


class MLATokenToKVPool(KVCache):
    def _finalize_allocation_log(self, num_tokens: int) -> None:
        kv_size_GB = self.k_bytes / GB
        if self.family == FAMILY_0514:
            logger.info(
                f"KV Cache is allocated. dtype: {self.dtype}, #tokens: {num_tokens}, KV size: {kv_size_GB:.2f} GB"
            )
        else:  # 0.5.9 mem_cache/memory_pool.py:658
            logger.info(f"KV Cache is allocated. #tokens: {num_tokens}, KV size: {kv_size_GB:.2f} GB")


class NSATokenToKVPool(MLATokenToKVPool):
    pass
