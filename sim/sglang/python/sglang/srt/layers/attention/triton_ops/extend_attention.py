"""
Memory-efficient attention for prefill (extend). It supports page size = 1 and prefix caching.

SGLang stand-in: the kernel is not run; instead the launch configuration is computed exactly as the real module does
(``_get_block_sizes_for_extend_attention``) and triton's shared-memory check is applied to it, so a block-size table
that does not fit the device fails like the real kernel compile does (``OutOfResources``).
"""

from sglang.srt.sim_gpu import OutOfResources, get_device_capability, shared_memory_limit

_is_cuda = True
_is_hip = False

if _is_cuda:
    CUDA_CAPABILITY = get_device_capability()


def _get_block_sizes_for_extend_attention(Lq: int, Lv: int):
    """Block sizes (BLOCK_M, BLOCK_N), num_warps and num_stages of the extend kernel."""
    if _is_hip:
        BLOCK_M, BLOCK_N = (64, 64)
        num_warps = 4
    else:
        if _is_cuda and CUDA_CAPABILITY[0] >= 9:
            if Lq <= 256:
                BLOCK_M, BLOCK_N = (128, 64)
            else:
                BLOCK_M, BLOCK_N = (32, 64)
        elif _is_cuda and CUDA_CAPABILITY[0] >= 8:
            # sm86/sm89 has a much smaller shared memory size (100K) than sm80 (160K)
            if CUDA_CAPABILITY[1] == 9 or CUDA_CAPABILITY[1] == 6:
                if Lq <= 128:
                    BLOCK_M, BLOCK_N = (64, 128)
                elif Lq <= 256:
                    BLOCK_M, BLOCK_N = (64, 64)
                else:
                    BLOCK_M, BLOCK_N = (32, 32)
            elif Lq <= 128:
                BLOCK_M, BLOCK_N = (128, 128)
            elif Lq <= 256:
                BLOCK_M, BLOCK_N = (64, 64)
            else:
                BLOCK_M, BLOCK_N = (32, 64)
        else:
            BLOCK_M, BLOCK_N = (64, 64) if Lq <= 128 else (32, 32)

        num_warps = 4 if Lq <= 64 else 8

    num_stages = 1
    return BLOCK_M, BLOCK_N, num_warps, num_stages


def _shared_memory_required(block_m: int, block_n: int, d_qk: int, d_v: int, num_stages: int) -> int:
    """Stand-in for triton's shared-memory accounting of ``_fwd_kernel``: Q tile + K tile + V tile, 2-byte elements.

    ``d_qk`` is the head dim of the tile kept in shared memory (for MLA models the nope part; the rope part stays in
    registers), ``d_v`` the value head dim.
    """
    return 2 * (block_m * d_qk + block_n * d_qk * num_stages + block_n * d_v * num_stages)


def extend_attention_fwd(q_head_dim: int, v_head_dim: int, smem_head_dim: int | None = None) -> None:
    """Launch (simulated) the extend kernel for one batch. Raises ``OutOfResources`` like triton does."""
    BLOCK_M, BLOCK_N, _num_warps, num_stages = _get_block_sizes_for_extend_attention(q_head_dim, v_head_dim)
    d_qk = q_head_dim if smem_head_dim is None else smem_head_dim
    required = _shared_memory_required(BLOCK_M, BLOCK_N, d_qk, v_head_dim, num_stages)
    limit = shared_memory_limit(tuple(CUDA_CAPABILITY))
    if required > limit:
        raise OutOfResources(required, limit, "shared memory")
