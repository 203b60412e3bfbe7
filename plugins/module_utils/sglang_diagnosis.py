# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Diagnosis and advice for a parsed SGLang start-up log: one sentence and a machine-readable suggestion.

Every number in the advice comes from ``sglang_memory`` (``capture_oom_advice``, ``kv_oom_advice``: the same
functions the planner CLI and the server role's retry call); flag names come from the release window
(``sglang_versions.FLAGS``). ``diagnose(log)`` takes a ``sglang_log.StartupLog``.
"""

from __future__ import annotations

__metaclass__ = type

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_memory as memory
from ansible_collections.llmops.sglang.plugins.module_utils import sglang_versions as versions
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_phases import STALL_HINTS


def graph_bs_flag(window):
    """The cuda-graph max batch size flag for the detected format (renamed per phase in 0.5.14)."""
    return "--cuda-graph-max-bs-decode" if window.at_least("0.5.14") else "--cuda-graph-max-bs"


def _family(log, rank):
    st = rank.target if rank is not None else None
    if st is not None and st.kv_size_gb is not None and st.k_size_gb is None:
        return "mla"
    return "mha"


def _failed_rank(log):
    rank = log.ranks.get(log.oom.get("rank") or "")
    if rank is None and log.rank_order:
        rank = log.ranks[log.rank_order[0]]
    return rank


def _graph_failure_advice(log, stage):
    """Advice for a prefill/piecewise graph failure: the decode graphs are not the problem, and the flag that turns
    the failing graphs off depends on the release (sglang_versions.FLAGS, checked by make conformance)."""
    w = log.window
    base = {"action": "disable_prefill_cuda_graph", "stage": stage}
    if stage == "piecewise" and versions.flag_in("--disable-piecewise-cuda-graph", w):
        base.update(flag="--disable-piecewise-cuda-graph", args=["--disable-piecewise-cuda-graph"])
        how = "relaunch with --disable-piecewise-cuda-graph"
    elif stage == "piecewise" and versions.flag_in("--enable-piecewise-cuda-graph", w):
        base.update(flag="--enable-piecewise-cuda-graph", remove=True, args=[])
        how = "relaunch without --enable-piecewise-cuda-graph (piecewise graphs are opt-in in this release)"
    elif versions.flag_in("--cuda-graph-backend-prefill", w) and w.at_least("0.5.14"):
        base.update(flag="--cuda-graph-backend-prefill", args=["--cuda-graph-backend-prefill", "disabled"])
        how = "relaunch with --cuda-graph-backend-prefill disabled"
    else:
        how = (
            "turn off this release's prefill/piecewise CUDA graphs (the release window %s is too wide to name the "
            "flag)" % w.label
        )
    return "The failing capture was the %s graph, not the decode graphs: %s." % (stage, how), base


def capture_oom(log):
    """(what happened, sentence, suggestion) for an out-of-memory in CUDA-graph capture."""
    t = log.totals()
    sa = log.server_args
    frac = sa.get("mem_fraction_static")
    rank = _failed_rank(log)
    begin = None
    if rank is not None:
        begin = rank.capture_begin_avail_gb if rank.capture_begin_avail_gb is not None else rank.avail_after_pool_gb
    if begin is None:
        begin = t["avail_after_pool_min_gb"]
    tried, free = log.oom.get("tried_gb"), log.oom.get("free_gb")
    parts = []
    if begin is not None:
        parts.append("%.2f GB was free when capture began" % begin)
    if tried is not None:
        parts.append(
            "it tried to allocate %.2f GB more" % tried + (" with %.2f GB free" % free if free is not None else "")
        )
    stage = log.graph_fail.get("stage") or log.oom.get("during")
    flag = graph_bs_flag(log.window)
    max_bs = sa.get("cuda_graph_max_bs_decode") or sa.get("cuda_graph_max_bs") or (max(log.capture_bs or [0]) or None)
    sugg = {"action": "lower_mem_fraction_static", "flag": "--mem-fraction-static", "current": frac}
    pre = t["pre_load_min_gb"]
    try:
        adv = memory.capture_oom_advice(
            pre_load_free_gib=pre,
            capture_free_gib=begin,
            mem_fraction_static=frac,
            tried_to_allocate_gib=tried,
            free_at_oom_gib=free,
            free_after_weights_gib=t["avail_after_weights_min_gb"],
            kv_pool_gib=t["kv_size_max_gb"],
            cuda_graph_max_bs=max_bs,
            family=_family(log, rank),
        )
    except (memory.PlanError, TypeError, ValueError):
        adv = None
    if adv is not None and adv.mem_fraction_static is not None:
        new = adv.mem_fraction_static
        sugg.update(
            value=new,
            args=["--mem-fraction-static", "%.2f" % new],
            pre_load_gb=pre,
            needed_free_gb=round(adv.required_avail_gib, 2),
            free_more_gb=round(adv.free_more_gib, 2),
            inputs=adv.inputs,
        )
        sentence = "Lower --mem-fraction-static from %.2f to %.2f (%s)." % (frac, new, adv.reason)
        if adv.cuda_graph_max_bs:
            sugg["cuda_graph_max_bs"] = adv.cuda_graph_max_bs
            sugg["args"] += [flag, str(adv.cuda_graph_max_bs)]
            sentence += " Also lower %s to %d." % (flag, adv.cuda_graph_max_bs)
        alt = adv.alternative_cuda_graph_max_bs
        if alt and max_bs:
            sugg["alternative"] = {"action": "lower_cuda_graph_max_bs", "flag": flag, "value": alt, "current": max_bs}
            sentence += " Or keep the fraction and lower %s from %d to %d." % (flag, max_bs, alt)
    elif adv is not None:
        sugg.update(action="disable_cuda_graph", reason=adv.reason, inputs=adv.inputs)
        sentence = "No fraction makes room for the graphs (%s)." % adv.reason
    else:
        sentence = "Lower --mem-fraction-static to leave more memory for CUDA graphs (the log lacks the figures)."
    if stage in ("prefill", "piecewise"):
        extra, graph_sugg = _graph_failure_advice(log, stage)
        sugg["graph_stage"] = stage
        sugg["prefill"] = graph_sugg
        sentence += " " + extra
    return "; ".join(parts), sentence.strip(), sugg


def kv_oom(log):
    t = log.totals()
    frac = log.server_args.get("mem_fraction_static")
    pre, avail = t["pre_load_min_gb"], t["avail_after_weights_min_gb"]
    tp = log.server_args.get("tp_size")
    what = "the KV cache could not be sized after the weights were loaded"
    if avail is not None:
        what += " (%.2f GB free after weights" % avail + (", %.2f GB before)" % pre if pre else ")")
    if log.kv_fail.get("profiled_tokens") is not None:
        what += "; profiled KV tokens = %d" % log.kv_fail["profiled_tokens"]
    if log.kv_fail.get("kind") in ("kv_hybrid_pool", "kv_swa_pool"):
        what += "; the %s could not be sized" % (
            "SWA pool" if log.kv_fail["kind"] == "kv_swa_pool" else "mamba state cache"
        )
    try:
        adv = memory.kv_oom_advice(
            pre_load_free_gib=pre,
            free_after_weights_gib=avail,
            mem_fraction_static=frac,
            logged_min_fraction=log.kv_fail.get("min_fraction"),
            tp_size=tp,
        )
    except (memory.PlanError, TypeError, ValueError):
        return what, "Raise --mem-fraction-static or add GPUs.", {"action": "raise_mem_fraction_static"}
    sugg = {
        "action": adv.action,
        "flag": "--mem-fraction-static",
        "current": frac,
        "minimum": round(adv.minimum_fraction, 4),
        "value": adv.mem_fraction_static,
        "args": ["--mem-fraction-static", "%.2f" % adv.mem_fraction_static],
    }
    if adv.action == "add_gpus":
        sugg["alternative"] = {"action": "raise_mem_fraction_static", "value": adv.mem_fraction_static}
        if adv.tp_size:
            sugg.update(flag="--tp-size", value=adv.tp_size, args=["--tp-size", str(adv.tp_size)])
    return what, adv.reason[:1].upper() + adv.reason[1:] + ".", sugg


def weights_oom(log):
    t = log.totals()
    tp = log.server_args.get("tp_size")
    sugg = {"action": "add_gpus", "flag": "--tp-size", "alternative": {"action": "use_quantized_checkpoint"}}
    if tp:
        sugg.update(current=tp, value=tp * 2, args=["--tp-size", str(tp * 2)])
    what = "the weights did not fit while loading"
    if t["pre_load_min_gb"]:
        what += " (%.2f GB free per GPU before loading)" % t["pre_load_min_gb"]
    sentence = "Give the model more GPUs%s or use a quantized checkpoint (FP8/NVFP4)." % (
        " (--tp-size %d)" % (tp * 2) if tp else ""
    )
    return what, sentence, sugg


def _ready(log):
    t = log.totals()
    bits = ["SGLang is ready (format %s, %d rank%s)" % (log.window.label, t["ranks"], "" if t["ranks"] == 1 else "s")]
    if t["draft_ranks"]:
        bits.append("with a draft model on %d rank%s" % (t["draft_ranks"], "" if t["draft_ranks"] == 1 else "s"))
    if log.max_total_num_tokens is not None:
        bits.append("max_total_num_tokens=%d" % log.max_total_num_tokens)
    if t["avail_after_graph_min_gb"] is not None:
        bits.append("%.2f GB free per GPU after CUDA graphs" % t["avail_after_graph_min_gb"])
    elif t["avail_after_pool_min_gb"] is not None:
        bits.append("%.2f GB free after the memory pool" % t["avail_after_pool_min_gb"])
    return ", ".join(bits) + ".", None


def _crash(log, at, when):
    f = log.failure or {}
    line = f.get("line", "")
    if f.get("cut"):
        what = "the log ends inside a traceback%s: the exception itself is missing" % (
            " while CUDA graphs were being captured" if f.get("during_capture") else ""
        )
        return (
            "SGLang failed%s %s; %s. Read the full log (journalctl -u sglang) for the exception." % (at, when, what),
            {"action": "read_traceback", "cut": True, "during_capture": bool(f.get("during_capture"))},
        )
    stage = f.get("graph_failure")
    if stage:
        if stage in ("prefill", "piecewise"):
            sentence, sugg = _graph_failure_advice(log, stage)
        else:
            sentence = "Lower %s or relaunch with --disable-cuda-graph to confirm." % graph_bs_flag(log.window)
            sugg = {"action": "lower_cuda_graph_max_bs", "flag": graph_bs_flag(log.window), "stage": stage}
        return "CUDA-graph capture (%s) failed%s: %s. %s" % (stage, at, (log.last_error or line)[:300], sentence), sugg
    if f.get("warmup"):
        return (
            "The server started but its warm-up request failed%s: %s" % (at, line[:300]),
            {"action": "read_log", "last_error": log.last_error},
        )
    if f.get("cause") == "nvshmem":
        return (
            "SGLang crashed%s %s: NVSHMEM (DeepEP's transport) failed to initialise: %s. Check the RDMA "
            "devices NVSHMEM uses (NVSHMEM_HCA_LIST, NVSHMEM_IB_GID_INDEX), that every node reaches the others, "
            "and that DeepEP was built against this NVSHMEM." % (at, when, line[:300]),
            {"action": "check_nvshmem", "first_error": log.first_error},
        )
    first = f.get("first_error") or (log.first_error if f.get("child_exit") else None)
    if f.get("child_exit"):
        cause = "first error: %s" % first[:300] if first else "no error line before it in this log"
        return "A child process of SGLang exited%s %s (%s); %s." % (at, when, f["child_exit"][:200], cause), {
            "action": "read_traceback",
            "first_error": first,
        }
    if log.last_error and log.last_error not in line:
        line = "%s (%s)" % (line, log.last_error) if line else log.last_error
    return "SGLang crashed%s %s: %s" % (at, when, line[:400]), {
        "action": "read_traceback",
        "last_error": log.last_error,
    }


def diagnose(log):
    """(diagnosis sentence, suggestion dict or None) for the parser's current state."""
    outcome = log.outcome
    phase = log.phase or "nothing"
    # "during <phase>", or where a log without a start-up line stands
    when = "during %s" % log.phase if log.phase else "before any start-up line"
    where = log.failure["rank"] if log.failure and log.failure.get("rank") else None
    at = " on %s" % where if where else ""
    if outcome == "ready":
        return _ready(log)
    if outcome == "oom_cuda_graph":
        what, sentence, sugg = capture_oom(log)
        stage = log.graph_fail.get("stage") or log.oom.get("during") or "decode"
        return "CUDA out of memory while capturing CUDA graphs (%s)%s: %s. %s" % (
            stage,
            at,
            what or "no numbers logged",
            sentence,
        ), sugg
    if outcome == "oom_kv_pool":
        what, sentence, sugg = kv_oom(log)
        return "Out of memory for the KV pool%s: %s. %s" % (at, what, sentence), sugg
    if outcome == "oom_weights":
        what, sentence, sugg = weights_oom(log)
        return "CUDA out of memory while loading weights%s: %s. %s" % (at, what, sentence), sugg
    if outcome == "sm120_shared_memory":
        req = log.sm120
        num = " (needs %d bytes, the GPU has %d)" % (req["required"], req["limit"]) if req else ""
        return (
            "A Triton kernel asked for more shared memory than a Blackwell SM120 GPU has%s%s. Build SGLang with the "
            "SM120 extend-attention block-size fix (PR #14311, first released in 0.5.9) or a later release."
            % (num, at),
            {"action": "rebuild_sglang", "fix": "sgl-project/sglang#14311", "min_version": "0.5.9"},
        )
    if outcome == "port_in_use":
        port = log.port
        if port == "internal":
            return (
                "An internal SGLang port (dist-init/NCCL/scheduler) is already in use; stop the other SGLang "
                "instance or set --nccl-port/--port explicitly.",
                {"action": "free_port", "port": None},
            )
        return (
            "Port %s is already in use%s; stop whatever listens on it or start SGLang with another --port."
            % (port, at),
            {"action": "free_port", "port": port, "flag": "--port"},
        )
    if outcome == "nccl_error" and (log.failure or {}).get("peer_lost"):
        return (
            "NCCL reports that a peer went away%s %s: another node (or rank) of this tensor-parallel group "
            "failed or was stopped first; its own log has the cause. (%s)" % (at, when, log.failure["line"][:200]),
            {"action": "read_peer_logs"},
        )
    if outcome == "nccl_error":
        return (
            "NCCL failed%s %s: check the GPU interconnect and driver, rerun with NCCL_DEBUG=INFO; on PCIe-only "
            "machines try --disable-custom-all-reduce. (%s)" % (at, when, log.failure["line"][:200]),
            {"action": "debug_nccl", "env": {"NCCL_DEBUG": "INFO"}, "flag": "--disable-custom-all-reduce"},
        )
    if outcome == "dist_init_timeout":
        rv = log.rendezvous
        if rv.get("side") == "head":
            what = "only %d of %d ranks joined the rendezvous within %d s" % (rv["joined"], rv["world"], rv["seconds"])
        elif rv.get("side") == "node":
            what = "this node could not reach the head's rendezvous at %s:%d within %d s" % (
                rv["host"],
                rv["port"],
                rv["seconds"],
            )
        else:
            what = "the rendezvous timed out"
        return (
            "torch.distributed initialisation timed out%s: %s - a node never joined. Check that every node of the "
            "group runs SGLang with the same --nnodes/--dist-init-addr, that the head's dist-init port is open "
            "between the nodes, and NCCL_SOCKET_IFNAME/GLOO_SOCKET_IFNAME." % (at, what),
            dict({"action": "check_rendezvous"}, **rv),
        )
    if outcome == "memory_unbalanced":
        return (
            "The GPUs have unequal free memory%s (%s): another process holds memory on some GPU. Stop it "
            "(nvidia-smi shows which) and relaunch." % (at, (log.unbalanced or "")[:200]),
            {"action": "free_gpu_memory"},
        )
    if outcome == "crash":
        return _crash(log, at, when)
    if outcome == "stalled":
        secs = log.stall["seconds"]
        hint = STALL_HINTS.get(phase, "no progress")
        return (
            "No new log line for %.0f s in phase %s: %s." % (secs, phase, hint),
            {"action": "investigate_stall", "phase": phase, "seconds": secs},
        )
    return "The log ends in phase %s without a ready line or a failure." % phase, None
