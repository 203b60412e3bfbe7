"""The server role's launcher (roles/server/files/sglang-launch: no .py suffix, run by the service venv's Python),
loaded as a module for tests that call its functions."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path

LAUNCHER = Path(__file__).resolve().parents[1] / "roles" / "server" / "files" / "sglang-launch"


def load(name: str = "sglang_launch"):
    loader = importlib.machinery.SourceFileLoader(name, str(LAUNCHER))
    spec = importlib.util.spec_from_loader(name, loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
