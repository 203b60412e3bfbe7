"""SGLang stand-in: a simulated SGLang server (see sim/sglang/README.md).

It reproduces SGLang's start-up logs, memory arithmetic, failure modes and HTTP API on simulated GPUs; it never
touches a real GPU and needs nothing outside the Python standard library.
"""

from sglang.version import __version__

__all__ = ["__version__"]
