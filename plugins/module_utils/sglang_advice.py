# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Advice after a failed start-up: the only place the collection computes the fraction (or graph batch size) to
retry with after a CUDA-graph capture OOM, and the fraction (or TP size) after a KV-pool OOM. The doctor's diagnosis
text, sglang-plan and the server role's retry (sglang_plan failed_attempt) all call these two functions; public
through sglang_memory. docs/memory.md "After a failed start-up" explains the choice of formula."""

from __future__ import absolute_import, annotations, division, print_function

__metaclass__ = type

import math
from dataclasses import asdict, dataclass, field

from ansible_collections.llmops.sglang.plugins.module_utils.sglang_graphs import cuda_graph_need_gib_for
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_model import PlanError
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_release import cuda_graph_batch_sizes

#: Headroom kept above the estimated graph need when recommending a fraction (GiB).
DEFAULT_MARGIN_GIB = 1.0

#: Lowest mem_fraction_static the recommendation will consider.
MIN_RECOMMENDED_FRACTION = 0.30

#: When a capture OOM only tells how much the graphs took before failing, the full need is assumed this much bigger
#: (the largest batch size is captured first, but the smaller ones still add memory).
OOM_NEED_GROWTH = 1.5

#: KV-OOM advice: the fraction suggested is the minimum viable one plus this share of the pre-load memory, so the pool
#: holds a useful number of tokens rather than a handful.
KV_OOM_HEADROOM_FRACTION = 0.03

#: KV-OOM advice: above this fraction the (1 - fraction) slack cannot hold CUDA graphs and activations any more;
#: the advice is then more GPUs (or a smaller checkpoint) instead of a fraction.
KV_OOM_MAX_FRACTION = 0.93


def _round_floats(d, ndigits):
    out = {}
    for k, v in d.items():
        if isinstance(v, float):
            out[k] = round(v, ndigits)
        elif isinstance(v, dict):
            out[k] = _round_floats(v, ndigits)
        else:
            out[k] = v
    return out


def _finite(name, value, *, positive=False, allow_none=True):
    if value is None:
        if allow_none:
            return None
        raise PlanError("%s is required" % name)
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise PlanError("%s must be a number, got %r" % (name, value)) from None
    if not math.isfinite(f):
        raise PlanError("%s must be a finite number, got %r" % (name, value))
    if positive and f <= 0:
        raise PlanError("%s must be > 0, got %s" % (name, value))
    return f


def recommend_fraction(p, margin, min_kv_tokens):
    """The plan's own recommendation for a planner p (sglang_memory._Planner: evaluate, sizes, max_bs, draft_weights,
    disable_graph): (fraction, max_bs or None). The largest fraction (0.01 steps) whose post-pool headroom holds the
    graphs plus the margin (and, up to 0.5.13, the draft model's pool); if none above the lowest useful fraction
    does, the largest captured bs that fits at some fraction, found by bisection (the need grows with the bs)."""

    def fits(hundredths, max_bs):
        e = p.evaluate(hundredths / 100.0, max_bs)
        return (
            e.verdict == "ok"
            and e.tokens >= min_kv_tokens
            and e.avail_after_pool_gib
            >= e.need_gib + margin + e.draft_pool_gib + (p.draft_weights if e.draft_pool_gib else 0)
        )

    lowest = round(MIN_RECOMMENDED_FRACTION * 100)
    for h in range(99, lowest - 1, -1):
        if fits(h, p.max_bs):
            return h / 100.0, None
    if p.disable_graph:
        return None, None

    def best_fraction(bs):
        return next((h for h in range(99, lowest - 1, -1) if fits(h, bs)), None)

    candidates = [bs for bs in p.sizes(p.max_bs) if bs < p.max_bs]
    lo, hi, found = 0, len(candidates) - 1, None
    while lo <= hi:
        mid = (lo + hi) // 2
        h = best_fraction(candidates[mid])
        if h is None:
            hi = mid - 1
        else:
            found = (h / 100.0, candidates[mid])
            lo = mid + 1
    return found if found else (None, None)


@dataclass
class CaptureOomAdvice:
    """What to relaunch with after 'Capture cuda graph failed: CUDA out of memory'.

    mem_fraction_static: the fraction to use (None: no fraction helps). cuda_graph_max_bs: a lower graph max batch
    size when the fraction alone cannot make room (None: keep it). alternative_cuda_graph_max_bs: the largest captured
    batch size that would fit at the failed fraction (the other way out; None when none does). inputs: the figures the
    advice was computed from (feeding them back to capture_oom_advice gives the same advice)."""

    mem_fraction_static: float | None
    cuda_graph_max_bs: int | None
    alternative_cuda_graph_max_bs: int | None
    need_estimate_gib: float
    required_avail_gib: float
    free_more_gib: float
    pool_ratio: float
    reason: str
    inputs: dict = field(default_factory=dict)

    def as_dict(self, ndigits=3):
        return _round_floats(asdict(self), ndigits)


def _pool_ratio(pre, fraction, free_after_weights, kv_pool):
    """Actual pool bytes per budgeted byte, from the failed attempt's own figures (1.0 when they do not tell)."""
    if free_after_weights is None or kv_pool is None:
        return 1.0
    budget = free_after_weights - pre * (1.0 - fraction)
    if budget <= 0 or kv_pool <= 0:
        return 1.0
    # The pool also holds one page of padding; a ratio below 1 or above 2 means the figures are not one attempt's.
    ratio = kv_pool / budget
    return ratio if 1.0 <= ratio <= 2.0 else 1.0


def _scaled_graph_need(need, max_bs, bs, family):
    full = cuda_graph_need_gib_for(max_bs, family)
    return need * cuda_graph_need_gib_for(bs, family) / full if full else 0.0


def capture_oom_advice(
    *,
    pre_load_free_gib,
    capture_free_gib,
    mem_fraction_static,
    tried_to_allocate_gib=None,
    free_at_oom_gib=None,
    free_after_weights_gib=None,
    kv_pool_gib=None,
    observed_need_gib=None,
    cuda_graph_max_bs=None,
    family="mha",
    margin_gib=DEFAULT_MARGIN_GIB,
    min_fraction=MIN_RECOMMENDED_FRACTION,
    growth=OOM_NEED_GROWTH,
):
    """The fraction (or graph max batch size) that should survive a CUDA-graph capture that ran out of memory.

    Every input is a figure SGLang logged for the failed attempt (all GiB, as SGLang prints "GB"), taken from the
    rank that failed (or the smallest over ranks):

    pre_load_free_gib       "Load weight begin. avail mem=" (what mem_fraction_static is a fraction of)
    capture_free_gib        "Capture cuda graph begin ... avail mem=" (else "Memory pool end. avail mem=")
    mem_fraction_static     the fraction the attempt ran with (server_args)
    tried_to_allocate_gib   torch's "Tried to allocate X" in the OOM message
    free_at_oom_gib         torch's "of which Y is free"
    free_after_weights_gib  "Load weight end. avail mem=" (bounds the fraction from below: the pool must stay > 0)
    kv_pool_gib             "KV Cache is allocated ... KV size:" (with free_after_weights_gib gives the pool ratio)
    observed_need_gib       a capture need measured by a successful run ("Capture cuda graph end ... mem usage=")
    cuda_graph_max_bs       the captured maximum batch size (server_args; default 512)
    family                  "mha", "mla" or "dsa" (only shapes the scaling to a smaller batch size)

    The capture needed at least (capture_free - free_at_oom) + tried_to_allocate, and more than capture_free; that
    lower bound is grown by ``growth`` (the failed capture had more sizes to go), the margin is added, and the fraction
    is lowered until the pool shrinks by the deficit: 0.01 of fraction frees pre_load x 0.01 x pool_ratio GiB, where
    pool_ratio = kv_pool / (free_after_weights - pre_load x (1 - fraction)) is what the pool really takes per budgeted
    byte (1.11 for DSA + fp8 KV before 0.5.18). Returns a CaptureOomAdvice.
    """
    f = _finite("mem_fraction_static", mem_fraction_static, allow_none=False)
    if not 0.0 < f < 1.0:
        raise PlanError("mem_fraction_static must be in (0, 1), got %s" % mem_fraction_static)
    pre = _finite("pre_load_free_gib", pre_load_free_gib, positive=True, allow_none=False)
    avail = _finite("capture_free_gib", capture_free_gib, allow_none=False)
    tried = _finite("tried_to_allocate_gib", tried_to_allocate_gib)
    free = _finite("free_at_oom_gib", free_at_oom_gib)
    after_weights = _finite("free_after_weights_gib", free_after_weights_gib)
    kv_pool = _finite("kv_pool_gib", kv_pool_gib)
    observed = _finite("observed_need_gib", observed_need_gib)
    margin = _finite("margin_gib", margin_gib, allow_none=False)
    max_bs = int(cuda_graph_max_bs) if cuda_graph_max_bs else 512
    if max_bs < 1:
        raise PlanError("cuda_graph_max_bs must be >= 1, got %s" % cuda_graph_max_bs)
    inputs = dict(
        pre_load_free_gib=pre,
        capture_free_gib=avail,
        mem_fraction_static=f,
        tried_to_allocate_gib=tried,
        free_at_oom_gib=free,
        free_after_weights_gib=after_weights,
        kv_pool_gib=kv_pool,
        observed_need_gib=observed,
        cuda_graph_max_bs=max_bs,
        family=family,
        margin_gib=margin,
    )
    if observed is not None:
        need = observed
        how = "observed need %.2f GiB" % need
    else:
        used = max(avail - free, 0.0) if free is not None else avail
        lower = max(used + (tried or 0.0), avail)
        need = lower * float(growth)
        how = "capture needed > %.2f GiB (used %.2f, then asked %.2f); assumed %.2f" % (lower, used, tried or 0.0, need)
    ratio = _pool_ratio(pre, f, after_weights, kv_pool)
    required = need + margin
    deficit = required - avail
    per_hundredth = pre * ratio / 100.0  # GiB the pool gives back per 0.01 of fraction
    f_h = math.floor(f * 100 + 1e-9)  # fractions are handled in hundredths
    steps = max(math.ceil(deficit / per_hundredth - 1e-9), 1)
    floor_h = math.ceil(float(min_fraction) * 100 - 1e-9)
    if after_weights is not None:
        # the KV budget after_weights - pre x (1 - f) must stay > 0
        floor_h = max(floor_h, math.floor((1.0 - after_weights / pre) * 100) + 1)
    # the other way out: the largest captured batch size that fits at the failed fraction
    alternative = None
    for bs in reversed(cuda_graph_batch_sizes(max_bs)):
        if bs < max_bs and avail >= _scaled_graph_need(need, max_bs, bs, family) + margin:
            alternative = bs
            break
    new_h = f_h - steps
    if new_h >= floor_h:
        return CaptureOomAdvice(
            new_h / 100.0,
            None,
            alternative,
            need,
            required,
            max(deficit, 0.0),
            ratio,
            how + "; lower the fraction by %d hundredths to free %.2f GiB" % (steps, steps * per_hundredth),
            inputs,
        )
    # The fraction alone cannot make room: go to the floor and lower the graph max batch size.
    h = min(floor_h, f_h)
    avail_at = avail + (f_h - h) * per_hundredth
    for bs in reversed(cuda_graph_batch_sizes(max_bs)):
        if bs >= max_bs:
            continue
        scaled = _scaled_graph_need(need, max_bs, bs, family)
        if avail_at >= scaled + margin:
            return CaptureOomAdvice(
                h / 100.0,
                bs,
                alternative,
                scaled,
                scaled + margin,
                max(avail_at - avail, 0.0),
                ratio,
                how + "; at fraction %.2f %.2f GiB is left: lower cuda_graph_max_bs to %d" % (h / 100.0, avail_at, bs),
                inputs,
            )
    return CaptureOomAdvice(
        None,
        None,
        None,
        need,
        required,
        max(deficit, 0.0),
        ratio,
        how + "; even bs 1 at fraction %.2f does not fit: disable CUDA graphs or add GPUs" % (h / 100.0),
        inputs,
    )


@dataclass
class KvOomAdvice:
    """What to relaunch with when the KV pool could not be sized after the weights loaded.

    action: "raise_mem_fraction_static" (mem_fraction_static is the value to use) or "add_gpus" (tp_size is the next
    TP size when the current one is known; mem_fraction_static is what a fraction alone would need, for reference).
    minimum_fraction: the fraction at which the KV budget is zero (SGLang's own "Raise above" figure when logged)."""

    action: str
    mem_fraction_static: float
    minimum_fraction: float
    tp_size: int | None
    reason: str
    inputs: dict = field(default_factory=dict)

    def as_dict(self, ndigits=4):
        return _round_floats(asdict(self), ndigits)


def kv_oom_advice(
    *,
    pre_load_free_gib=None,
    free_after_weights_gib=None,
    mem_fraction_static=None,
    logged_min_fraction=None,
    tp_size=None,
    headroom_fraction=KV_OOM_HEADROOM_FRACTION,
    max_fraction=KV_OOM_MAX_FRACTION,
):
    """The fraction (or more GPUs) that lets the KV pool be sized after the weights loaded.

    Inputs are the failed attempt's logged figures (GiB): pre_load_free_gib ("Load weight begin. avail mem="),
    free_after_weights_gib ("Load weight end. avail mem="), the fraction it ran with, and logged_min_fraction when
    SGLang printed one ("Raise --mem-fraction-static above X" / "Not enough memory ... Current value"). The KV budget
    is free_after_weights - pre_load x (1 - fraction), so it is zero at 1 - free_after_weights / pre_load; the advice
    is that minimum plus headroom_fraction of pre-load memory, rounded up to 0.01. Above max_fraction the slack left
    for graphs and activations is too small: the advice becomes more GPUs (tp_size x 2). Returns a KvOomAdvice.
    """
    pre = _finite("pre_load_free_gib", pre_load_free_gib, positive=True)
    after = _finite("free_after_weights_gib", free_after_weights_gib)
    frac = _finite("mem_fraction_static", mem_fraction_static)
    logged = _finite("logged_min_fraction", logged_min_fraction)
    inputs = dict(
        pre_load_free_gib=pre,
        free_after_weights_gib=after,
        mem_fraction_static=frac,
        logged_min_fraction=logged,
        tp_size=int(tp_size) if tp_size else None,
    )
    if logged is not None:
        minimum = logged
        how = "SGLang asks for more than %.4f" % minimum
    elif pre is not None and after is not None:
        minimum = 1.0 - after / pre
        how = "the KV budget is zero at 1 - %.2f/%.2f GiB = %.4f" % (after, pre, minimum)
    else:
        raise PlanError(
            "KV-OOM advice needs the logged minimum fraction or both pre_load_free_gib and free_after_weights_gib"
        )
    value = math.ceil((minimum + float(headroom_fraction)) * 100 - 1e-9) / 100.0
    next_tp = int(tp_size) * 2 if tp_size else None
    if value > float(max_fraction):
        return KvOomAdvice(
            "add_gpus",
            value,
            minimum,
            next_tp,
            how + "; a fraction of %.2f leaves no room for graphs and activations: spread the model over more GPUs%s "
            "or use a smaller checkpoint" % (value, " (--tp-size %d)" % next_tp if next_tp else ""),
            inputs,
        )
    return KvOomAdvice(
        "raise_mem_fraction_static",
        value,
        minimum,
        None,
        how + "; raise --mem-fraction-static%s to %.2f" % (" from %.2f" % frac if frac is not None else "", value),
        inputs,
    )
