# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see galaxy.yml)
"""Which SGLang, and what it does by default, release by release: version parsing, the default
--mem-fraction-static and its reserves, chunked-prefill and CUDA-graph defaults, the captured batch sizes.
Every rule cites the release source it was read from (docs/memory.md). Standard library only."""

from __future__ import absolute_import, annotations, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.llmops.sglang.plugins.module_utils.sglang_model import PlanError

#: Where the build stage (roles/sglang, tasks/verify.yml) records the SGLang it installed on a host: a JSON object with
#: "version" (what ``import sglang; sglang.__version__`` printed) and "ref" (the user's pin: tag, branch or commit).
#: This record is the one answer to "which SGLang" for the planner and the doctor; there is no built-in default.
DEFAULT_RECORD_PATH = "/var/lib/llmops-sglang/sglang.json"

_VERSION_RE = re.compile(r"^\s*v?(\d+)\.(\d+)(?:\.(\d+))?")


def parse_version(version):
    """'0.5.9', 'v0.5.9.post1', '0.5.8+git123', '0.5.9.dev0' -> (0, 5, 9). There is no default: None is an error
    (which SGLang runs comes from the build record or the user's pin, resolve_sglang_version)."""
    if version is None or version == "":
        raise PlanError(
            "which SGLang? expected a version X.Y.Z from the build record (%s) or the user's pin, found none: "
            "run the build stage or pass the version" % DEFAULT_RECORD_PATH
        )
    if isinstance(version, tuple):
        return tuple(int(p) for p in version[:3]) + (0,) * (3 - len(version[:3]))
    m = _VERSION_RE.match(str(version))
    if not m:
        raise PlanError("SGLang version %r is not of the form X.Y.Z (e.g. 0.5.9)" % (version,))
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))


def recorded_sglang_version(path=DEFAULT_RECORD_PATH):
    """The SGLang version the build stage recorded on this host (its "version", else a version-like "ref")."""
    try:
        with open(path, encoding="utf-8") as fh:
            record = json.load(fh)
    except FileNotFoundError:
        raise PlanError(
            "which SGLang? expected the build record %s, found no such file: run the build stage (--tags build) or "
            "pass the SGLang version" % path
        ) from None
    except (OSError, ValueError) as exc:
        raise PlanError("cannot read the SGLang build record %s (%s): re-run the build stage" % (path, exc)) from None
    if not isinstance(record, dict):
        raise PlanError("the SGLang build record %s is not a JSON object: re-run the build stage" % path)
    for key in ("version", "ref"):
        value = record.get(key)
        if isinstance(value, str) and _VERSION_RE.match(value):
            return value.strip()
    raise PlanError(
        "the SGLang build record %s has no version (version=%r, ref=%r): re-run the build stage or pass the version"
        % (path, record.get("version"), record.get("ref"))
    )


def resolve_sglang_version(version=None, record_path=DEFAULT_RECORD_PATH):
    """Which SGLang: the version given (the user's pin), else the build record's. Returns the version string."""
    if version not in (None, ""):
        parse_version(version)
        return str(version).strip()
    return recorded_sglang_version(record_path)


def _tp_table_fraction(n, version):
    if n >= 16:
        return 0.79
    if n >= 8:
        if version < (0, 3, 0):
            return 0.83
        if version < (0, 4, 0):
            return 0.82
        return 0.81
    if n >= 4:
        return 0.85
    if n >= 2:
        return 0.87
    return 0.88


def parse_gpu_arch(arch):
    """'sm_120', 'sm120a', '12.0', '120', 90 -> (major, minor); None -> None."""
    if arch is None or arch == "":
        return None
    if isinstance(arch, tuple):
        return (int(arch[0]), int(arch[1]) if len(arch) > 1 else 0)
    s = str(arch).strip().lower()
    m = re.match(r"^(\d+)\.(\d+)$", s)
    if m:
        return (int(m.group(1)), int(m.group(2)))
    m = re.match(r"^(?:sm_?|compute_?)?(\d{2,3})[a-z]?$", s)
    if m:
        digits = m.group(1)
        return (int(digits[:-1]), int(digits[-1]))
    raise PlanError("GPU arch %r is not understood: use sm_120, sm_90, 12.0 or similar" % (arch,))


def default_graph_settings(sglang_version, gpu_mem_mib, tp=1, gpu_arch=None):
    """(chunked_prefill_size, cuda_graph_max_bs) SGLang picks when neither flag is given.

    0.5.3+: by GPU memory class (c.2). Before 0.5.3 the decode list default ended at 160 (8/80 on GPUs under 25 GB),
    chunked prefill 8192 (2048 under 35 GiB) -- an approximation, the reference does not state it.
    """
    v = parse_version(sglang_version)
    tp = int(tp)
    if gpu_mem_mib is None:
        return (8192, 160) if v < (0, 5, 3) else (8192, 256 if tp < 4 else 512)
    g = float(gpu_mem_mib)
    if v < (0, 5, 3):
        if g < 25000:
            return (2048, 8 if tp < 4 else 80)
        return (2048 if g < 35 * 1024 else 8192, 160)
    cc = parse_gpu_arch(gpu_arch)
    if g < 20 * 1024:
        return (2048, 8)
    if g < 35 * 1024:
        if v >= (0, 5, 20) and cc is not None and cc[0] >= 10:
            return (4096, 48 if tp < 4 else 160)
        return (2048, 24 if tp < 4 else 80)
    if g < 60 * 1024:
        return (4096, 32 if tp < 4 else 160)
    if g < 160 * 1024:
        return (8192, 256 if tp < 4 else 512)
    return (16384, 512)


