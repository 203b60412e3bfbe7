"""PyTorch's caching allocator as the planner models it (plugins/module_utils/torch_cuda_alloc.py), case by case from
the rules of c10/cuda/CUDACachingAllocator.cpp (round_size, get_allocation_size, get_free_block, should_split)."""

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import torch_cuda_alloc as ta

MIB = 1 << 20


@pytest.mark.parametrize(
    ("nbytes", "booked", "segment"),
    [
        (1, 512, 2 * MIB),  # the smallest booking, a 2 MiB small-pool segment
        (513, 1024, 2 * MIB),
        (MIB, MIB, 2 * MIB),  # 1 MiB is still small
        (MIB + 1, MIB + 512, 20 * MIB),  # above 1 MiB and below 10 MiB: a 20 MiB segment
        (10 * MIB - 512, 10 * MIB - 512, 20 * MIB),
        (10 * MIB, 10 * MIB, 10 * MIB),  # from 10 MiB on: rounded up to 2 MiB
        (279_277_568, 279_277_568, 281_018_368),  # one GLM-5 KV buffer at 425 664 tokens (0.88)
        (56_196_096, 56_196_096, 56_623_104),  # one GLM-5 indexer buffer
    ],
)
def test_booking_and_segment_sizes(nbytes, booked, segment):
    assert ta.round_size(nbytes) == booked
    assert ta.allocation_size(booked) == segment


def test_a_rest_above_1_mib_is_cached_and_serves_a_later_request():
    a = ta.CachingAllocator()
    # 279 277 568 B in a 281 018 368 B segment: 1 740 800 B (1.66 MiB) stay cached in the large pool
    assert a.malloc(279_277_568) == 281_018_368
    assert a.malloc(1_500_000) == 0  # 1.43 MiB: served from that rest, no new segment
    assert a.malloc(1_500_000) == 20 * MIB  # the rest of the rest (0.23 MiB) is too small: a new 20 MiB segment
    assert a.reserved == 281_018_368 + 20 * MIB and a.segments == 2


def test_a_rest_of_at_most_1_mib_goes_with_the_tensor():
    a = ta.CachingAllocator()
    a.malloc(12 * MIB + 1)  # booked 12 MiB + 512 B in a 14 MiB segment: the 2 MiB - 512 B rest is cached
    assert a.malloc(2 * MIB - 512) == 0
    b = ta.CachingAllocator()
    b.malloc(13 * MIB + 1)  # booked 13 MiB + 512 B in 14 MiB: a rest of 1 MiB - 512 B is not split off
    assert b.malloc(MIB + 1) == 20 * MIB


def test_small_requests_share_2_mib_segments():
    a = ta.CachingAllocator()
    sizes = [53_216] * 39  # 39 x 52 KiB (a paged allocator's free list) fit in one 2 MiB segment
    assert a.malloc_all(sizes).reserved == 2 * MIB
    assert a.malloc(53_216) == 2 * MIB  # the 40th needs a second one


def test_reference_pool_rounding_is_0_158_gib():
    """GLM-5 at 0.88 (425 664 tokens, page 64): 78 KV + 78 indexer buffers lose 2 167 808 B per layer."""
    tensors = [279_277_568] * 78 + [56_196_096] * 78
    lost = ta.reserved_bytes(tensors) - sum(tensors)
    assert lost == 78 * (1_740_800 + 427_008)
    assert lost / 2**30 == pytest.approx(0.1575, abs=1e-4)
