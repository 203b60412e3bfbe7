"""`sim/node hold PID` keeps `teardown` (without --all) from stopping the shared proxy and mirrors while PID lives.

make test runs the node tests beside molecule (scripts/test-streams); each of them ends with `sim/node teardown`,
which would otherwise stop the mirrors the moment its own last node is down, under the other stream's feet. Runs
sim/node against its own state directory and a bridge name that does not exist, with a `sleep` this test started
standing in for the mirror server (teardown stops every process named in a *.pid file of the state directory).
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="sim/node needs root")


def sim_node(state: Path, *args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, SIM_STATE=str(state), SIM_BRIDGE="llmsbr-holdt")
    return subprocess.run(
        [str(ROOT / "sim" / "node"), *args], env=env, capture_output=True, text=True, timeout=60, check=False
    )


@pytest.fixture
def world(tmp_path):
    """A state directory whose 'mirror server' is a sleep of ours; killed at the end whatever happened."""
    mirror = subprocess.Popen(["sleep", "300"])
    holder = subprocess.Popen(["sleep", "300"])
    (tmp_path / "mirrors.pid").write_text(f"{mirror.pid}\n")
    yield tmp_path, mirror, holder
    for p in (mirror, holder):
        p.kill()
        p.wait()


def test_teardown_leaves_the_mirrors_up_while_a_holder_lives_and_stops_them_after_release(world):
    state, mirror, holder = world
    assert sim_node(state, "hold", str(holder.pid)).returncode == 0
    held = sim_node(state, "teardown")
    assert held.returncode == 0, held.stderr
    assert f"held by process {holder.pid}" in held.stderr
    assert mirror.poll() is None and (state / "mirrors.pid").exists()
    assert sim_node(state, "release", str(holder.pid)).returncode == 0
    assert sim_node(state, "teardown").returncode == 0
    assert mirror.wait(timeout=10) == -signal.SIGTERM and not (state / "mirrors.pid").exists()


def test_a_holder_that_died_holds_nothing(world):
    state, mirror, holder = world
    assert sim_node(state, "hold", str(holder.pid)).returncode == 0
    holder.kill()
    holder.wait()
    assert sim_node(state, "teardown").returncode == 0
    assert mirror.wait(timeout=10) == -signal.SIGTERM


def test_teardown_all_ignores_holds(world):
    state, mirror, holder = world
    assert sim_node(state, "hold", str(holder.pid)).returncode == 0
    assert sim_node(state, "teardown", "--all").returncode == 0
    assert mirror.wait(timeout=10) == -signal.SIGTERM and not (state / "holds").exists()


@pytest.mark.parametrize("pid", ["", "abc", "999999999"])
def test_hold_refuses_what_is_not_a_running_process(tmp_path, pid):
    p = sim_node(tmp_path, "hold", pid)
    assert p.returncode == 1
    assert p.stderr.strip() == f"sim/node: usage: hold PID (a running process); found '{pid}'"
