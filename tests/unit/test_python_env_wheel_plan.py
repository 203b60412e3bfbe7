"""The fleet wheel plan (roles/python_env/tasks/wheel_plan.yml), run by Ansible on localhost: a wheel the control
node's wheelhouse lacks but the builder keeps from an earlier build (a record of this fingerprint and a wheel of that
sha256 under llmops_build_dir/wheels) is collected into the wheelhouse instead of being built again; a kept wheel
that does not match its record, or a record of another fingerprint, is built; nothing is collected when the
wheelhouse has the wheel or every host has it installed."""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from _localhost_play import PASSED, run_tasks_from

NAME, FP = "sglang", "0123456789abcdef"
WHEEL = "sglang-0.5.9-py3-none-any.whl"


def keep(build_dir, *, fingerprint=FP, tamper=False, wheel=WHEEL):
    """What a builder keeps after a build: the wheel, its log and its record (naming the wheel as ``wheel``)."""
    kept = build_dir / "wheels" / NAME / FP
    kept.mkdir(parents=True)
    data = b"a wheel's bytes"
    (kept / WHEEL).write_bytes(data + (b" changed" if tamper else b""))
    (kept / "build.log").write_text("built\n")
    record = {"name": NAME, "fingerprint": fingerprint, "wheel": wheel, "sha256": hashlib.sha256(data).hexdigest()}
    (kept / "build.json").write_text(json.dumps(record))
    return record


def plan(tmp_path, *, installed=False, cached=False):
    venv, wheelhouse = tmp_path / "venv", tmp_path / "wheelhouse"
    if installed:
        (venv / "llmops-builds").mkdir(parents=True)
        (venv / "llmops-builds" / f"{NAME}.json").write_text(json.dumps({"fingerprint": FP}))
    if cached:
        (wheelhouse / NAME / FP).mkdir(parents=True)
        (wheelhouse / NAME / FP / "build.json").write_text("{}")
    variables = {
        "python_env_wheel_name": NAME,
        "python_env_wheel_fingerprint": FP,
        "python_env_set_venv": str(venv),
        "python_env_wheelhouse": str(wheelhouse),
        "llmops_build_dir": str(tmp_path / "build"),
        "python_env_build_host_resolved": "localhost",
    }
    rc, out = run_tasks_from(
        tmp_path,
        "llmops.sglang.python_env",
        "wheel_plan.yml",
        variables,
        message="{{ python_env_wheel_plan | to_json }}",
    )
    assert rc == 0 and PASSED in out, out[-3000:]
    found = re.search(PASSED + r" (\{.*?\})\"", out)
    assert found, out[-3000:]
    entry = wheelhouse / NAME / FP
    return json.loads(found.group(1).replace('\\"', '"')), sorted(
        p.name for p in entry.iterdir()
    ) if entry.is_dir() else []


def test_a_wheel_the_builder_keeps_is_collected_into_the_empty_wheelhouse_not_built(tmp_path):
    record = keep(tmp_path / "build")
    p, collected = plan(tmp_path)
    assert (p["kept"], p["build"], p["collect"], p["builder"]) == (True, False, True, "localhost"), p
    assert collected == sorted([WHEEL, "build.log", "build.json"])
    assert json.loads((tmp_path / "wheelhouse" / NAME / FP / "build.json").read_text()) == record


@pytest.mark.parametrize(
    ("why", "kwargs"),
    [
        ("the kept wheel is not the one its record names", {"tamper": True}),
        ("the kept record is of another fingerprint", {"fingerprint": "fedcba9876543210"}),
        ("the kept record names a path, not a wheel's file name", {"wheel": f"../{FP}/{WHEEL}"}),
    ],
)
def test_a_kept_wheel_that_does_not_match_is_built_again(tmp_path, why, kwargs):
    keep(tmp_path / "build", **kwargs)
    p, collected = plan(tmp_path)
    assert (p["kept"], p["build"], p["collect"]) == (False, True, False), (why, p)
    assert collected == [], why


@pytest.mark.parametrize(
    ("why", "kwargs"),
    [
        ("the wheelhouse has it", {"cached": True}),
        ("every host has it installed", {"installed": True}),
    ],
)
def test_nothing_is_collected_or_built_when_nothing_needs_it(tmp_path, why, kwargs):
    keep(tmp_path / "build")
    p, collected = plan(tmp_path, **kwargs)
    assert (p["build"], p["collect"]) == (False, False), (why, p)
    assert WHEEL not in collected, why
