"""The start-up phases have one home (plugins/module_utils/sglang_phases.py) and every reader takes them from it.

Before, four tables (the parser's phase names, the wait loop's milestones, the report's interval labels and its
colours) were kept in step by hand. These tests fail when a second list of phases appears anywhere in the plugins or
bin/, when the parser reaches a phase the table does not have (or never reaches one it has), when the wait loop,
the module's documented choices, the report or the callback read anything but the table.
"""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

from ansible_collections.llmops.sglang.plugins.callback.sglang_progress import render_timeline
from ansible_collections.llmops.sglang.plugins.module_utils import sglang_phases as P
from ansible_collections.llmops.sglang.plugins.module_utils import sglang_report, sglang_wait
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_log import StartupLog
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_report_html import _phase_table

ROOT = Path(__file__).resolve().parents[2]
HOME = ROOT / "plugins" / "module_utils" / "sglang_phases.py"
LOGS = Path(__file__).parent / "fixtures" / "logs"


def _python_sources():
    for path in sorted((ROOT / "plugins").rglob("*.py")):
        yield path
    for path in sorted((ROOT / "bin").iterdir()):
        if path.is_file() and path.read_text(errors="replace").startswith("#!/usr/bin/env python"):
            yield path


def _phase_literals(node):
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        elts = node.elts
    elif isinstance(node, ast.Dict):
        elts = [k for k in node.keys if k is not None]
    else:
        return set()
    return {e.value for e in elts if isinstance(e, ast.Constant) and e.value in P.PHASES}


def test_no_second_list_of_phases_outside_the_table():
    """A tuple, list, set or dict naming three or more phases outside sglang_phases.py is a parallel table."""
    found = []
    for path in _python_sources():
        if path == HOME:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = _phase_literals(node)
            if len(names) >= 3:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {sorted(names)}")
    assert not found, found


def test_the_check_above_sees_a_parallel_table(tmp_path):
    src = 'LABELS = {"started": "a", "weights_loading": "b", "kv_allocated": "c"}\n'
    assert len(_phase_literals(ast.parse(src).body[0].value)) == 3


def test_the_parser_reaches_exactly_the_phases_of_the_table():
    tree = ast.parse((ROOT / "plugins" / "module_utils" / "sglang_log.py").read_text())
    reached = {
        n.args[0].value
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and getattr(n.func, "attr", None) == "_milestone"
        and n.args
        and isinstance(n.args[0], ast.Constant)
    }
    assert reached == set(P.PHASES)


def test_a_ready_log_meets_every_wait_milestone_in_the_table_order():
    log = StartupLog()
    log.feed((LOGS / "v0_5_9_glm5_ready.log").read_bytes())
    log.finish()
    assert [p for p in P.PHASES if p in log.milestones] == list(P.PHASES)
    for phase in P.WAIT_MILESTONES:
        assert log.milestone_met(phase), phase
    times = [log.milestones[p]["t"] for p in P.PHASES]
    assert times == sorted(times)


def test_the_wait_loop_and_the_module_take_their_milestones_from_the_table():
    assert sglang_wait.WAIT_MILESTONES is P.WAIT_MILESTONES
    assert P.WAIT_MILESTONES[-1] == P.LAST
    module = ROOT / "plugins" / "modules" / "sglang_server.py"
    tree = ast.parse(module.read_text())
    doc = next(n.value.value for n in tree.body if isinstance(n, ast.Assign) and n.targets[0].id == "DOCUMENTATION")
    assert yaml.safe_load(doc)["options"]["wait_for"]["choices"] == list(P.WAIT_MILESTONES)
    # the argument spec's choices are the table's (list(WAIT_MILESTONES) of the import), in the module's engine
    engine = ast.parse((ROOT / "plugins" / "module_utils" / "sglang_server_run.py").read_text())
    calls = [n for n in ast.walk(engine) if isinstance(n, ast.keyword) and n.arg == "wait_for"]
    assert any("WAIT_MILESTONES" in ast.unparse(k.value) for k in calls), [ast.unparse(k.value) for k in calls]


def test_the_report_labels_and_colours_every_interval_from_the_table():
    milestones = {name: float(i) for i, name in enumerate(P.PHASES)}
    tl = sglang_report.timeline(milestones, outcome="ready")
    assert [p["phase"] for p in tl["phases"]] == list(P.PHASES[:-1])
    assert [p["label"] for p in tl["phases"]] == [P.INTERVAL_LABELS[n] for n in P.PHASES[:-1]]
    assert set(P.INTERVAL_LABELS) == set(P.PHASE_COLOURS) == set(P.PHASES[:-1])
    html = _phase_table({"outcome": "ready", "timeline": tl})
    for name in P.PHASES[:-1]:
        assert f'data-phase="{name}"><td><span class="sw" style="background:{P.PHASE_COLOURS[name]}">' in html


def test_the_callback_orders_phases_of_the_same_second_as_the_table():
    text = render_timeline({"ready": 9.0, "http_up": 9.0, "cuda_graph_captured": 9.0, "started": 0.0})
    assert text == "started 0s -> cuda_graph_captured 9s -> http_up 9s -> ready 9s"
