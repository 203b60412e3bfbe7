"""Real toolchains fetched from the package registries (Triton, nvcc, flash-attn's setup.py, torch); see cache.py."""
