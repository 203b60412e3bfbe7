"""No task of any role sets a fact or registers a result under the name of a role default (an inventory knob): a
set_fact outranks the inventory for the rest of the play, so the knob would silently change under the operator - a
fact named server_restart would have rendered the unit's Restart= from a dict on the second launch."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _tasks(items):
    for t in items or []:
        if isinstance(t, dict):
            yield t
            for key in ("block", "rescue", "always"):
                yield from _tasks(t.get(key))


def _knobs():
    names = {}
    for defaults in sorted(ROOT.glob("roles/*/defaults/main.yml")):
        for name in yaml.safe_load(defaults.read_text()) or {}:
            names[name] = defaults.parent.parent.name
    return names


def _assignments():
    for path in sorted(ROOT.glob("roles/*/tasks/*.yml")) + sorted(ROOT.glob("playbooks/*.yml")):
        doc = yaml.safe_load(path.read_text()) or []
        plays = doc if path.parts[-2] == "playbooks" else [{"tasks": doc}]
        for play in plays:
            if not isinstance(play, dict):
                continue
            for section in ("pre_tasks", "tasks", "post_tasks", "handlers"):
                for t in _tasks(play.get(section)):
                    facts = t.get("ansible.builtin.set_fact")
                    if isinstance(facts, dict):
                        for name in facts:
                            yield path.relative_to(ROOT), t.get("name"), name
                    if isinstance(t.get("register"), str):
                        yield path.relative_to(ROOT), t.get("name"), t["register"]


def test_the_scan_sees_the_roles_facts_and_knobs():
    knobs, assigned = _knobs(), {name for _, _, name in _assignments()}
    assert "server_restart" in knobs and "llmops_allow_downtime" in knobs
    assert {"server_restart_decision", "server_judged", "server_fraction"} <= assigned


def test_no_fact_or_registered_result_shadows_a_role_default():
    knobs = _knobs()
    clashes = [f"{path}: {task!r} sets {name}, a default of roles/{knobs[name]}" for path, task, name in _assignments()
               if name in knobs]  # fmt: skip
    assert clashes == []
