# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Which SGLang, and what it does by default, release by release: version parsing, the default
--mem-fraction-static and its reserves, chunked-prefill and CUDA-graph defaults, the captured batch sizes.
Every rule cites the release source it was read from (docs/memory.md). Standard library only."""

from __future__ import absolute_import, annotations, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.llmops.sglang.plugins.module_utils import gpu_arch as gpu_arch_db
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
        raise PlanError("SGLang version %r is not of the form X.Y.Z: give the release, e.g. 0.5.9" % (version,))
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


#: GPU memory that is gone before SGLang's "Load weight begin. avail mem=" (CUDA context, NCCL and torch.distributed
#: buffers), in GiB, by compute-capability major. Only sm_120 is measured (reference: a 97 887 MiB RTX PRO 6000
#: reports 94.25 GiB free at start, TP8 -> 95.593 - 94.25 = 1.34 GiB); the others are estimates. Measured values
#: (free_at_start_gib) always replace these.
CONTEXT_OVERHEAD_GIB = {12: 1.34, 11: 1.34, 10: 1.34, 9: 1.0, 8: 0.9, 7: 0.8}
#: Used when the GPU arch is unknown: the one measured value.
DEFAULT_CONTEXT_OVERHEAD_GIB = 1.34


def context_overhead_gib(gpu_arch=None):
    """Default GiB lost before weights load (CUDA context, NCCL) for an arch; see CONTEXT_OVERHEAD_GIB."""
    cc = parse_gpu_arch(gpu_arch)
    if cc is None:
        return DEFAULT_CONTEXT_OVERHEAD_GIB
    return CONTEXT_OVERHEAD_GIB.get(cc[0], DEFAULT_CONTEXT_OVERHEAD_GIB)


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
    """'sm_120', 'sm120a', '12.0', '120', 90 -> (major, minor); None -> None (spellings: gpu_arch.parse)."""
    if arch is None or arch == "":
        return None
    try:
        return gpu_arch_db.parse(arch)
    except gpu_arch_db.ArchError as exc:
        raise PlanError(str(exc)) from None


# Sources (file:line in the release wheels, sglang/srt/...): the GPU classes and the reserve are in
# server_args.py ServerArgs._handle_gpu_memory_settings -- 0.5.3 :567-629, 0.5.9 :911-1065, 0.5.10 :1141-1325,
# 0.5.13 :1444-1632, 0.5.14 :3122-3310 (per-phase graph configs), 0.5.18 :4802-4990 -- and from 0.5.20 in
# arg_groups/memory_hook.py handle_gpu_memory_settings (0.5.23 :47-330, reserve_for_graph_mb :357-399).

#: Speculative algorithms SGLang accepts (--speculative-algorithm); NEXTN/MTP are served as EAGLE.
SPECULATIVE_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "MTP", "STANDALONE", "NGRAM")


def canonical_speculative_algorithm(algorithm):
    """None, or the upper-case --speculative-algorithm; PlanError for an unknown one."""
    if algorithm in (None, "", "none", "None"):
        return None
    algo = str(algorithm).strip().upper()
    if algo not in SPECULATIVE_ALGORITHMS:
        raise PlanError(
            "speculative algorithm %r is not one SGLang knows: use %s" % (algorithm, ", ".join(SPECULATIVE_ALGORITHMS))
        )
    return algo


def speculative_reserve_mib(sglang_version, algorithm):
    """MiB the default fraction reserves for a draft model and its graphs: 0.5.3-0.5.9 +6 GiB STANDALONE, +2 GiB
    other draft algorithms, none for NGRAM (0.5.9 server_args.py:1051-1057); 0.5.10-0.5.13 +6 / +4 GiB (0.5.10
    :1316-1322); none from 0.5.14 on, whose profiler sizes the draft pool inside the budget (0.5.14 :3276-3305)."""
    v = parse_version(sglang_version)
    algo = canonical_speculative_algorithm(algorithm)
    if algo is None or algo == "NGRAM" or v < (0, 5, 3) or v >= (0, 5, 14):
        return 0.0
    if algo == "STANDALONE":
        return 6 * 1024.0
    return (4 if v >= (0, 5, 10) else 2) * 1024.0


def prefill_graph_token_sizes(max_tokens):
    """Token counts SGLang captures piecewise (0.5.8-0.5.13, _generate_piecewise_cuda_graph_tokens, 0.5.10
    server_args.py:1397-1415) or as prefill graphs (0.5.14+, _generate_prefill_cuda_graph_batch_sizes, :3384-3401)."""
    max_tokens = int(max_tokens)
    sizes = [*range(4, 33, 4), *range(48, 257, 16), *range(288, 513, 32), *range(576, 1025, 64)]
    sizes += [*range(1280, 4097, 256), *range(4608, max_tokens + 1, 512)]
    return [t for t in sizes if t <= max_tokens]


def prefill_graph_reserve_mib(
    sglang_version,
    *,
    chunked_prefill_size,
    mla=False,
    speculative=None,
    dp_attention=False,
    pp=1,
    multimodal=False,
    enable_piecewise=False,
    max_total_tokens=None,
    context_length=None,
):
    """MiB the default fraction reserves for piecewise (0.5.8-0.5.13) / prefill (0.5.14+) CUDA graphs.

    0.5.8/0.5.9 only with --enable-piecewise-cuda-graph (0.5.9 server_args.py:1044-1047). From 0.5.10 on by default
    (0.5.10 :1305-1312), switched off by speculative decoding, DP attention, PP > 1 or a multimodal model
    (_handle_piecewise_cuda_graph, 0.5.10 :1078-1139; 0.5.14 prefill rules :3002-3057). 8 MiB per captured token
    size, whose largest is the chunked-prefill size (2048 for MLA), capped by --max-total-tokens and (0.5.14+)
    --context-length (0.5.14 :3239-3268); MLA models reserve 1.5 GiB instead."""
    v = parse_version(sglang_version)
    if v < (0, 5, 8):
        return 0.0
    if v < (0, 5, 10):
        on = bool(enable_piecewise)
    else:
        on = not (speculative or dp_attention or int(pp) > 1 or multimodal)
    if not on:
        return 0.0
    if mla and v >= (0, 5, 10):
        return 1.5 * 1024
    max_tokens = 2048 if mla else int(chunked_prefill_size)
    if max_total_tokens:
        max_tokens = min(max_tokens, int(max_total_tokens))
    if context_length and v >= (0, 5, 14):
        max_tokens = min(max_tokens, int(context_length))
    return 8.0 * len(prefill_graph_token_sizes(max_tokens))


def default_graph_settings(sglang_version, gpu_mem_mib, tp=1, gpu_arch=None):
    """(chunked_prefill_size, cuda_graph_max_bs) SGLang picks when neither flag is given (0.5.3+: by GPU class).

    < 20 GiB 2048/8; < 35 GiB 2048/(16 if tp < 4 else 80) in 0.5.3-0.5.4 (0.5.3 server_args.py:574-586), 24/80 from
    0.5.5, and 4096/(48 or 160) for every architecture from 0.5.20 (0.5.23 memory_hook.py:101-116); < 60 GiB 4096/(32 or
    160); < 160 GiB 8192/(256 or 512); else 16384/512; unknown memory 4096/160 (0.5.9 :994-999). Before 0.5.3
    the decode list ended at 160 (8/80 under 25 GB), chunked prefill 8192 (2048 under 35 GiB) -- an approximation.
    gpu_arch is accepted for callers but no rule depends on it.
    """
    v = parse_version(sglang_version)
    tp = int(tp)
    if gpu_mem_mib is None:
        return (8192, 160) if v < (0, 5, 3) else (4096, 160)
    g = float(gpu_mem_mib)
    if v < (0, 5, 3):
        if g < 25000:
            return (2048, 8 if tp < 4 else 80)
        return (2048 if g < 35 * 1024 else 8192, 160)
    if g < 20 * 1024:
        return (2048, 8)
    if g < 35 * 1024:
        if v >= (0, 5, 20):
            return (4096, 48 if tp < 4 else 160)
        return (2048, (16 if v < (0, 5, 5) else 24) if tp < 4 else 80)
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
    mla=False,
    multimodal=False,
    enable_piecewise=False,
    max_total_tokens=None,
    context_length=None,
    deepep=False,
    post_capture_kv_sizing=False,
):
    """SGLang's default --mem-fraction-static, by version (sources above default_graph_settings).

    gpu_mem_mib is the smallest card's nvidia-smi memory.total (MiB). speculative: --speculative-algorithm. From 0.5.3:
    reserved MiB = 512 + max(chunked, 2048) x 1.5 + graph max bs x 2 + tp x pp / 8 x 1024 (+ DP attention
    max_bs x dp x 3, and x 1.5 more above bs 300) + the piecewise/prefill graph reserve; at least 10 GiB on cards
    above 60 GiB; then + the speculative reserve. VLM scaling and the AMD aiter rule are not modelled.
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
    chunk, max_bs = default_graph_settings(v, g, tp)
    chunk = chunked_prefill_size if chunked_prefill_size is not None else chunk
    max_bs = cuda_graph_max_bs if cuda_graph_max_bs is not None else max_bs
    spec = canonical_speculative_algorithm(speculative)
    dp_attention = bool(enable_dp_attention) and int(dp_size) > 1
    if v >= (0, 5, 16) and post_capture_kv_sizing and not mla:
        reserved = (1536 if v >= (0, 5, 18) else 512) + tp * pp / 8.0 * 1024
    else:
        reserved = 512 + max(chunk, 2048) * 1.5 + tp * pp / 8.0 * 1024 + max_bs * 2
        if dp_attention:
            reserved += max_bs * int(dp_size) * 3
            if max_bs > 300:
                reserved += max_bs * int(dp_size) * 1.5
        reserved += prefill_graph_reserve_mib(
            v,
            chunked_prefill_size=chunk,
            mla=mla,
            speculative=spec,
            dp_attention=dp_attention,
            pp=pp,
            multimodal=multimodal,
            enable_piecewise=enable_piecewise,
            max_total_tokens=max_total_tokens,
            context_length=context_length,
        )
        if g > 60 * gib:
            reserved = max(reserved, 10 * gib)
        if deepep and v >= (0, 5, 16):
            reserved += 2048
    reserved += speculative_reserve_mib(v, spec)
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


def captured_batch_sizes(max_bs, max_num_reqs=None, disable_padding=False):
    """What the decode graph runner captures: the list cut at max_bs, then at the request table's size, which is added
    when the list went beyond it (get_batch_sizes_to_capture, 0.5.9 cuda_graph_runner.py:190-215: with
    --max-running-requests 8 the graphs are 1, 2, 4, 8)."""
    sizes = cuda_graph_batch_sizes(max_bs, disable_padding)
    if max_num_reqs is None or not sizes or sizes[-1] <= int(max_num_reqs):
        return sizes
    reqs = int(max_num_reqs)
    return sorted({bs for bs in sizes if bs <= reqs} | {reqs})


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
