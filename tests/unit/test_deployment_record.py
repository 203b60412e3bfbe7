"""The record of what runs where (module_utils/deployment_record.py) and its one writer (the deployment_record
module, run as Ansible runs it: a JSON args file, on a temporary path).

The records the roll tests start from are tests/fixtures/roll/*/*.json, copied from the hosts of a node run of the
router module (tests/fixtures/roll/README.md says which run); the SGLang log lines are the public and real logs in
tests/unit/fixtures/public_logs and real_logs.
"""

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import deployment_record as dr

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "plugins" / "modules" / "deployment_record.py"
# SGLang's own output, collected from public issues and pull requests and from real runs (their READMEs cite them)
LOGS = [ROOT / "tests" / "unit" / "fixtures" / "public_logs", ROOT / "tests" / "unit" / "fixtures" / "real_logs"]
ROLL = ROOT / "tests" / "fixtures" / "roll"
KEY = "Zq4xT9mK2pW7vN3rB8cY5hJ6gF1dS0aL"  # the shape of a generated replica key (40 letters and digits)
NOW = 1764651600.0  # 2025-12-02T05:00:00Z


def fixture(run, host):
    return json.loads((ROLL / run / f"{host}.json").read_text())


# --- no secret in the record -----------------------------------------------------------------------------------


def test_sglangs_server_args_line_loses_its_keys_and_keeps_everything_else():
    # SGLang 0.5.9 logs f"{server_args=}" (sglang/srt/entrypoints/engine.py:1031), the dataclass repr with every field
    line = (
        "[2026-12-02 04:55:01] server_args=ServerArgs(model_path='/models/glm-5', tp_size=8, "
        f"api_key='{KEY}', admin_api_key='{KEY[::-1]}', served_model_name='glm-5', mem_fraction_static=0.88)"
    )
    out = dr.scrub_text(line)
    assert KEY not in out and KEY[::-1] not in out
    assert out == line.replace(KEY, dr.REDACTED).replace(KEY[::-1], dr.REDACTED)


@pytest.mark.parametrize(
    "text",
    [
        f"Authorization: Bearer {KEY}",
        f"--api-key {KEY}",
        f"--admin-api-key={KEY}",
        f"SGLANG_API_KEY={KEY}",
        f'{{"hf_token": "{KEY}"}}',
        f"the key was {KEY}",
    ],
)
def test_a_key_by_value_or_by_shape_is_redacted(text):
    assert KEY not in dr.scrub_text(text, secrets=[KEY])


def test_every_line_of_the_public_sglang_logs_is_left_as_it_is():
    # no false positive on real output: "#new-token: 8", "api_key=None", token counts, paths
    files = sorted(p for d in LOGS for p in d.iterdir() if p.suffix in (".log", ".txt"))
    lines = [line for p in files for line in p.read_text(errors="replace").splitlines()]
    assert len(files) >= 30 and len(lines) > 500, (len(files), len(lines))  # 2026-12-02: 564 lines
    assert [line for line in lines if dr.scrub_text(line) != line] == []


def test_every_string_of_a_record_is_scrubbed_at_any_depth():
    rec = {"log_tail": [f"api_key='{KEY}'"], "failure": {"line": f"Bearer {KEY}"}, "n": 3, "none": None}
    out = dr.merge_record({}, rec, secrets=[KEY])
    assert KEY not in json.dumps(out) and out["n"] == 3 and out["none"] is None


# --- what runs, and what ran before ----------------------------------------------------------------------------


def test_a_changed_driver_or_model_moves_the_old_value_to_previous_and_an_unchanged_one_keeps_it():
    first = dr.merge_record({}, {"driver": "580.95.05", "model": {"revision": "main", "commit": "a" * 40}})
    assert first["previous"] == {"driver": None, "model": None} and first["schema"] == dr.SCHEMA
    upgraded = dr.merge_record(first, {"driver": "580.105.08", "model": {"revision": "main", "commit": "a" * 40}})
    assert upgraded["previous"] == {"driver": "580.95.05", "model": None}
    again = dr.merge_record(upgraded, {"driver": "580.105.08", "model": {"revision": "main", "commit": "a" * 40}})
    assert again == upgraded  # the same launch recorded twice: the same record (a re-run changes nothing)
    revised = dr.merge_record(again, {"driver": "580.105.08", "model": {"revision": "v2", "commit": "b" * 40}})
    assert revised["previous"] == {"driver": "580.95.05", "model": {"revision": "main", "commit": "a" * 40}}


