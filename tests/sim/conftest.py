"""Fixtures for the SGLang stand-in tests: model dirs, GPU profiles, a patched (SM120-fixed) copy, a launcher."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from events import GUARD, wait_until
from server_launcher import LAUNCHER

ROOT = Path(__file__).resolve().parents[2]
SIM_SGLANG = ROOT / "sim" / "sglang"
SIM_PY = SIM_SGLANG / "python"
MAKE_MODEL = ROOT / "sim" / "models" / "make_model.py"
PROFILES = ROOT / "sim" / "gpu" / "profiles"
SM120_PATCH = SIM_SGLANG / "patches" / "0001-sm120-extend-attention-block-size.patch"

if str(SIM_PY) not in sys.path:
    sys.path.insert(0, str(SIM_PY))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def models(tmp_path_factory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("models")
    out = {}
    for kind in ("glm5-nvfp4", "llama3-8b"):
        subprocess.run([sys.executable, str(MAKE_MODEL), kind, str(base / kind)], check=True, capture_output=True)
        out[kind] = base / kind
    return out


@pytest.fixture(scope="session")
def fixed_tree(tmp_path_factory) -> Path:
    """A copy of sim/sglang with the SM120 patch applied (git apply); returns its python/ dir."""
    dst = tmp_path_factory.mktemp("sglang-fixed") / "sglang"
    shutil.copytree(SIM_SGLANG, dst, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["git", "apply", str(SM120_PATCH)], cwd=dst, check=True, capture_output=True)
    return dst / "python"


def write_profile(path: Path, base: str = "rtx-pro-6000-x8.json", busy: dict[int, int] | None = None) -> Path:
    """Copy of a profile; ``busy`` = {gpu index: MiB used by other processes}."""
    data = json.loads((PROFILES / base).read_text())
    for g in data["gpus"]:
        g["memory_used_mib"] = (busy or {}).get(g["index"], g.get("memory_used_mib", 0))
    path.write_text(json.dumps(data))
    return path


def _proc_stats():
    """(pid, fields after the command name) of every process in /proc/*/stat: state, ppid, pgrp, ..."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        yield int(entry), stat.rsplit(")", 1)[1].split()


class Server:
    """One launcher process (its own session); its output (stdout + stderr) goes to a file."""

    def __init__(self, args: list[str], env: dict, log: Path, launcher: bool = False):
        self.log_path = log
        self.fh = open(log, "wb")
        head = [sys.executable, str(LAUNCHER)] if launcher else [sys.executable, "-m", "sglang.launch_server"]
        self.proc = subprocess.Popen(
            [*head, *args],
            env=env,
            stdout=self.fh,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.port = None

    @property
    def log(self) -> str:
        return self.log_path.read_bytes().decode("utf-8", "replace")

    def wait_for(self, text: str, timeout: float = GUARD) -> bool:
        """True once ``text`` is in the log, False when the process ended without it. ``timeout`` is a hang guard
        (tests/events.py): the wait ends the moment the line is there."""
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if text in self.log:
                return True
            if self.proc.poll() is not None:
                return text in self.log
            time.sleep(0.05)
        return False

    def wait_exit(self, timeout: float = GUARD) -> int:
        return self.proc.wait(timeout=timeout)

    def wait_session_empty(self) -> None:
        """Until nothing of the launcher's session is alive (the launcher reaps its ranks; an orphan never goes)."""
        wait_until(lambda: self.session_alive() == [], "the launcher's session to be empty")

    def children(self) -> list[int]:
        return sorted(pid for pid, fields in _proc_stats() if int(fields[1]) == self.proc.pid)

    def session_alive(self) -> list[int]:
        """PIDs still alive in the launcher's session (its process group), zombies excluded."""
        return [pid for pid, fields in _proc_stats() if int(fields[3]) == self.proc.pid and fields[0] != "Z"]

    def stop(self) -> None:
        # SIGTERM first: the launcher kills and reaps its ranks (no zombies left to init), then SIGKILL the group.
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self.fh.close()


@pytest.fixture
def launch(tmp_path, models):
    """launch(args, profile=..., env=..., pythonpath=..., launcher=...) -> Server; every server is killed at teardown.
    launcher=True starts it as the unit does: through roles/server/files/sglang-launch (keys from SGLANG_API_KEY and
    SGLANG_ADMIN_API_KEY in env, with LLMOPS_ADMIN_API_KEY_FLAG)."""
    started: list[Server] = []

    def _launch(
        args: list[str],
        *,
        profile: Path | str | None = "rtx-pro-6000-x8.json",
        env: dict | None = None,
        pythonpath: Path | None = None,
        port: int | None = None,
        launcher: bool = False,
    ) -> Server:
        e = {k: v for k, v in os.environ.items() if not k.startswith(("SGLANG_", "SIM_GPU", "CUDA_VISIBLE"))}
        e["PYTHONPATH"] = str(pythonpath or SIM_PY)
        e["SGLANG_SIM_TIME_SCALE"] = "0"
        e["SGLANG_SIM_FAULT"] = ""
        e["PYTHONDONTWRITEBYTECODE"] = "1"
        if profile is not None:
            p = Path(profile)
            e["SIM_GPU_PROFILE"] = str(p if p.is_absolute() else PROFILES / p)
        else:
            e["SIM_GPU_PROFILE"] = str(tmp_path / "no-such-profile.json")
        for k, v in (env or {}).items():
            if v is None:
                e.pop(k, None)
            else:
                e[k] = v
        port = port or free_port()
        full = [*args]
        if "--port" not in full:
            full += ["--port", str(port)]
        server = Server(full, e, tmp_path / f"server-{len(started)}.log", launcher=launcher)
        server.port = port
        started.append(server)
        return server

    yield _launch
    for s in started:
        s.stop()
