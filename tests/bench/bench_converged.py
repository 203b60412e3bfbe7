#!/usr/bin/env python3
"""Converged re-run benchmark: a second site.yml on converged simulated nodes, on one node and on three, side by side
with a bare `ansible -m ping` of the same hosts; and where the time goes.

Run: .venv/bin/python tests/bench/bench_converged.py [--runs 3] [--tree DIR] [--keep]   (under the node lock:
     flock /work/locks/nodes.lock make bench-converged; about 10-15 minutes: a cold converge of three nodes first)

* Boots bc1..bc3 (10.213.0.131-133, 8 x RTX PRO 6000 each, no driver) and the local mirrors, converges all three with
  site.yml and the simulation inventory's stage variables, then --runs times: site.yml on bc1 alone, site.yml on the
  three, `ansible -m ping` on bc1, on the three. Prints the median of each (and every run), the tasks and roles that
  took longest in the last one-node run and how often each llmops.sglang module ran per host (both from the test
  callback tests/integration/callback_plugins/module_runs.py), and whether each re-run changed nothing.
* The GPU health verdict's cost: the seconds of the tasks that read and judge the GPUs (llmops.sglang.gpu_health and
  roles/server/tasks/health.yml's own tasks, timed by the callback) in each one-node re-run; their median.
* Targets: one node <= 15 s, three nodes <= 1.3 x one node, the health verdict <= 5 s of a one-node re-run. Exits 1
  when one is missed or a re-run changed something.
* --tree DIR: run the playbooks, ansible.cfg and simulation inventory of another checkout (e.g. an export of main, to
  measure "before"); the nodes and the callbacks are this checkout's.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
SIM_NODE = ROOT / "sim" / "node"
NODES = {f"bc{i + 1}": f"10.213.0.{131 + i}" for i in range(3)}
TARGET_ONE_S = 15.0
TARGET_RATIO = 1.3
TARGET_HEALTH_S = 5.0
#: roles/server/tasks/health.yml's tasks besides the module's (set_fact, debug)
HEALTH_TASKS = ("Keep which reading the verdict is", "Show the GPU checks that are not ok")


def sim_node(*args, check=True, timeout=900):
    p = subprocess.run([str(SIM_NODE), *args], capture_output=True, text=True, timeout=timeout, check=False)
    if check and p.returncode != 0:
        sys.exit(f"bench: sim/node {' '.join(args)} exited {p.returncode}: {p.stderr[-2000:]}")
    return p


def inventory(directory: Path, tree: Path, hosts: dict[str, str], key: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    doc = {
        "all": {
            "vars": {"ansible_user": "root", "ansible_ssh_private_key_file": key,
                     "ansible_python_interpreter": "/usr/bin/python3",
                     # the simulation's nodes get new host keys with every boot (as in inventories/sim)
                     "ansible_host_key_checking": False,
                     "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null"},
            "children": {"gpu_servers": {"hosts": {n: {"ansible_host": ip} for n, ip in hosts.items()}}},
        }
    }  # fmt: skip
    (directory / "hosts.yml").write_text(json.dumps(doc, indent=1))
    (directory / "group_vars").symlink_to(tree / "inventories" / "sim" / "group_vars")
    return directory / "hosts.yml"


def env_for(tree: Path, work: Path, tag: str) -> dict:
    env = dict(os.environ, ANSIBLE_CONFIG=str(tree / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(tree))
    env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '')}"
    env["ANSIBLE_NOCOLOR"] = "1"
    env["ANSIBLE_CALLBACK_PLUGINS"] = f"{ROOT}/tests/integration/callback_plugins"
    env["ANSIBLE_CALLBACKS_ENABLED"] = "llmops.sglang.sglang_progress,module_runs"
    env["MODULE_RUNS_DIR"] = str(work / f"{tag}.runs")
    return env


def timed(cmd, env, cwd, log: Path):
    t0 = time.monotonic()
    p = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, check=False, timeout=7200)
    elapsed = time.monotonic() - t0
    log.write_text(p.stdout + p.stderr)
    return elapsed, p


def recap_changed(stdout: str) -> dict[str, int]:
    return {m[0]: int(m[1]) for m in re.findall(r"^(\S+)\s+:\s+ok=\d+\s+changed=(\d+)", stdout, flags=re.M)}


def record(directory: Path) -> dict:
    """The module_runs callback's record of the last playbook run written into ``directory``."""
    files = sorted(directory.glob("*.json")) if directory.is_dir() else []
    return json.loads(files[-1].read_text()) if files else {"runs": {}, "tasks": [], "total": 0.0}


def module_runs(directory: Path) -> dict:
    return record(directory)["runs"]


def top(directory: Path, n: int = 12):
    data = record(directory)
    rows = sorted(data["tasks"], key=lambda r: -r["seconds"])[:n]
    roles: dict[str, float] = {}
    for r in data["tasks"]:
        key = r["role"] or f"(play) {r['play']}"
        roles[key] = roles.get(key, 0.0) + r["seconds"]
    return data["total"], rows, sorted(roles.items(), key=lambda kv: -kv[1]), len(data["tasks"])


