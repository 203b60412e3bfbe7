# An installed build is versioned by setuptools-scm from its checkout's tags (python/pyproject.toml), which writes
# sglang/_version.py; upstream's sglang/version.py reads that file first too. The fallback is the version of this
# source tree run from PYTHONPATH (the tests; tests/integration/server_prepare.yml reads it from this file).
try:
    from sglang._version import __version__
except ImportError:
    __version__ = "0.5.9.dev0"
