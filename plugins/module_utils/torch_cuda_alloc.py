# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""PyTorch's CUDA caching allocator, as far as it decides how much GPU memory a sequence of tensors takes.

A tensor of n bytes does not cost n bytes of free GPU memory: the allocator rounds each request and takes whole
segments from cudaMalloc. SGLang's "KV size" is the sum of its tensors' sizes, its "avail mem" is what
``torch.cuda.mem_get_info`` reports after ``empty_cache`` -- the difference is this module. Standard library only.

The rules (``c10/cuda/CUDACachingAllocator.cpp``, read at the revision the search index stores; the functions are
unchanged from torch 2.0 to that revision, and the torch this project pins, 2.9.1, has the same defaults in its
wheel's headers: ``c10/core/AllocatorConfig.h:16`` ``kLargeBuffer = 20971520``, ``:314`` ``max_split_size_``
= SIZE_MAX, ``:320`` no ``roundup_power2_divisions``):

* ``round_size``: every request is rounded up to a multiple of 512 B (``kMinBlockSize``);
* requests of at most 1 MiB (``kSmallSize``) are served from the small pool, in 2 MiB segments (``kSmallBuffer``);
  larger ones from the large pool;
* ``get_free_block``: the smallest cached free block of the pool that fits is used first (best fit);
* ``get_allocation_size``: otherwise a new segment of 2 MiB for a small request, 20 MiB (``kLargeBuffer``) for a
  request below 10 MiB (``kMinLargeAlloc``), else the request rounded up to a multiple of 2 MiB (``kRoundLarge``);
* ``should_split``: what is left of the block stays cached as a free block when it is at least 512 B (small pool) or
  more than 1 MiB (large pool); a smaller rest is handed out with the tensor and lost until it is freed.

Not modelled: ``expandable_segments`` and ``PYTORCH_CUDA_ALLOC_CONF`` overrides (SGLang's CUDA path sets neither by
default), free blocks left cached by earlier phases (the model starts from an empty cache, as after SGLang's
``empty_cache`` with no split segment), several streams.
"""

from __future__ import annotations

__metaclass__ = type

import bisect

MIB = 1 << 20
K_MIN_BLOCK_SIZE = 512
K_SMALL_SIZE = MIB
K_SMALL_BUFFER = 2 * MIB
K_LARGE_BUFFER = 20 * MIB
K_MIN_LARGE_ALLOC = 10 * MIB
K_ROUND_LARGE = 2 * MIB


def round_size(nbytes):
    """A request's size as the allocator books it: at least 512 B, a multiple of 512 B."""
    n = int(nbytes)
    if n < K_MIN_BLOCK_SIZE:
        return K_MIN_BLOCK_SIZE
    return -(-n // K_MIN_BLOCK_SIZE) * K_MIN_BLOCK_SIZE


def allocation_size(size):
    """The cudaMalloc segment a rounded request of ``size`` bytes opens when no cached block fits."""
    if size <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if size < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return -(-size // K_ROUND_LARGE) * K_ROUND_LARGE


class CachingAllocator:
    """Replays a sequence of allocations (no frees) and counts the segments they reserve.

    ``reserved`` is the GPU memory the sequence takes from the driver (what free memory drops by); ``allocated`` the
    sum of the rounded requests; ``requested`` the sum of the tensors' own sizes.
    """

    def __init__(self):
        self.reserved = 0
        self.allocated = 0
        self.requested = 0
        self.segments = 0
        self._free = {True: [], False: []}  # small pool, large pool: sorted free block sizes

    def malloc(self, nbytes):
        """Book one tensor of ``nbytes``; returns the segment bytes it opened (0 when a cached block served it)."""
        size = round_size(nbytes)
        small = size <= K_SMALL_SIZE
        free = self._free[small]
        i = bisect.bisect_left(free, size)
        opened = 0
        if i < len(free):
            block = free.pop(i)
        else:
            block = opened = allocation_size(size)
            self.reserved += opened
            self.segments += 1
        rest = block - size
        if rest >= K_MIN_BLOCK_SIZE if small else rest > K_SMALL_SIZE:
            bisect.insort(free, rest)
        self.allocated += size
        self.requested += int(nbytes)
        return opened

    def malloc_all(self, sizes):
        for n in sizes:
            self.malloc(n)
        return self


def reserved_bytes(sizes):
    """GPU memory a fresh allocator reserves for tensors of ``sizes`` bytes allocated in that order."""
    return CachingAllocator().malloc_all(sizes).reserved