def health_seconds(directory: Path) -> float:
    """Seconds of the GPU health verdict's tasks that ran in the playbook run recorded in ``directory``."""
    return sum(
        r["seconds"]
        for r in record(directory)["tasks"]
        if (r.get("action") == "llmops.sglang.gpu_health" or r["task"].startswith(HEALTH_TASKS))
        and (r.get("status") or {}).get("ran")
    )


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tree", type=Path, default=ROOT)
    ap.add_argument("--keep", action="store_true", help="leave the nodes up (and reuse them next time)")
    ap.add_argument("--converged", action="store_true", help="the kept nodes are converged: skip the cold run")
    args = ap.parse_args(argv)
    tree = args.tree.resolve()
    if os.geteuid() != 0:
        sys.exit("bench: needs root (simulated nodes)")
    work = Path(tempfile.mkdtemp(prefix="bench-converged-"))
    key = sim_node("ssh-key").stdout.strip()
    one = inventory(work / "one", tree, {"bc1": NODES["bc1"]}, key)
    three = inventory(work / "three", tree, NODES, key)
    site = str(tree / "site.yml")
    ok = True
    try:
        if not args.converged:
            for name in NODES:
                sim_node("down", name, check=False)
            sim_node("mirrors", "up")
            for name, ip in NODES.items():
                sim_node("up", name, ip, "--profile", "rtx-pro-6000-x8", "--driver", "none")
            print(f"bench: converging {', '.join(NODES)} with {site} (cold)", flush=True)
            cold, p = timed(["ansible-playbook", "-i", str(three), site], env_for(tree, work, "cold"), tree,
                            work / "cold.log")  # fmt: skip
            if p.returncode != 0:
                sys.exit(f"bench: the cold converge failed (rc {p.returncode}); log: {work / 'cold.log'}")
            facts = {h: c.get("llmops.sglang.gpu_facts") for h, c in module_runs(work / "cold.runs").items()}
            print(f"bench: cold converge of 3 nodes: {cold:.0f} s; gpu_facts runs per host: {facts}")
        samples = {"site 1": [], "site 3": [], "ping 1": [], "ping 3": []}
        changed = {"site 1": [], "site 3": []}
        for i in range(args.runs):
            for label, inv in (("site 1", one), ("site 3", three)):
                tag = f"{label.replace(' ', '')}-{i}"
                elapsed, p = timed(["ansible-playbook", "-i", str(inv), site], env_for(tree, work, tag), tree,
                                   work / f"{tag}.log")  # fmt: skip
                if p.returncode != 0:
                    sys.exit(f"bench: a converged {label}-node run failed; log: {work / f'{tag}.log'}")
                samples[label].append(elapsed)
                changed[label].append(recap_changed(p.stdout))
            for label, inv in (("ping 1", one), ("ping 3", three)):
                elapsed, p = timed(["ansible", "-i", str(inv), "gpu_servers", "-m", "ansible.builtin.ping"],
                                   env_for(tree, work, "ping"), tree, work / "ping.log")  # fmt: skip
                samples[label].append(elapsed)
        med = {k: statistics.median(v) for k, v in samples.items()}
        ratio = med["site 3"] / med["site 1"]
        health = [round(health_seconds(work / f"site1-{i}.runs"), 2) for i in range(args.runs)]
        print(f"\nconverged re-run ({tree}; median of {args.runs} runs, every run in brackets)")
        print(f"  {'':28} {'1 node':>10} {'3 nodes':>10} {'3 / 1':>8}")
        for what, a, b in (("ansible-playbook site.yml", "site 1", "site 3"), ("ansible -m ping", "ping 1", "ping 3")):
            print(f"  {what:28} {med[a]:9.1f}s {med[b]:9.1f}s {med[b] / med[a]:8.2f}")
            every_a, every_b = [round(x, 1) for x in samples[a]], [round(x, 1) for x in samples[b]]
            print(f"  {'':28} {every_a!s:>10} {every_b!s}")
        runs = {label: module_runs(work / f"{label.replace(' ', '')}-{args.runs - 1}.runs") for label in changed}
        print("  gpu_facts runs per host (last run): "
              + "; ".join(f"{label}: {sorted({c.get('llmops.sglang.gpu_facts', 0) for c in r.values()})}"
                          for label, r in runs.items()))  # fmt: skip
        print(f"  changed tasks per host: {changed}")
        said = f"{statistics.median(health):.1f} s of the one-node re-run {health}"
        print(f"  the GPU health verdict (idle and under load): {said}")
        total, rows, roles, count = top(work / f"site1-{args.runs - 1}.runs")
        print(f"\nwhere the time goes (last one-node run: {total:.1f} s, {count} tasks)")
        for name, secs in roles[:10]:
            print(f"  {secs:6.1f}s  {name}")
        print("  longest tasks:")
        for r in rows:
            print(f"  {r['seconds']:6.2f}s  [{r['role'] or r['play']}] {r['task']}")
        if any(c for runs_ in changed.values() for rec in runs_ for c in rec.values()):
            print("bench: MISSED: a converged re-run changed something")
            ok = False
        if med["site 1"] > TARGET_ONE_S:
            print(f"bench: MISSED: one node {med['site 1']:.1f} s > {TARGET_ONE_S:.0f} s")
            ok = False
        if statistics.median(health) > TARGET_HEALTH_S:
            print(f"bench: MISSED: the GPU health verdict {statistics.median(health):.1f} s > {TARGET_HEALTH_S:.0f} s")
            ok = False
        if ratio > TARGET_RATIO:
            print(f"bench: MISSED: three nodes {ratio:.2f} x one node > {TARGET_RATIO}")
            ok = False
        print(f"bench: logs in {work}")
    finally:
        if not args.keep:
            for name in NODES:
                sim_node("down", name, check=False)
            sim_node("teardown", check=False)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
