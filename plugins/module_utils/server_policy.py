# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The server stage's decisions, in one place: which memory settings the first launch uses, when a launch restarts
SGLang (and when that restart is drained or guarded against an outage), when a node other than the head counts as
ready, and after each attempt whether the launches are finished or which fraction the next one uses.

roles/server/tasks/main.yml and attempt.yml only act on these answers: the module llmops.sglang.sglang_attempt
returns choose_first() and judge(), the filters llmops.sglang.server_node_result and llmops.sglang.server_restart_plan
return node_result() and restart_plan(). The arithmetic of a retry fraction is module_utils/sglang_advice.py's."""

from __future__ import absolute_import, annotations, division, print_function

__metaclass__ = type

import json
import re

from ansible_collections.llmops.sglang.plugins.module_utils.sglang_advice import capture_oom_advice
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_memory import plan as memory_plan
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_release import resolve_sglang_version

#: What can make a launch restart a running SGLang (restart_plan's ``causes``).
RESTART_CAUSES = ("unit", "launcher", "env", "force", "set_switch", "model_switch", "pending")
#: The causes for which the drain (server_before_restart, the router role's) runs: a restart this run asks for.
DRAINED_CAUSES = ("unit", "launcher", "env", "force", "set_switch", "model_switch")
#: The causes the outage guard (downtime.yml) refuses without a drain: what a routine run changed, or a restart an
#: earlier run refused. A forced restart is the operator's consent; build-set and model switches run from the day-two
#: playbooks, which roll replicas through the router.
GUARDED_CAUSES = ("unit", "launcher", "env", "pending")

ON_CAPTURE_OOM = ("retry", "fail")

#: The planner's settings the server stage writes once (the module's O(planner) option); the fraction and the
#: CUDA-graph batch size are each attempt's.
PLANNER_KEYS = (
    "model_path",
    "tp",
    "gpu_mem_mib",
    "gpu_arch",
    "kv_cache_dtype",
    "sglang_record",
    "max_running_requests",
    "margin_gib",
)


class PolicyError(ValueError):
    """An input the policy cannot decide on (the module reports it as its one-line failure)."""


def _same(a, b):
    """Equality of two JSON-shaped values as the record stores them (1 == 1.0, key order ignored)."""
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _fraction(value, what):
    try:
        f = float(value)
    except (TypeError, ValueError):
        raise PolicyError("expected %s to be a number in (0, 1); found %r" % (what, value)) from None
    if not 0.0 < f < 1.0:
        raise PolicyError("expected %s to be a number in (0, 1); found %r" % (what, value))
    return f


def plan_at(planner, fraction, graph_bs):
    """The planner (module_utils/sglang_memory.py) on the server's settings at one fraction and batch size, as a
    dict; None without planner settings (a host whose GPUs were not read). fraction None: SGLang's default."""
    if not planner:
        return None
    unknown = sorted(set(planner) - set(PLANNER_KEYS))
    if unknown:
        raise PolicyError(
            "expected planner settings among %s; found %s" % (", ".join(PLANNER_KEYS), ", ".join(unknown))
        )
    version = resolve_sglang_version(None, planner["sglang_record"])
    return memory_plan(
        planner["model_path"],
        gpu_mem_mib=planner["gpu_mem_mib"],
        tp=planner.get("tp") or 1,
        gpu_arch=planner.get("gpu_arch") or None,
        mem_fraction_static=fraction,
        kv_cache_dtype=planner.get("kv_cache_dtype") or "auto",
        cuda_graph_max_bs=graph_bs or None,
        sglang_version=version,
        max_running_requests=planner.get("max_running_requests") or None,
        margin_gib=planner.get("margin_gib", 1.0),
    ).as_dict()


def choose_first(requested_fraction, requested_graph_bs, plan, *, previous, request, on_capture_oom):
    """The memory settings of the first launch: {fraction, graph_bs, reused}.

    requested_fraction: server_mem_fraction_static ("auto" or a number); requested_graph_bs: server_cuda_graph_max_bs
    (0/None: SGLang's default). plan: the planner's plan at the requested settings (its recommendation is used with
    "auto"). previous: the host's memory record ({request, effective}) or {}; request: this run's request in the same
    shape. A run whose request equals the record's starts from the settings that last worked (a capture-OOM retry is
    not repeated on every run), but only with on_capture_oom retry: with fail, what the inventory says is what runs.
    """
    if on_capture_oom not in ON_CAPTURE_OOM:
        raise PolicyError("expected on_capture_oom to be one of retry, fail; found %r" % (on_capture_oom,))
    previous = previous if isinstance(previous, dict) else {}
    effective = previous.get("effective")
    if on_capture_oom == "retry" and isinstance(effective, dict) and _same(previous.get("request", {}), request):
        return {
            "fraction": _fraction(effective.get("mem_fraction_static"), "the recorded mem_fraction_static"),
            "graph_bs": effective.get("cuda_graph_max_bs") or None,
            "reused": True,
        }
    if str(requested_fraction) == "auto":
        fraction = (plan or {}).get("recommended_mem_fraction_static")
        if fraction is None:
            # the role's sentence is "The memory planner found no fraction that fits: <this>"
            raise PolicyError("; ".join((plan or {}).get("notes") or ["no memory plan for this host"]))
        return {
            "fraction": float(fraction),
            "graph_bs": (plan or {}).get("recommended_cuda_graph_max_bs") or requested_graph_bs or None,
            "reused": False,
        }
    return {
        "fraction": _fraction(requested_fraction, "mem_fraction_static"),
        "graph_bs": requested_graph_bs or None,
        "reused": False,
    }


