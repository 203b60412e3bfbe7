"""Stand-in FlashAttention: importing it fails on a GPU architecture the build did not target."""

from ._sim_runtime import BUILD_INFO, check

check()
__version__ = BUILD_INFO["version"]


def flash_attn_func(*_args, **_kwargs):
    raise NotImplementedError("stand-in flash_attn has no kernels")
