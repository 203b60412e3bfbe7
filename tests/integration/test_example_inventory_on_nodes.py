"""The example inventory as shipped, end to end: site.yml takes a copy of inventories/example to a serving fleet
behind SGLang's router on simulated nodes, and a second run changes nothing.

The example's fleet as it is: gpu01 + gpu02 one replica tensor-parallel over both (TP16), gpu03 a replica of its own,
router01 the router - on ex1..ex4 (10.213.0.121-124; ex1..ex3 bare 8 x RTX PRO 6000 nodes without a driver, ex4
without GPUs). The copy differs from the example only by what a user must change, and the test prints that
difference: hosts.yml's documentation addresses become the nodes' addresses, and group_vars/all/zz-sim.yml
(tests/integration/example_on_sim.yml) adds the credentials, the local mirrors' URLs and what those mirrors hold
instead of the real artifacts. The wheelhouse is the example's default (the control node user's cache directory),
under a temporary XDG_CACHE_HOME.

Asserted: the first run succeeds; the router lists both replicas healthy and answers a chat completion for the
served model name. The second run is a second control node's (a CI job's fresh checkout: the copy without
credentials/, and an empty wheelhouse under its own XDG_CACHE_HOME), the whole site.yml against the serving fleet
under a bounded client loop through the router: it reports changed=0 on every host, gpu_facts ran once per GPU server
in it (tests/integration/callback_plugins/module_runs.py), it takes the fleet's keys from the hosts (the same files as
the first control node's credentials/), nothing is fetched into its wheelhouse, no build runs (the build host's build
logs are the same), no replica or router process restarts (MainPID) and no request of the loop fails. The wall times
are printed.

Run under the node lock: flock /work/locks/nodes.lock make test-example (which sets LLMOPS_EXAMPLE_E2E=1).
Figures: docs/testing.md. It stays out of make test (skipped without LLMOPS_EXAMPLE_E2E=1; the node stream has no room
for four more cold nodes); .ci/run runs it on every change, after make test-offline. Extending it: put the additions
the example needs into the example, and only what the simulation needs into example_on_sim.yml.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from _node_util import CALLBACKS, ROOT, VENV_BIN, booted_nodes, ssh_key
from playbook_output import changed_tasks, play_recap
from test_router_rolling_on_nodes import ClientLoop, credential_files, ssh

pytestmark = [
    pytest.mark.node,
    pytest.mark.skipif(
        os.environ.get("LLMOPS_EXAMPLE_E2E") != "1",
        reason="out of make test (minutes): make test-example runs it (LLMOPS_EXAMPLE_E2E=1)",
    ),
]

EXAMPLE = ROOT / "inventories" / "example"
OVERRIDES = Path(__file__).resolve().parent / "example_on_sim.yml"
# example host -> (simulated node, address, GPU profile); the example's documentation address it replaces
NODES = {
    "gpu01": ("ex1", "10.213.0.121", "rtx-pro-6000-x8", "192.0.2.10"),
    "gpu02": ("ex2", "10.213.0.122", "rtx-pro-6000-x8", "192.0.2.11"),
    "gpu03": ("ex3", "10.213.0.123", "rtx-pro-6000-x8", "192.0.2.12"),
    "router01": ("ex4", "10.213.0.124", "none", "192.0.2.20"),
}
ROUTER_IP = "10.213.0.124"
ROUTER = f"http://{ROUTER_IP}:30080"
# where each GPU server, when it is the build host, keeps what it built (python_env_build_dir's wheels/); a build
# writes a build.log there
BUILD_LOGS = "find /var/lib/llmops-sglang-build/wheels -name build.log 2>/dev/null | sort"
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
FIGURES: list[str] = []


def inventory_copy(work: Path) -> Path:
    """The example, copied, with only what a user must change; prints the difference."""
    copy = work / "example"
    shutil.copytree(EXAMPLE, copy)
    hosts = copy / "hosts.yml"
    text = hosts.read_text()
    for _node, ip, _profile, documented in NODES.values():
        assert text.count(documented) >= 1, f"the example no longer has {documented}"
        text = text.replace(documented, ip)
    hosts.write_text(text)
    (copy / "group_vars" / "all").mkdir(exist_ok=True)
    shutil.copy(OVERRIDES, copy / "group_vars" / "all" / "zz-sim.yml")
    diff = subprocess.run(["diff", "-ruN", str(EXAMPLE), str(copy)], capture_output=True, text=True, check=False)
    print(f"\n--- what the test changed in inventories/example ---\n{diff.stdout}--- end of the changes ---")
    return copy


def site(copy: Path, work: Path, tag: str, cache: Path | None = None):
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '')}"
    env["XDG_CACHE_HOME"] = str(cache or work / "cache")  # the wheelhouse's default lives under it
    env["ANSIBLE_CALLBACK_PLUGINS"] = str(CALLBACKS)
    env["ANSIBLE_CALLBACKS_ENABLED"] = "llmops.sglang.sglang_progress,module_runs"
    env["MODULE_RUNS_DIR"] = str(work / f"{tag}.runs")
    t0 = time.monotonic()
    p = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", str(copy), str(ROOT / "site.yml")],
        env=env, cwd=work, capture_output=True, text=True, timeout=3600, check=False,
    )  # fmt: skip
    seconds = time.monotonic() - t0
    (work / f"{tag}.log").write_text(p.stdout + p.stderr)
    runs = sorted((work / f"{tag}.runs").glob("*.json"))
    counts = json.loads(runs[-1].read_text())["runs"] if runs else {}
    return p, seconds, counts


def why(p) -> str:
    fatal = [line for line in p.stdout.splitlines() if line.startswith(("fatal:", "failed:"))]
    return "\n".join(fatal[-5:]) or p.stdout[-3000:] + p.stderr[-2000:]


def get(url: str, body: dict | None = None, key: str | None = None) -> dict:
    data = json.dumps(body).encode() if body is not None else None
    headers = {"Content-Type": "application/json"} if data else {}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(url, data=data, headers=headers)
    with OPENER.open(req, timeout=30) as resp:
        return json.loads(resp.read())


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    if os.geteuid() != 0 or shutil.which("systemd-nspawn") is None:
        pytest.skip("node tests need root and systemd-nspawn")
    work = tmp_path_factory.mktemp("example")
    t0 = time.monotonic()
    nodes = {node: (ip, profile) for node, ip, profile, _doc in NODES.values()}
    try:
        with booted_nodes(nodes, driver="none", mirrors=True):
            assert ssh_key()  # the key the override file names is the simulation's
            yield inventory_copy(work), work
    finally:
        FIGURES.append(f"module wall time {time.monotonic() - t0:.0f} s on {len(NODES)} nodes")
        print("\n" + "\n".join(FIGURES))


def test_the_example_inventory_serves_behind_the_router_and_a_second_run_changes_nothing(fleet):
    copy, work = fleet
    first, seconds, _counts = site(copy, work, "first")
    assert first.returncode == 0, why(first)
    FIGURES.append(f"site.yml on the example inventory, cold: {seconds:.0f} s")

    # the keys the run generated beside the copy, as the example tells the user (group_vars/all/shared.yml)
    keys = {n: (copy / "credentials" / f"{n}.txt").read_text().strip() for n in ("router-api-key", "router-admin-key")}
    workers = get(f"{ROUTER}/workers", key=keys["router-admin-key"])["workers"]
    assert {w["url"]: w["is_healthy"] for w in workers} == {
        "http://10.213.0.121:30000": True,  # replica glm-tp16: gpu01 (head) + gpu02
        "http://10.213.0.123:30000": True,  # replica gpu03
    }
    answer = get(f"{ROUTER}/v1/chat/completions", {"model": "glm-5", "messages": [{"role": "user", "content": "hi"}],
                                                   "max_tokens": 8}, keys["router-api-key"])  # fmt: skip
    assert answer["choices"][0]["message"]["content"].strip()

    # A second control node: a CI job's fresh checkout of the inventory (everything but credentials/, git-ignored) and
    # an empty cache, so an empty wheelhouse of its own. It runs the whole site.yml against the serving fleet.
    ci = work / "ci-inventory"
    shutil.copytree(copy, ci, ignore=shutil.ignore_patterns("credentials"))
    assert not (ci / "credentials").exists()
    ci_cache = work / "ci-cache"
    ci_cache.mkdir()
    generated = credential_files(copy)
    assert len(generated) >= 2 and all(len(v) >= 32 for v in generated.values()), sorted(generated)
    before = fleet_state()
    assert all(pid not in ("", "0") for pid in before["pids"].values()), before["pids"]
    loop = ClientLoop(limit=20000, deadline=1800, key=keys["router-api-key"], router_ip=ROUTER_IP).start()
    again, seconds, counts = site(ci, work, "again", cache=ci_cache)
    loop.stop()
    assert again.returncode == 0, why(again)
    changed = {h: r["changed"] for h, r in play_recap(again.stdout).items()}
    # every host of the example, and the controller (playbooks/fleet_roll_plan.yml plans the restart order there)
    assert set(changed) == {*NODES, "localhost"}, changed
    assert set(changed.values()) == {0}, (changed, changed_tasks(again.stdout))
    assert {h: c.get("llmops.sglang.gpu_facts") for h, c in counts.items() if h.startswith("gpu")} == {
        "gpu01": 1,
        "gpu02": 1,
        "gpu03": 1,
    }
    assert credential_files(ci) == generated  # taken from the hosts, not made anew (compared, never printed)
    fetched = sorted(str(p.relative_to(ci_cache)) for p in ci_cache.rglob("*") if p.is_file())
    assert fetched == [], f"the second control node's cache got {fetched}"
    after = fleet_state()
    assert after["logs"] == before["logs"]  # no build ran: none of the build logs is new
    assert after["pids"] == before["pids"]  # nothing restarted
    assert loop.failed == 0 and loop.codes[200] > 0, (loop.codes, loop.errors[:5])
    FIGURES.append(
        f"site.yml from a second control node (no credentials/, empty wheelhouse), converged, changed=0: "
        f"{seconds:.0f} s, {loop.codes[200]} requests served through the router during it, {loop.failed} failed"
    )


def fleet_state() -> dict:
    """Each node's service MainPIDs (sglang on the GPU servers, the router on router01) and every build log."""
    key = ssh_key()
    pids, logs = {}, {}
    for host, (_node, ip, profile, _doc) in NODES.items():
        unit = "sglang-router.service" if profile == "none" else "sglang.service"
        pids[host] = ssh(key, ip, f"systemctl show -p MainPID --value {unit}").strip()
        if profile != "none":
            logs[host] = ssh(key, ip, BUILD_LOGS)
    return {"pids": pids, "logs": logs}