def test_a_previous_value_a_playbook_knows_outright_wins():
    out = dr.merge_record({"driver": "580.95.05"}, {"driver": "580.95.05"}, previous={"driver": "575.57.08"})
    assert out["previous"]["driver"] == "575.57.08"


def test_the_record_keeps_the_last_rolls_events():
    old = dr.add_events({"driver": "x"}, "20261202T045501Z", [{"event": "drained"}], now=NOW)
    out = dr.merge_record(old, {"driver": "x"})
    assert out["roll"] == old["roll"]


# --- the steps of a roll ---------------------------------------------------------------------------------------


def test_events_of_one_roll_accumulate_and_a_new_roll_starts_again():
    rec = dr.add_events({}, "r1", [{"event": "drained", "in_flight_left": "0"}], now=NOW)
    rec = dr.add_events(rec, "r1", [{"event": "restarted", "ago": 12.4, "attempt": 1}, {"event": "ready"}], now=NOW)
    assert [e["event"] for e in rec["roll"]["events"]] == ["drained", "restarted", "ready"]
    assert rec["roll"]["events"][1]["at"] == "2025-12-02T04:59:47Z"  # the restart: the write's time minus 12.4 s
    rec = dr.add_events(rec, "r2", [{"event": "drained"}], now=NOW)
    assert rec["roll"] == {"id": "r2", "events": [{"event": "drained", "at": "2025-12-02T05:00:00Z"}]}


def test_an_event_keeps_only_its_own_detail_and_bounds_its_text():
    e = dr.new_event("failed", detail={"why": "x" * 5000, "outcome": "oom_cuda_graph", "api_key": KEY}, now=NOW)
    assert set(e) == {"event", "at", "why", "outcome"} and len(e["why"]) == dr.MAX_TEXT


@pytest.mark.parametrize(("roll", "event"), [("", "drained"), ("r1", "exploded")])
def test_an_event_without_a_roll_or_of_an_unknown_kind_is_refused(roll, event):
    with pytest.raises(dr.RecordError):
        dr.add_events({}, roll, [{"event": event}])


def _summary(*names, why=None):
    rec = dr.add_events({}, "r", [dict({"event": n}, why=why) for n in names], now=NOW)
    return dr.roll_summary(rec)


@pytest.mark.parametrize(
    ("names", "state"),
    [
        (["drained", "restarted", "ready", "rejoined"], "done"),
        (["restarted", "ready"], "done"),  # no router: nothing to drain or rejoin
        (["drained", "restarted", "ready"], "in_progress"),  # ready, not back in the router yet
        (["drained", "restarted", "failed"], "stopped"),
        (["drained", "restarted", "failed", "restarted", "ready", "rejoined"], "done"),  # the capture-OOM retry
        (["drained", "restarted", "failed", "rolled_back", "restarted", "ready", "rejoined", "stopped"], "stopped"),
    ],
)
def test_a_hosts_roll_state_follows_its_steps(names, state):
    assert _summary(*names, why="because")["state"] == state


# --- the module, as Ansible runs it ----------------------------------------------------------------------------