def restart_plan(changes, attempt, drain_configured=False, allow_downtime=False, check_mode=False):
    """Whether this attempt's start restarts SGLang, and around it whether the drain runs and the outage guard looks.

    changes: {cause: bool} for RESTART_CAUSES (unknown names are an error: a typo would silently never restart).
    Attempt 1 restarts for any cause; a later attempt always restarts (its flags changed). The drain runs before
    attempt 1 only, when one is configured and this run asks for the restart, never in check mode (a drain cannot be
    simulated). The guard runs before attempt 1 only, without a drain, not in check mode, not when downtime is allowed,
    not for a forced restart, for GUARDED_CAUSES. Returns {relaunch, drain, guard, causes}.
    """
    unknown = sorted(set(changes) - set(RESTART_CAUSES))
    if unknown:
        raise PolicyError(
            "expected restart causes among %s; found %s" % (", ".join(RESTART_CAUSES), ", ".join(unknown))
        )
    attempt = int(attempt)
    causes = [c for c in RESTART_CAUSES if changes.get(c)]
    first = attempt == 1
    drain = first and drain_configured and not check_mode and any(c in DRAINED_CAUSES for c in causes)
    guard = (
        first
        and not drain_configured
        and not check_mode
        and not allow_downtime
        and not changes.get("force")
        and any(c in GUARDED_CAUSES for c in causes)
    )
    return {"relaunch": attempt > 1 or bool(causes), "drain": drain, "guard": guard, "causes": causes}


def node_result(own):
    """This node's result as its replica compares it: a node other than the head waits for its ranks' graphs and its
    dummy /health, not the ready line only the head logs, so what it waited for being reached (outcome "incomplete",
    reached true) counts as "ready". Any other result is returned unchanged."""
    own = dict(own or {})
    if own.get("reached") and own.get("outcome") == "incomplete":
        own["outcome"] = "ready"
    return own


def replica_result(node, multinode, verdict):
    """The attempt's result: this node's own, or on a multi-node replica that is not ready the verdict's (the node
    and rank that failed first, so every node of the replica retries or stops on the same cause)."""
    node = dict(node or {})
    if not multinode or (verdict or {}).get("ready"):
        return node
    v = verdict or {}
    out = dict(v.get("result") or {})
    out.update(
        outcome=v.get("outcome"),
        phase=v.get("phase"),
        diagnosis=v.get("diagnosis"),
        first_failure={
            "host": v.get("host"),
            "node_rank": v.get("node_rank"),
            "rank": v.get("rank"),
            "never_joined": v.get("never_joined"),
        },
        node_outcome=node.get("outcome") or "error",
    )
    return out


def summary(attempt, fraction, graph_bs, *, launched, result, plan):
    """The attempt's row in the deployment record's memory.attempts (docs/memory.md)."""
    totals = result.get("totals") or {}
    plan = plan or {}
    return {
        "attempt": int(attempt),
        "mem_fraction_static": float(fraction),
        "cuda_graph_max_bs": graph_bs,
        "launched": bool(launched),
        "outcome": result.get("outcome") or "error",
        "phase": result.get("phase"),
        "diagnosis": result.get("diagnosis") or result.get("msg") or "",
        "planned_kv_tokens": plan.get("kv_tokens"),
        "planned_verdict": plan.get("verdict"),
        "kv_tokens_min": totals.get("kv_tokens_min"),
        "avail_after_pool_min_gb": totals.get("avail_after_pool_min_gb"),
        "cuda_graph_mem_max_gb": totals.get("cuda_graph_mem_max_gb"),
    }