def default_mem_fraction_static(
    sglang_version,
    gpu_mem_mib,
    tp=1,
    pp=1,
    *,
    gpu_arch=None,
    chunked_prefill_size=None,
    cuda_graph_max_bs=None,
    speculative=None,
    dp_size=1,
    enable_dp_attention=False,
    piecewise_cuda_graph_sizes=0,
    mla=False,
    prefill_cuda_graph_sizes=0,
    deepep=False,
    post_capture_kv_sizing=False,
):
    """SGLang's default --mem-fraction-static (ServerArgs._handle_gpu_memory_settings), by version.

    gpu_mem_mib is the smallest card's nvidia-smi memory.total (MiB). speculative: None, "eagle" (and other draft
    algorithms, +2 GiB) or "standalone" (+6 GiB). VLM scaling and the AMD aiter rule are not modelled.
    """
    v = parse_version(sglang_version)
    tp, pp = int(tp), int(pp)
    if gpu_mem_mib is None:
        return 0.95 if v >= (0, 5, 20) else 0.88
    g = float(gpu_mem_mib)
    gib = 1024.0
    if v < (0, 4, 6):
        return _tp_table_fraction(tp, v)
    if v < (0, 4, 7):
        if g <= 80 * gib:
            return _tp_table_fraction(tp, v)
        return round((g - 13 * gib) / g, 3)
    if v < (0, 4, 8):
        if g <= 80 * gib:
            return _tp_table_fraction(tp * pp, v)
        if g > 180 * gib:
            return 0.79
        if g > 96 * gib:
            return round((g - 18 * gib) / g, 3)
        return 0.88
    if v < (0, 5, 3):
        if g < 35 * gib:
            reserved = (2.8 + tp * pp / 10.0) * gib
        elif g < 90 * gib:
            reserved = (9.5 + tp * pp / 2.0) * gib
        else:
            reserved = (12 + tp * pp / 2.0) * gib
        return round((g - reserved) / g, 3)
    chunk, max_bs = default_graph_settings(v, g, tp, gpu_arch)
    chunk = chunked_prefill_size if chunked_prefill_size is not None else chunk
    max_bs = cuda_graph_max_bs if cuda_graph_max_bs is not None else max_bs
    if v >= (0, 5, 20) and post_capture_kv_sizing and not mla:
        reserved = 1536 + tp * pp / 8.0 * 1024
    else:
        reserved = 512 + max(chunk, 2048) * 1.5 + tp * pp / 8.0 * 1024
        graph = max_bs * 2
        if v >= (0, 5, 20):
            if prefill_cuda_graph_sizes:
                graph += 1536 if mla else 8 * prefill_cuda_graph_sizes
            if deepep:
                graph += 2048
        reserved += graph
        if enable_dp_attention:
            reserved += max_bs * dp_size * 3
            if max_bs > 300:
                reserved += max_bs * dp_size * 1.5
        reserved += piecewise_cuda_graph_sizes * 8
        if g > 60 * gib:
            reserved = max(reserved, 10 * gib)
    if speculative:
        reserved += 6 * gib if str(speculative).lower() == "standalone" else 2 * gib
    return round((g - reserved) / g, 3)


def cuda_graph_batch_sizes(max_bs, disable_padding=False):
    """Decode batch sizes SGLang captures (0.5.9 _generate_cuda_graph_batch_sizes), cut at max_bs, ascending."""
    max_bs = int(max_bs)
    if max_bs < 1:
        return []
    if disable_padding:
        return list(range(1, max_bs + 1))
    sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    return [bs for bs in sizes if bs <= max_bs]


def _count_in_range(start, stop_incl, step, limit):
    """How many of range(start, stop_incl + 1, step) are <= limit."""
    top = min(stop_incl, limit)
    return 0 if top < start else (top - start) // step + 1


def cuda_graph_size_stats(max_bs, disable_padding=False):
    """(number of captured sizes, largest captured size) of cuda_graph_batch_sizes(max_bs) in O(1)."""
    max_bs = int(max_bs)
    if max_bs < 1:
        return 0, 0
    if disable_padding:
        return max_bs, max_bs
    count = sum(1 for b in (1, 2, 4, 8, 12) if b <= max_bs)
    count += _count_in_range(16, 256, 8, max_bs) + _count_in_range(272, 496, 16, max_bs)
    count += _count_in_range(512, max_bs, 32, max_bs)
    if max_bs >= 512:
        largest = 512 + (max_bs - 512) // 32 * 32
    elif max_bs >= 272:
        largest = min(272 + (max_bs - 272) // 16 * 16, 496)
    elif max_bs >= 16:
        largest = min(16 + (max_bs - 16) // 8 * 8, 256)
    else:
        largest = max(b for b in (1, 2, 4, 8, 12) if b <= max_bs)
    return count, largest