def run_module(tmp_path, args, check=False):
    payload = {"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check}}
    argsfile = tmp_path / "args.json"
    argsfile.write_text(json.dumps(payload))
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    p = subprocess.run([sys.executable, str(MODULE), str(argsfile)], capture_output=True, text=True, env=env,
                       check=False, timeout=60)  # fmt: skip
    return json.loads(p.stdout)


def test_the_module_writes_0600_never_through_a_symlink_and_keeps_the_key_out(tmp_path):
    target = tmp_path / "elsewhere.json"
    target.write_text("{}")
    path = tmp_path / "deployment.json"
    path.symlink_to(target)
    res = run_module(tmp_path, {"path": str(path), "record": {"driver": "580.95.05", "log_tail": [f"x {KEY}"]},
                                "secrets": [KEY]})  # fmt: skip
    assert res["changed"] is True, res
    assert not path.is_symlink() and target.read_text() == "{}"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    text = path.read_text()
    assert KEY not in text and KEY not in json.dumps(res)
    again = run_module(tmp_path, {"path": str(path), "record": {"driver": "580.95.05", "log_tail": [f"x {KEY}"]},
                                  "secrets": [KEY]})  # fmt: skip
    assert again["changed"] is False and path.read_text() == text


def test_check_mode_writes_nothing(tmp_path):
    path = tmp_path / "deployment.json"
    res = run_module(tmp_path, {"path": str(path), "roll": "r1", "events": [{"event": "drained"}]}, check=True)
    assert res["changed"] is True and not path.exists()
    path.write_text('{"driver": "x"}')
    res = run_module(tmp_path, {"path": str(path), "record": {"driver": "y"}}, check=True)
    assert res["changed"] is True and path.read_text() == '{"driver": "x"}'


def test_a_bad_event_is_one_line_and_writes_nothing(tmp_path):
    path = tmp_path / "deployment.json"
    res = run_module(tmp_path, {"path": str(path), "roll": "", "events": [{"event": "drained"}]})
    assert res.get("failed") and "Nothing was written" in res["msg"] and "\n" not in res["msg"]
    assert not path.exists()


# --- one writer per record, one writer per step ------------------------------------------------------------------


def _tasks(node):
    """Every task mapping in a loaded tasks file or playbook, blocks and rescues included."""
    if isinstance(node, list):
        for item in node:
            yield from _tasks(item)
    elif isinstance(node, dict):
        if any(k in node for k in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks")):
            for k in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks"):
                yield from _tasks(node.get(k) or [])
        else:
            yield node


def test_only_the_writer_writes_deployment_json_and_each_step_has_one_place():
    import yaml

    files = sorted((ROOT / "roles").glob("*/tasks/*.yml")) + sorted((ROOT / "playbooks").glob("*.yml"))
    readers = {"ansible.builtin.slurp", "ansible.builtin.stat", "llmops.sglang.deployment_record"}
    steps = {}
    for path in files:
        for task in _tasks(yaml.safe_load(path.read_text()) or []):
            module = next((k for k in task if "." in k and k.split(".")[0] in ("ansible", "llmops")), None)
            if module and "deployment.json" in json.dumps(task.get(module)):
                assert module in readers, (path, task.get("name"))
            if module == "llmops.sglang.deployment_record" and "events" in task[module]:
                where = str(path.relative_to(ROOT))
                for e in task[module]["events"]:
                    steps.setdefault(e["event"], set()).add(where)
                assert "not ansible_check_mode" in task.get("when", []), (where, task["name"])  # check mode: no step
    # "ready"/"failed" are one templated event in attempt.yml
    expected = {e: {where} for e, (_, where) in dr.EVENTS.items() if e not in ("ready", "failed")}
    steps_by_name = {k: v for k, v in steps.items() if "{{" not in k}
    assert steps_by_name == expected, steps_by_name
    assert [v for k, v in steps.items() if "{{" in k] == [{dr.EVENTS["ready"][1]}]
    assert dr.EVENTS["ready"][1] == dr.EVENTS["failed"][1]


def test_a_rejoin_without_this_rolls_drain_is_no_step_so_a_rerun_changes_nothing():
    # found on nodes (2026-12-02): server.yml puts every replica back into the router on every run; the re-run of the
    # router module recorded a "rejoined" and reported changed
    assert dr.add_events({}, "r1", [{"event": "rejoined"}], now=NOW) == {}
    rec = dr.add_events({}, "r1", [{"event": "drained"}, {"event": "rejoined"}], now=NOW)
    assert dr.add_events(rec, "r1", [{"event": "rejoined"}], now=NOW) == rec
    assert dr.add_events(rec, "r2", [{"event": "rejoined"}], now=NOW) == rec