def wants_retry(result, attempt, max_attempts, on_capture_oom, check_mode=False):
    """Whether another launch follows: only a capture OOM is retried, only with on_capture_oom retry, only while
    attempts remain, never in check mode (nothing was launched to learn from)."""
    if on_capture_oom not in ON_CAPTURE_OOM:
        raise PolicyError("expected on_capture_oom to be one of retry, fail; found %r" % (on_capture_oom,))
    return (
        (result or {}).get("outcome") == "oom_cuda_graph"
        and on_capture_oom == "retry"
        and int(attempt) < int(max_attempts)
        and not check_mode
    )


_TRIED_RE = re.compile(r"Tried to allocate (\d+(?:\.\d+)?) ?(GiB|MiB|KiB|B)\b")
_FREE_RE = re.compile(r"of which (\d+(?:\.\d+)?) ?(GiB|MiB|KiB|B) (?:is )?free")
_UNIT = {"GiB": 1.0, "MiB": 1.0 / 1024, "KiB": 1.0 / 1024**2, "B": 1.0 / 1024**3}


def oom_figures(lines):
    """(tried_to_allocate_gib, free_at_oom_gib) from torch's CUDA OOM message in the log lines (None when absent)."""
    tried = free = None
    for line in lines or []:
        m = _TRIED_RE.search(line)
        if m and tried is None:
            tried = float(m.group(1)) * _UNIT[m.group(2)]
        m = _FREE_RE.search(line)
        if m and free is None:
            free = float(m.group(1)) * _UNIT[m.group(2)]
    return tried, free


def retry_advice(attempt, the_plan, fraction):
    """capture_oom_advice for a failed sglang_server result: the advice its diagnosis printed, recomputed from the
    same inputs when the result carries them (suggestion.inputs), else from the result's logged figures; the plan of
    the attempt only fills in figures the log did not reach."""
    sugg = attempt.get("suggestion") or {}
    if isinstance(sugg.get("inputs"), dict) and sugg["inputs"].get("capture_free_gib") is not None:
        inputs = dict(sugg["inputs"])
    else:
        totals = attempt.get("totals") or {}
        args = attempt.get("server_args") or {}
        tried, free = oom_figures(attempt.get("log_tail"))
        capture_free = totals.get("avail_after_pool_min_gb")
        inputs = dict(
            pre_load_free_gib=totals.get("pre_load_min_gb") or the_plan["free_at_start_gib"],
            capture_free_gib=the_plan["avail_after_pool_gib"] if capture_free is None else capture_free,
            mem_fraction_static=args.get("mem_fraction_static") or fraction,
            tried_to_allocate_gib=tried,
            free_at_oom_gib=free,
            free_after_weights_gib=totals.get("avail_after_weights_min_gb"),
            kv_pool_gib=totals.get("kv_size_max_gb"),
            cuda_graph_max_bs=args.get("cuda_graph_max_bs") or the_plan["cuda_graph_max_bs"] or None,
            family=the_plan["model_family"],
        )
    out = capture_oom_advice(**inputs).as_dict()
    out.update(
        failed_mem_fraction_static=inputs["mem_fraction_static"],
        tried_to_allocate_gib=inputs.get("tried_to_allocate_gib"),
        free_at_oom_gib=inputs.get("free_at_oom_gib"),
    )
    return out


def judge(result, attempt, max_attempts, *, on_capture_oom, fraction, graph_bs, plan, check_mode=False):
    """After one attempt: {finished, fraction, graph_bs, stop_reason, retry}.

    finished: no further launch (ready, a failure that is not a capture OOM, on_capture_oom fail, the last attempt,
    check mode, or no fraction survives the capture - then stop_reason says why). Otherwise fraction / graph_bs are
    the next launch's, from retry_advice on this attempt's result and plan (retry: the advice itself).
    """
    out = {"finished": True, "fraction": float(fraction), "graph_bs": graph_bs, "stop_reason": "", "retry": None}
    if not wants_retry(result, attempt, max_attempts, on_capture_oom, check_mode):
        return out
    if not plan:
        out["stop_reason"] = "No fraction survives the capture: no memory plan for this host (no GPU was read)."
        return out
    advice = retry_advice(result, plan, fraction)
    out["retry"] = advice
    if advice.get("mem_fraction_static") is None:
        out["stop_reason"] = "No fraction survives the capture: %s." % advice.get("reason")
        return out
    out.update(
        finished=False,
        fraction=float(advice["mem_fraction_static"]),
        graph_bs=advice.get("cuda_graph_max_bs") or graph_bs,
    )
    return out


#: The inventory variable behind each SGLang flag a diagnosis may suggest (roles/server/tasks/attempt.yml sets these
#: flags from these variables; a flag the role does not set goes through server_extra_args).
INVENTORY_FLAGS = {
    "--mem-fraction-static": "server_mem_fraction_static",
    "--cuda-graph-max-bs": "server_cuda_graph_max_bs",
    "--cuda-graph-max-bs-decode": "server_cuda_graph_max_bs",
    "--port": "llmops_server_port",
}


