"""plugins/modules/path_probe.py, run as Ansible runs it (python -m with JSON arguments): what the server stage's
checks read in one round trip - the shapes of stat and slurp results, a missing path without content, a file too
large to read, an unknown account, a relative path refused in one line."""

from __future__ import annotations

import base64
import json

from tests.unit import _module_run


def run_module(args: dict) -> dict:
    return _module_run.run_module("path_probe", args)


def test_stat_and_read_in_one_call(tmp_path):
    record = tmp_path / "build.json"
    record.write_text('{"set": "v0.5.9-3f2a"}')
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\n")
    python.chmod(0o755)
    big = tmp_path / "big"
    big.write_bytes(b"x" * 2048)
    out = run_module({
        "paths": {
            "record": {"path": str(record), "read": True},
            "python": {"path": str(python)},
            "dir": str(tmp_path),
            "missing": {"path": str(tmp_path / "none.json"), "read": True},
            "big": {"path": str(big), "read": True},
        },
        "users": ["root", "no-such-account-here"],
        "max_bytes": 1024,
    })  # fmt: skip
    p = out["paths"]
    assert out["changed"] is False
    assert json.loads(base64.b64decode(p["record"]["content"])) == {"set": "v0.5.9-3f2a"}
    assert p["record"]["stat"]["exists"] and p["record"]["stat"]["isreg"] and not p["record"]["stat"]["executable"]
    assert p["python"]["stat"]["executable"] is True and "content" not in p["python"]
    assert p["dir"]["stat"]["isdir"] is True and p["dir"]["stat"]["executable"] is False
    assert p["missing"]["stat"]["exists"] is False and "content" not in p["missing"]
    assert p["big"]["stat"]["size"] == 2048 and "content" not in p["big"]
    assert out["users"]["root"]["exists"] is True and out["users"]["root"]["uid"] == 0
    assert out["users"]["no-such-account-here"] == {"exists": False}


def test_a_relative_path_is_refused_in_one_line(tmp_path):
    out = run_module({"paths": {"record": {"path": "var/lib/x.json"}}})
    assert out["failed"] is True
    assert (
        out["msg"]
        == "Expected an absolute path under paths.record; found {'path': 'var/lib/x.json'}. Nothing was read."
    )
