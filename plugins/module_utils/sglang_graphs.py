# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The estimate of decode CUDA-graph capture memory (nothing in SGLang measures it before capture). Standard library
only; docs/memory.md "CUDA-graph memory" explains the calibration."""

from __future__ import absolute_import, annotations, division, print_function

__metaclass__ = type

from ansible_collections.llmops.sglang.plugins.module_utils.sglang_release import cuda_graph_size_stats

#: CUDA-graph capture memory model: need = base(attention family) + PER_SIZE * number of captured batch sizes
#: + PER_BS * largest captured batch size (GiB). Calibrated on SGLang's logged "Capture cuda graph end ... mem usage":
#: 0.93 GB for 13 sizes (QwQ-32B TP4; model: 0.71), 1.0 GB for 36 sizes / bs 256 (model: 1.12), 1.44 GB for 52 sizes /
#: bs 512 (model: 1.53). MLA/DSA models carry bigger per-model buffers (DeepSeek ~5-6 GB with FA3, issue #16143);
#: for GLM-5 on an RTX PRO 6000 the reference story bounds the need between ~1.5 GiB (0.95 died with that much left)
#: and 8.6 GiB (0.88 started), and the DSA base puts the default-bs estimate at 3.03 GiB, inside that window.
GRAPH_BASE_GIB = {"mha": 0.5, "mla": 1.5, "dsa": 2.0}
GRAPH_PER_SIZE_GIB = 0.01
GRAPH_PER_BS_GIB = 0.001


def cuda_graph_need_gib_for(max_bs, family="mha", base_gib=None, disable_padding=False):
    """cuda_graph_need_gib(cuda_graph_batch_sizes(max_bs)) without building the list (any max_bs in O(1))."""
    count, largest = cuda_graph_size_stats(max_bs, disable_padding)
    if not count:
        return 0.0
    base = GRAPH_BASE_GIB.get(family, GRAPH_BASE_GIB["mha"]) if base_gib is None else float(base_gib)
    return base + GRAPH_PER_SIZE_GIB * count + GRAPH_PER_BS_GIB * largest


def cuda_graph_need_gib(batch_sizes, family="mha", base_gib=None):
    """Estimated decode-graph capture memory (GiB): base(family) + PER_SIZE x len(sizes) + PER_BS x max(sizes)."""
    sizes = list(batch_sizes)
    if not sizes:
        return 0.0
    base = GRAPH_BASE_GIB.get(family, GRAPH_BASE_GIB["mha"]) if base_gib is None else float(base_gib)
    return base + GRAPH_PER_SIZE_GIB * len(sizes) + GRAPH_PER_BS_GIB * max(sizes)