def _number(value):
    return ("%.2f" % value) if isinstance(value, float) else str(value)


def inventory_advice(suggestion):
    """The diagnosis' suggestion (flags of SGLang) as what to set in the inventory: one sentence, or "" when the
    suggestion changes no setting (read a log, debug NCCL, ...)."""
    if not isinstance(suggestion, dict):
        return ""
    action, flag, value = suggestion.get("action"), suggestion.get("flag"), suggestion.get("value")
    var = INVENTORY_FLAGS.get(flag)
    if action in ("lower_mem_fraction_static", "raise_mem_fraction_static") and var and value is not None:
        out = "In the inventory: %s: %s" % (var, _number(value))
        if suggestion.get("cuda_graph_max_bs"):
            out += ", and server_cuda_graph_max_bs: %s" % suggestion["cuda_graph_max_bs"]
        alt = suggestion.get("alternative") or {}
        if alt.get("action") == "lower_cuda_graph_max_bs" and alt.get("value"):
            out += " (or keep the fraction and set server_cuda_graph_max_bs: %s)" % alt["value"]
        return out + "."
    if action == "add_gpus" and flag == "--tp-size" and value:
        return (
            "In the inventory: give the replica %s GPUs (server_tp on each of its hosts, times its hosts: hosts with "
            "the same llmops_replica)." % value
        )
    if action == "disable_cuda_graph":
        return "In the inventory: server_extra_args: ['--disable-cuda-graph'] (no fraction leaves room for the graphs)."
    if action == "free_port" and suggestion.get("port"):
        return "In the inventory: another llmops_server_port, or stop what listens on port %s." % suggestion["port"]
    return ""


def run_step(p, check_mode=False):
    """The module llmops.sglang.sglang_attempt: (result dict, error message or None). Planner and policy errors are
    one sentence each, with what was expected and found."""
    planner = p.get("planner") or None
    try:
        if p["step"] == "choose":
            requested = p.get("requested_fraction")
            if requested in (None, ""):
                return None, "expected requested_fraction (a number in (0, 1) or auto) with step=choose; found none"
            plan = plan_at(
                planner,
                None if str(requested) == "auto" else _fraction(requested, "mem_fraction_static"),
                p.get("requested_graph_bs"),
            )
            out = {"plan": plan, "problem": ""}
            try:
                settings = choose_first(
                    requested,
                    p.get("requested_graph_bs"),
                    plan,
                    previous=p.get("previous") or {},
                    request=p.get("request") or {},
                    on_capture_oom=p.get("on_capture_oom") or "retry",
                )
            except PolicyError as exc:
                out.update(settings=None, next_plan=None, problem=str(exc))
                return out, None
            same = (
                plan
                and plan.get("mem_fraction_static") == settings["fraction"]
                and (p.get("requested_graph_bs") or None) == settings["graph_bs"]
            )
            out.update(
                settings=settings,
                next_plan=plan if same else plan_at(planner, settings["fraction"], settings["graph_bs"]),
            )
            return out, None
        if p.get("attempt") is None or p.get("fraction") is None:
            return None, "expected attempt and fraction with step=judge; found attempt %r, fraction %r" % (
                p.get("attempt"),
                p.get("fraction"),
            )
        result = replica_result(p.get("node_result"), p.get("multinode"), p.get("verdict"))
        graph_bs = p.get("graph_bs") or None
        decision = judge(
            result,
            p["attempt"],
            p["max_attempts"],
            on_capture_oom=p.get("on_capture_oom") or "retry",
            fraction=p["fraction"],
            graph_bs=graph_bs,
            plan=p.get("plan"),
            check_mode=check_mode,
        )
        out = {
            "result": result,
            "summary": summary(
                p["attempt"], p["fraction"], graph_bs, launched=p.get("launched"), result=result, plan=p.get("plan")
            ),
            "finished": decision["finished"],
            "stop_reason": decision["stop_reason"],
            "advice": inventory_advice(result.get("suggestion")) if decision["finished"] else "",
            "retry": decision["retry"],
            "settings": {"fraction": decision["fraction"], "graph_bs": decision["graph_bs"], "reused": False},
            "next_plan": (
                p.get("plan") if decision["finished"] else plan_at(planner, decision["fraction"], decision["graph_bs"])
            ),
        }
        return out, None
    except (PolicyError, OSError, ValueError, KeyError, TypeError) as exc:  # PlanError is a ValueError
        model = (planner or {}).get("model_path", "the model")
        return None, "cannot decide the launch of %s (step %s): %s" % (model, p["step"], exc)
