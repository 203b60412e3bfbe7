"""sgl-kernel stand-in: same import name and version as the real package, no compiled kernels."""

from sgl_kernel.version import __version__

__all__ = ["__version__"]
