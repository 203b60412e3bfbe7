"""PyTorch's CUDA caching allocator, as the stand-in needs it: how much free GPU memory a run of tensors takes.

Written for the stand-in from torch's ``c10/cuda/CUDACachingAllocator.cpp`` (``round_size``, ``get_allocation_size``,
``get_free_block``, ``should_split``) and the defaults in the torch 2.9.1 wheel's ``c10/core/AllocatorConfig.h`` (no
power-of-two rounding, no split limit); it shares no code with the collection's planner.

* sizes are booked in multiples of 512 B;
* up to 1 MiB: the small pool, 2 MiB segments; above: the large pool;
* a request takes the smallest cached free block of its pool that holds it, else a new segment: 2 MiB (small),
  20 MiB (below 10 MiB), or the size rounded up to 2 MiB;
* the part of the block the request does not use stays cached if it is >= 512 B (small pool) or > 1 MiB (large
  pool); otherwise it goes with the tensor.
"""

from __future__ import annotations

MiB = 1 << 20


class Segments:
    """Free GPU memory consumed by tensors allocated one after the other (never freed)."""

    def __init__(self) -> None:
        self.reserved = 0
        self.cached: dict[str, list[int]] = {"small": [], "large": []}

    def take(self, nbytes: int) -> int:
        """Allocate one tensor; returns the bytes of the segment it opened (0 if a cached block served it)."""
        booked = max(512, (int(nbytes) + 511) // 512 * 512)
        pool = "small" if booked <= MiB else "large"
        fits = [b for b in self.cached[pool] if b >= booked]
        opened = 0
        if fits:
            block = min(fits)
            self.cached[pool].remove(block)
        else:
            if pool == "small":
                block = 2 * MiB
            elif booked < 10 * MiB:
                block = 20 * MiB
            else:
                block = -(-booked // (2 * MiB)) * (2 * MiB)
            opened = block
            self.reserved += block
        left = block - booked
        if (pool == "small" and left >= 512) or (pool == "large" and left > MiB):
            self.cached[pool].append(left)
        return opened


def reserved_for(sizes: list[int]) -> int:
    seg = Segments()
    for n in sizes:
        seg.take(n)
    return seg.reserved
