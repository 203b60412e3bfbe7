"""Node fixtures for the integration tests: one simulated GPU node with the SGLang stand-in as a systemd unit.

The session boots one node (``sim/node up it1 10.213.0.31``, 8 x RTX PRO 6000 profile) and puts SGLang on it the way
a role would: the stand-in's ``python/`` tree in /opt/sglang-src (with the SM120 fix, applied on the controller
with ``git apply``) and in /opt/sglang-src-nofix (as shipped), the GLM-5-like model in /opt/models/glm5 and
``sglang.service`` writing to /var/log/sglang/server.log. Each case rewrites a drop-in
(``sglang.service.d/10-case.conf``: ExecStart and Environment) and reloads systemd; the test then starts the unit
itself or lets ``llmops.sglang.sglang_server`` (re)start it. The finalizer powers off exactly this node and then
runs ``sim/node teardown`` (without --all: it keeps the bridge when other engineers' nodes are up).

Environment: IT_NODE_NAME / IT_NODE_IP override the node (names must start with "it", addresses 10.213.0.31-39).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from _node_util import (
    BASE_UNIT,
    FIGURES,
    MAKE_MODEL,
    MODEL,
    NODE_IP,
    NODE_NAME,
    SIM_SGLANG,
    SM120_PATCH,
    SRC_FIXED,
    SRC_NOFIX,
    UNIT,
    Node,
    sim_node,
    skip_reason,
)


# -- fixtures -----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def node(request, tmp_path_factory) -> Node:
    """One simulated node for the whole session, with the stand-in, the model and sglang.service installed."""
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("node")
    # The SM120-fixed tree (git apply on a copy, never on sim/sglang) and the model, built on the controller.
    fixed = work / "sglang-fixed"
    shutil.copytree(SIM_SGLANG, fixed, ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["git", "apply", str(SM120_PATCH)], cwd=fixed, check=True, capture_output=True)
    subprocess.run([sys.executable, str(MAKE_MODEL), "glm5-nvfp4", str(work / "glm5")], check=True, capture_output=True)

    control = Path(f"/tmp/it-ssh-{os.getpid()}")  # ssh ControlMaster sockets (short path: sun_path limit)
    started: dict = {"up": False, "node": None}

    def finalize():
        if started["up"]:
            if started["node"] is not None:
                started["node"].close()
            sim_node("down", NODE_NAME, check=False)
            sim_node("teardown", check=False)
        shutil.rmtree(control, ignore_errors=True)

    request.addfinalizer(finalize)
    # A node of ours left over by an interrupted run would keep its old state: start from a fresh one.
    if NODE_NAME in sim_node("list", check=False).stdout.split():
        sim_node("down", NODE_NAME, check=False)
    started["up"] = True  # from here on the finalizer owns the node, even if `up` fails half way
    up = sim_node("up", NODE_NAME, NODE_IP, "--profile", "rtx-pro-6000-x8", check=False)
    assert up.returncode == 0, f"sim/node up {NODE_NAME} {NODE_IP} failed:\n{up.stderr}"
    key = sim_node("ssh-key").stdout.strip()
    control.mkdir(exist_ok=True)
    n = started["node"] = Node(NODE_NAME, NODE_IP, key, control)
    n.put_tree(fixed / "python", SRC_FIXED)
    n.put_tree(SIM_SGLANG / "python", SRC_NOFIX)
    n.put_tree(work / "glm5", MODEL)
    n.put_file(f"/etc/systemd/system/{UNIT}", BASE_UNIT)
    n.run(f"mkdir -p /var/log/sglang && systemctl daemon-reload && systemctl reset-failed {UNIT} 2>/dev/null; true")
    z = n.sh("date +%z").strip()
    n.tz_offset = (1 if z[0] == "+" else -1) * (int(z[1:3]) * 3600 + int(z[3:5]) * 60)
    # The fix really is in the one tree and not in the other (the stand-in's own textual marker).
    marker = r"'^[[:space:]]*(el)?if .*CUDA_CAPABILITY\[0\] *== *12'"
    rel = "sglang/srt/layers/attention/triton_ops/extend_attention.py"
    assert n.run(f"grep -Eq {marker} {SRC_FIXED}/{rel}", check=False).returncode == 0
    assert n.run(f"grep -Eq {marker} {SRC_NOFIX}/{rel}", check=False).returncode != 0
    return n


@pytest.fixture
def case_node(node: Node):
    """The session node with the unit stopped after the test (and no helper listeners left)."""
    yield node
    node.run(f"systemctl stop {UNIT} it-port-holder.service 2>/dev/null; true", check=False)


def pytest_terminal_summary(terminalreporter):
    if not FIGURES:
        return
    w = max(len(r[0]) for r in FIGURES)
    tr = terminalreporter
    tr.write_sep("-", "sglang_server on a simulated node: seconds from the event to the module's decision / result")
    tr.write_line(f"{'case':<{w}}  {'outcome':<20}  {'decided':>7}  {'result':>6}  event")
    for case, outcome, decided, returned, note in FIGURES:
        tr.write_line(f"{case:<{w}}  {outcome:<20}  {decided:>7}  {returned:>6}  {note}")
