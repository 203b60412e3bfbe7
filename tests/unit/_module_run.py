"""Run one of the collection's modules as Ansible runs it: python -m with the JSON arguments on standard input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_module(name: str, args: dict, check_mode: bool = False) -> dict:
    payload = {"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check_mode}}
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    argv = [sys.executable, "-m", f"ansible_collections.llmops.sglang.plugins.modules.{name}"]
    p = subprocess.run(argv, input=json.dumps(payload), capture_output=True, text=True, env=env, cwd=ROOT, timeout=60,
                       check=False)  # fmt: skip
    assert p.stdout, p.stderr[-2000:]
    return json.loads(p.stdout)
