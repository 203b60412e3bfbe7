"""gpu_facts documents exactly the gpu_state values its code can return (issue 26 item 5).

The returnable values are read from the code itself (no list kept here): every ``"gpu_state": ...`` in the module
(string constants, both arms of a conditional) and, where the value is the result of ``classify_failure``, every
string that function returns. They are compared with the ``choices`` of ``gpu_state`` in the module's RETURN, and
each one must be explained in its description (``C(value)``).
"""

from __future__ import annotations

import ast
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "plugins" / "modules" / "gpu_facts.py"
INVENTORY = ROOT / "plugins" / "module_utils" / "gpu_inventory.py"


def _strings(node, functions):
    """String values an expression can take: constants, conditionals, calls of a known function."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return {node.value}
    if isinstance(node, ast.IfExp):
        return _strings(node.body, functions) | _strings(node.orelse, functions)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in functions:
        return functions[node.func.id]
    raise AssertionError(f"gpu_state is set from {ast.unparse(node)!r}: this test cannot tell its values")


def _function_returns(tree):
    out = {}
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef):
            vals = set()
            for node in ast.walk(fn):
                if isinstance(node, ast.Return) and node.value is not None:
                    try:
                        vals |= _strings(node.value, {})
                    except AssertionError:
                        vals = None
                        break
            if vals:
                out[fn.name] = vals
    return out


def returnable_states():
    tree = ast.parse(MODULE.read_text())
    functions = _function_returns(ast.parse(INVENTORY.read_text()))
    assigned = {}  # local names bound to a call of a known function (state = classify_failure(...))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if isinstance(node.value, ast.Call) and getattr(node.value.func, "id", None) in functions:
                assigned[node.targets[0].id] = functions[node.value.func.id]
    states = set()
    for node in ast.walk(tree):
        if not isinstance(node, ast.Dict):
            continue
        for key, value in zip(node.keys, node.values, strict=True):
            if isinstance(key, ast.Constant) and key.value == "gpu_state":
                if isinstance(value, ast.Name):
                    assert value.id in assigned, f"gpu_state = {value.id}: not bound to a known function"
                    states |= assigned[value.id]
                else:
                    states |= _strings(value, functions)
    return states


def documented():
    ret = None
    for node in ast.parse(MODULE.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) == "RETURN":
            ret = yaml.safe_load(node.value.value)
    return ret["gpu_state"]


def test_every_returnable_gpu_state_is_documented_and_nothing_else():
    states = returnable_states()
    # the reading itself: the states of a driverless host and of nvidia-smi's own failures are among them
    assert {"present", "no_gpu", "no_driver", "gpu_lost", "unsupported_gpu", "driver_mismatch", "error"} <= states
    doc = documented()
    assert sorted(doc["choices"]) == sorted(states)
    text = " ".join(doc["description"])
    for state in states:
        assert f"C({state})" in text, f"RETURN gpu_state does not explain {state}"


def test_the_reading_would_see_a_new_state(tmp_path, monkeypatch):
    """A module that returns one more value is caught (the check can fail)."""
    changed = tmp_path / "gpu_facts.py"
    changed.write_text(MODULE.read_text().replace('"gpu_state": "no_driver"', '"gpu_state": "no_driver_at_all"', 1))
    monkeypatch.setattr(__import__(__name__), "MODULE", changed)
    assert "no_driver_at_all" in returnable_states()
    assert sorted(documented()["choices"]) != sorted(returnable_states())
