"""The server stage's decisions (plugins/module_utils/server_policy.py), table by table: the first launch's memory
settings, what restarts SGLang (and when the drain and the outage guard run), a non-head node's "ready", the replica's
result, and after each attempt whether the launches end or which fraction the next one uses - on_capture_oom
fail|retry x outcome x attempt x single/multi-node. The module llmops.sglang.sglang_attempt is run as Ansible runs it,
on the reference story's capture OOM log (0.95 fails in capture, 0.92 is what follows)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from _module_run import run_module

from ansible_collections.llmops.sglang.plugins.module_utils import server_policy as policy
from ansible_collections.llmops.sglang.plugins.module_utils import sglang_log

ROOT = Path(__file__).resolve().parents[2]
GLM5 = ROOT / "tests" / "unit" / "fixtures" / "models" / "glm5-like"
OOM_LOG = ROOT / "tests" / "unit" / "fixtures" / "logs" / "v0_5_9_glm5_capture_oom.log"
OUTCOMES = ["ready", "oom_cuda_graph", "oom_kv_pool", "oom_weights", "crashed", "timeout", "stalled", "incomplete"]


@pytest.fixture(scope="module")
def reference_oom():
    """The reference 0.95 attempt's result, as the project's log parser returns it to the role."""
    text = OOM_LOG.read_text()
    result = sglang_log.parse_text(text).result()
    result["log_tail"] = text.splitlines()[-40:]
    assert result["outcome"] == "oom_cuda_graph"
    return result


@pytest.fixture()
def planner(tmp_path):
    record = tmp_path / "sglang.json"
    record.write_text(json.dumps({"version": "0.5.9"}))
    return {
        "model_path": str(GLM5),
        "tp": 8,
        "gpu_mem_mib": 97887,
        "gpu_arch": "sm_120",
        "kv_cache_dtype": "auto",
        "sglang_record": str(record),
        "max_running_requests": 8,
        "margin_gib": 1.0,
    }


# --- after an attempt: finished, or the next fraction ------------------------------------------------------------


@pytest.mark.parametrize("multinode", [False, True], ids=["single-node", "multi-node"])
@pytest.mark.parametrize("attempt", [1, 2, 3])
@pytest.mark.parametrize("outcome", OUTCOMES)
@pytest.mark.parametrize("on_capture_oom", ["retry", "fail"])
def test_only_a_capture_oom_with_retry_and_attempts_left_launches_again(  # noqa: PLR0917
    on_capture_oom, outcome, attempt, multinode, reference_oom, planner
):
    if outcome == "oom_cuda_graph":
        failed = dict(reference_oom)
    else:
        failed = {"outcome": outcome, "phase": "x", "diagnosis": "d"}
    if multinode:  # this node is fine; the replica's verdict names node 1 as the one that failed first
        node = {"outcome": "ready"}
        verdict = (
            {"ready": True}
            if outcome == "ready"
            else {"ready": False, "outcome": outcome, "phase": failed.get("phase"), "diagnosis": "node 1 first",
                  "host": "n1", "node_rank": 1, "rank": 9, "never_joined": [], "result": failed}
        )  # fmt: skip
    else:
        node, verdict = failed, {}
    result = policy.replica_result(node, multinode, verdict)
    assert result["outcome"] == outcome
    plan = policy.plan_at(planner, 0.95, None)
    d = policy.judge(result, attempt, 3, on_capture_oom=on_capture_oom, fraction=0.95, graph_bs=None, plan=plan)
    relaunch = outcome == "oom_cuda_graph" and on_capture_oom == "retry" and attempt < 3
    assert d["finished"] is (not relaunch)
    if relaunch:  # capture_oom_advice on the logged figures: the answer the node test expects end to end
        assert d["fraction"] == 0.92 and d["graph_bs"] is None and d["retry"]["failed_mem_fraction_static"] == 0.95
    else:
        assert d["fraction"] == 0.95 and d["retry"] is None and d["stop_reason"] == ""


def test_a_multi_node_replica_carries_the_first_failure_and_this_nodes_own_outcome(reference_oom):
    verdict = {"ready": False, "outcome": "oom_cuda_graph", "phase": "cuda_graph", "diagnosis": "node 1, rank 9",
               "host": "n1", "node_rank": 1, "rank": 9, "never_joined": [], "result": reference_oom}  # fmt: skip
    r = policy.replica_result({"outcome": "crashed"}, True, verdict)
    assert r["first_failure"] == {"host": "n1", "node_rank": 1, "rank": 9, "never_joined": []}
    assert r["node_outcome"] == "crashed" and r["diagnosis"] == "node 1, rank 9" and r["totals"]
    assert policy.replica_result({"outcome": "crashed"}, False, verdict) == {"outcome": "crashed"}


def test_no_fraction_that_survives_the_capture_stops_with_the_reason(planner, monkeypatch):
    monkeypatch.setattr(policy, "retry_advice", lambda *a: {"mem_fraction_static": None, "reason": "graphs need 9 GiB"})
    d = policy.judge(OOM, 1, 3, on_capture_oom="retry", fraction=0.95, graph_bs=None, plan={"kv_tokens": 1})
    assert d["finished"] and d["stop_reason"] == "No fraction survives the capture: graphs need 9 GiB."


def test_a_host_without_a_plan_stops_instead_of_guessing_a_fraction():
    d = policy.judge(OOM, 1, 3, on_capture_oom="retry", fraction=0.95, graph_bs=None, plan=None)
    assert d["finished"] and d["stop_reason"].startswith("No fraction survives the capture: no memory plan")


def test_check_mode_never_launches_again(reference_oom, planner):
    plan = policy.plan_at(planner, 0.95, None)
    d = policy.judge(
        reference_oom, 1, 3, on_capture_oom="retry", fraction=0.95, graph_bs=None, plan=plan, check_mode=True
    )
    assert d["finished"] and d["retry"] is None


OOM = {"outcome": "oom_cuda_graph"}


def _judge(graph_bs=None, plan=None):
    return policy.judge(OOM, 1, 3, on_capture_oom="retry", fraction=0.95, graph_bs=graph_bs, plan=plan)


def test_the_retry_keeps_the_graph_batch_size_unless_the_advice_lowers_it(monkeypatch):
    monkeypatch.setattr(policy, "retry_advice", lambda *a: {"mem_fraction_static": 0.9, "cuda_graph_max_bs": None})
    assert _judge(64, {"x": 1})["graph_bs"] == 64
    monkeypatch.setattr(policy, "retry_advice", lambda *a: {"mem_fraction_static": 0.9, "cuda_graph_max_bs": 32})
    assert _judge(64, {"x": 1})["graph_bs"] == 32


def test_the_summary_is_the_records_row(reference_oom):
    plan = {"kv_tokens": 425728, "verdict": "ok"}
    row = policy.summary(2, 0.95, None, launched=True, result=reference_oom, plan=plan)
    assert row["attempt"] == 2 and row["mem_fraction_static"] == 0.95 and row["launched"] is True
    assert row["outcome"] == "oom_cuda_graph" and row["planned_kv_tokens"] == 425728 and row["planned_verdict"] == "ok"
    assert row["kv_tokens_min"] == reference_oom["totals"]["kv_tokens_min"]
    assert (
        policy.summary(1, 0.5, None, launched=False, result={"msg": "systemctl said no"}, plan=None)["diagnosis"]
        == "systemctl said no"
    )


# --- before the first launch --------------------------------------------------------------------------------------

REQUEST = {"model_path": "/m", "tp": 8, "mem_fraction_static": "0.95"}
PREVIOUS = {"request": REQUEST, "effective": {"mem_fraction_static": 0.92, "cuda_graph_max_bs": None}}
PLAN = {"recommended_mem_fraction_static": 0.88, "recommended_cuda_graph_max_bs": 48, "notes": []}


@pytest.mark.parametrize(
    "requested, graph_bs, previous, asked, on_oom, expected",
    [
        ("0.95", None, {}, REQUEST, "retry", (0.95, None, False)),
        ("0.95", 64, {}, REQUEST, "retry", (0.95, 64, False)),
        ("auto", None, {}, REQUEST, "retry", (0.88, 48, False)),
        ("auto", 64, {}, REQUEST, "retry", (0.88, 48, False)),  # the planner's batch size with auto
        ("0.95", None, PREVIOUS, REQUEST, "retry", (0.92, None, True)),  # what worked for the same request
        ("0.95", None, PREVIOUS, REQUEST, "fail", (0.95, None, False)),  # with fail the inventory's value runs
        ("0.95", None, PREVIOUS, {**REQUEST, "tp": 4}, "retry", (0.95, None, False)),  # another request
        ("0.95", None, {"request": REQUEST}, REQUEST, "retry", (0.95, None, False)),  # nothing worked yet
    ],
    ids=["number", "number-bs", "auto", "auto-bs", "reuse", "fail-no-reuse", "other-request", "no-effective"],
)
def test_the_first_launch_settings(requested, graph_bs, previous, asked, on_oom, expected):  # noqa: PLR0917
    s = policy.choose_first(requested, graph_bs, PLAN, previous=previous, request=asked, on_capture_oom=on_oom)
    assert (s["fraction"], s["graph_bs"], s["reused"]) == expected


def test_auto_without_a_recommendation_says_the_planners_notes():
    with pytest.raises(policy.PolicyError, match=r"^use more GPUs$"):
        policy.choose_first("auto", None, {"recommended_mem_fraction_static": None, "notes": ["use more GPUs"]},
                            previous={}, request=REQUEST, on_capture_oom="retry")  # fmt: skip


@pytest.mark.parametrize("bad", ["1.2", "0", "x", "nan"])
def test_a_fraction_outside_0_1_is_refused(bad):
    with pytest.raises(policy.PolicyError, match=r"expected mem_fraction_static to be a number in \(0, 1\)"):
        policy.choose_first(bad, None, PLAN, previous={}, request=REQUEST, on_capture_oom="retry")


# --- what restarts SGLang -----------------------------------------------------------------------------------------

NONE = dict((c, False) for c in policy.RESTART_CAUSES)


@pytest.mark.parametrize("cause", policy.RESTART_CAUSES)
@pytest.mark.parametrize("attempt", [1, 2])
@pytest.mark.parametrize("drain", [False, True], ids=["no-router", "router-drain"])
def test_each_cause_restarts_and_only_routine_changes_are_guarded(cause, attempt, drain):
    r = policy.restart_plan({**NONE, cause: True}, attempt, drain_configured=drain)
    assert r["relaunch"] is True and r["causes"] == [cause]
    assert r["drain"] is (attempt == 1 and drain and cause in policy.DRAINED_CAUSES)
    assert r["guard"] is (attempt == 1 and not drain and cause in ("unit", "launcher", "env", "pending"))


@pytest.mark.parametrize("attempt, relaunch", [(1, False), (2, True), (3, True)])
def test_nothing_changed_restarts_only_a_later_attempt(attempt, relaunch):
    r = policy.restart_plan(NONE, attempt, drain_configured=True)
    assert (r["relaunch"], r["drain"], r["guard"], r["causes"]) == (relaunch, False, False, [])


@pytest.mark.parametrize("kw", [{"allow_downtime": True}, {"check_mode": True}])
def test_allowed_downtime_and_check_mode_skip_the_guard(kw):
    r = policy.restart_plan({**NONE, "unit": True}, 1, **kw)
    assert r["relaunch"] and not r["guard"]


def test_check_mode_never_drains_and_force_is_consent():
    assert not policy.restart_plan({**NONE, "unit": True}, 1, drain_configured=True, check_mode=True)["drain"]
    assert not policy.restart_plan({**NONE, "unit": True, "force": True}, 1)["guard"]


def test_an_unknown_cause_is_an_error_not_a_silent_no_restart():
    with pytest.raises(policy.PolicyError, match=r"expected restart causes among unit, .*; found unti"):
        policy.restart_plan({"unti": True}, 1)


# --- a node other than the head -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "own, outcome",
    [
        ({"outcome": "incomplete", "reached": True}, "ready"),  # its graphs captured and its dummy /health answers
        ({"outcome": "incomplete", "reached": False}, "incomplete"),
        ({"outcome": "incomplete"}, "incomplete"),
        ({"outcome": "oom_cuda_graph", "reached": True}, "oom_cuda_graph"),
        ({"outcome": "ready"}, "ready"),
        ({}, None),
    ],
)
def test_a_node_is_ready_when_it_reached_what_it_waits_for(own, outcome):
    assert policy.node_result(own).get("outcome") == outcome


# --- the module, as the role calls it -----------------------------------------------------------------------------


def test_the_module_plans_once_per_decision_and_retries_the_reference_story_at_092(planner, reference_oom):
    first = run_module("sglang_attempt", {"step": "choose", "planner": planner, "requested_fraction": "0.95"})
    assert not first.get("failed"), first
    assert first["changed"] is False and first["settings"] == {"fraction": 0.95, "graph_bs": None, "reused": False}
    assert first["next_plan"] == first["plan"] and first["plan"]["mem_fraction_static"] == 0.95
    judged = run_module(
        "sglang_attempt",
        {"step": "judge", "planner": planner, "attempt": 1, "max_attempts": 3, "fraction": 0.95,
         "plan": first["next_plan"], "node_result": reference_oom, "launched": True},
    )  # fmt: skip
    assert not judged.get("failed"), judged
    assert judged["finished"] is False and judged["settings"]["fraction"] == 0.92
    assert judged["next_plan"]["mem_fraction_static"] == 0.92 and judged["summary"]["outcome"] == "oom_cuda_graph"
    assert judged["summary"]["planned_kv_tokens"] == first["plan"]["kv_tokens"]


def test_the_module_with_auto_plans_again_at_the_fraction_it_chose(planner):
    out = run_module("sglang_attempt", {"step": "choose", "planner": planner, "requested_fraction": "auto"})
    assert not out.get("failed"), out
    assert out["settings"]["fraction"] == out["plan"]["recommended_mem_fraction_static"]
    assert out["next_plan"]["mem_fraction_static"] == out["settings"]["fraction"]


@pytest.mark.parametrize(
    "args, message",
    [
        ({"step": "choose"}, "expected requested_fraction (a number in (0, 1) or auto) with step=choose; found none"),
        ({"step": "choose", "requested_fraction": "1.5"}, "expected mem_fraction_static to be a number in (0, 1)"),
        ({"step": "judge", "fraction": 0.9}, "expected attempt and fraction with step=judge; found attempt None"),
    ],
)
def test_the_module_refuses_bad_input_in_one_line(planner, args, message):
    out = run_module("sglang_attempt", {"planner": planner, **args})
    assert out.get("failed") and message in out["msg"] and "\n" not in out["msg"] and "Traceback" not in out["msg"]


def test_a_missing_build_record_is_a_sentence(planner, tmp_path):
    planner = {**planner, "sglang_record": str(tmp_path / "none.json")}
    out = run_module("sglang_attempt", {"step": "choose", "requested_fraction": "0.9", "planner": planner})
    assert out.get("failed") and "which SGLang? expected the build record" in out["msg"], out


# --- what the role does with a launch that did not become ready ---------------------------------------------------


def test_a_start_up_that_failed_for_good_leaves_the_unit_stopped_without_a_restart_loop():
    """on_capture_oom fail (or the last attempt): the judgement ends the launches (the table above); main.yml then
    stops the unit before it fails with the diagnosis, and the unit's default Restart=no never loops. The node test
    of a multi-node capture OOM with fail sees both units inactive (test_multinode_tp_on_nodes.py)."""
    import yaml

    defaults = yaml.safe_load((ROOT / "roles" / "server" / "defaults" / "main.yml").read_text())
    assert defaults["server_restart"] == "no" and defaults["server_on_capture_oom"] in policy.ON_CAPTURE_OOM
    unit = (ROOT / "roles" / "server" / "templates" / "sglang.service.j2").read_text()
    assert "\nRestart={{ server_restart }}\n" in unit
    tasks = yaml.safe_load((ROOT / "roles" / "server" / "tasks" / "main.yml").read_text())
    names = [t.get("name") for t in tasks]
    stop = names.index("Leave SGLang stopped when it did not become ready (no restart loop)")
    fail = names.index("Stop with SGLang's diagnosis when it did not become ready")
    assert names.index("Start SGLang and wait until it is ready, retrying after a CUDA-graph capture OOM") < stop < fail
    assert tasks[stop]["ansible.builtin.systemd_service"]["state"] == "stopped"
    msg = tasks[fail]["ansible.builtin.fail"]["msg"]
    for part in ("server_result.outcome", "server_result.diagnosis", "server_advice", "server_stop_reason"):
        assert part in msg, part


def test_the_reference_capture_oom_diagnosis_is_what_the_stop_message_carries(reference_oom):
    # the role's message is "... outcome oom_cuda_graph ... <diagnosis> <what to set in the inventory>"
    assert "Lower --mem-fraction-static from 0.95 to 0.92" in reference_oom["diagnosis"]
    assert reference_oom["suggestion"]["value"] == 0.92
    assert policy.inventory_advice(reference_oom["suggestion"]) == "In the inventory: server_mem_fraction_static: 0.92."


def test_the_judgement_that_ends_the_launches_says_what_to_set_in_the_inventory(reference_oom, planner):
    p = {"step": "judge", "planner": planner, "attempt": 1, "max_attempts": 3, "fraction": 0.95,
         "node_result": reference_oom, "multinode": False, "launched": True}  # fmt: skip
    stop, err = policy.run_step({**p, "on_capture_oom": "fail"})
    assert err is None and stop["finished"]
    assert stop["advice"] == "In the inventory: server_mem_fraction_static: 0.92."
    retry, err = policy.run_step({**p, "on_capture_oom": "retry", "plan": policy.plan_at(planner, 0.95, None)})
    assert err is None and not retry["finished"] and retry["advice"] == ""  # the role relaunches: nothing to set


@pytest.mark.parametrize(
    "suggestion, advice",
    [
        ({"action": "raise_mem_fraction_static", "flag": "--mem-fraction-static", "current": 0.6, "value": 0.68},
         "In the inventory: server_mem_fraction_static: 0.68."),
        ({"action": "lower_mem_fraction_static", "flag": "--mem-fraction-static", "value": 0.81,
          "cuda_graph_max_bs": 256, "alternative": {"action": "lower_cuda_graph_max_bs", "value": 128}},
         "In the inventory: server_mem_fraction_static: 0.81, and server_cuda_graph_max_bs: 256 (or keep the fraction "
         "and set server_cuda_graph_max_bs: 128)."),
        ({"action": "add_gpus", "flag": "--tp-size", "current": 8, "value": 16},
         "In the inventory: give the replica 16 GPUs (server_tp on each of its hosts, times its hosts: hosts with the "
         "same llmops_replica)."),
        ({"action": "disable_cuda_graph", "reason": "x"},
         "In the inventory: server_extra_args: ['--disable-cuda-graph'] (no fraction leaves room for the graphs)."),
        ({"action": "free_port", "port": 30000, "flag": "--port"},
         "In the inventory: another llmops_server_port, or stop what listens on port 30000."),
        # suggestions that change no setting, and no suggestion at all
        ({"action": "free_port", "port": None}, ""),
        ({"action": "read_log", "last_error": "x"}, ""),
        ({"action": "debug_nccl", "env": {"NCCL_DEBUG": "INFO"}, "flag": "--disable-custom-all-reduce"}, ""),
        ({"action": "lower_mem_fraction_static", "flag": "--mem-fraction-static", "current": 0.9}, ""),
        (None, ""),
    ],
)  # fmt: skip
def test_inventory_advice_names_the_variable_behind_the_suggested_flag(suggestion, advice):
    assert policy.inventory_advice(suggestion) == advice


def test_every_flag_the_advice_names_is_set_from_that_variable_by_the_role():
    """The flag reaches SGLang's argv from the named variable: attempt.yml's argv key, fed by main.yml's choose step."""
    attempt = (ROOT / "roles/server/tasks/attempt.yml").read_text()
    main = (ROOT / "roles/server/tasks/main.yml").read_text()
    fed = {  # the variable the role launches with -> (the argv key in attempt.yml, where the inventory variable enters)
        "server_mem_fraction_static": (
            "'mem_fraction_static': server_fraction",
            'requested_fraction: "{{ server_mem_fraction_static',
        ),
        "server_cuda_graph_max_bs": (
            "'cuda_graph_max_bs': server_graph_bs",
            'requested_graph_bs: "{{ server_cuda_graph_max_bs',
        ),
        "llmops_server_port": ("'port': llmops_server_port", None),
    }  # fmt: skip
    assert set(policy.INVENTORY_FLAGS.values()) == set(fed)
    for flag, var in policy.INVENTORY_FLAGS.items():
        argv_key, entry = fed[var]
        assert argv_key in attempt, (flag, argv_key)
        assert entry is None or entry in main, (flag, entry)
