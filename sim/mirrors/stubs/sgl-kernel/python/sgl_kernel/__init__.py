"""Stand-in sgl-kernel: importing it fails on a GPU architecture the build did not target."""

from ._sim_runtime import BUILD_INFO, check

check()
__version__ = BUILD_INFO["version"]
