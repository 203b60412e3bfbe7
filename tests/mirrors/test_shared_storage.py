"""hf_snapshot on shared storage (lock_owner): hosts that see one model root download each commit once, the others
wait without writing and verify read-only; a holder that stopped is taken over. Several hosts are several module
processes with their own lock_owner on one directory, against the hub stand-in."""

import json
import os
import threading
import time

from _mirror_util import control, http
from _module_util import run_module

BIG = "sim-org/big-shard"
FILE = "model.safetensors"
SIZE = 12 * 1024 * 1024


def args(server, root, owner, **kw):
    return {
        "repo_id": BIG,
        "endpoint": server["hf_root"],
        "dest": str(root),
        "by_commit": True,
        "reserve_gib": 0,
        "segment_mib": 1,
        "connections": 2,
        "lock_owner": owner,
        **kw,
    }


def pace(server, rate):
    status, _, _ = http(f"{server['control']}hub", "POST", json.dumps({"rate": rate}).encode())
    assert status == 200


def file_bytes(server, since):
    return sum(
        r["bytes"]
        for r in control(server, "requests?settle=")
        if r["time"] >= since and r["method"] == "GET" and r["path"].endswith("/" + FILE)
    )


def loop(server, root, owner, results, limit=400):
    """One host's until/retries loop (wait_budget 0.5 s), at most ``limit`` calls."""
    for _ in range(limit):
        rc, res, out = run_module(args(server, root, owner, wait_budget=0.5))
        if rc != 0 or res.get("done"):
            results[owner] = (rc, res, out)
            return
    results[owner] = (None, {}, f"no end in {limit} calls")


def test_three_hosts_on_one_root_download_the_commit_once_and_each_verifies_it(built, server, tmp_path):
    control(server, "faults", "DELETE")
    root = tmp_path / "shared"
    root.mkdir()
    since = time.time()
    results = {}
    threads = [threading.Thread(target=loop, args=(server, root, f"gpu0{i}", results)) for i in (1, 2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for owner, (rc, res, out) in results.items():
        assert rc == 0 and res["done"], (owner, out[-2000:])
    assert file_bytes(server, since) == SIZE  # once, not three times
    commit = results["gpu01"][1]["commit"]
    snap = root / commit
    assert json.loads((snap / ".llmops-snapshot.json").read_text())["commit"] == commit
    assert sorted(p.name for p in root.iterdir()) == [commit]  # no lock and nothing set aside left
    assert not (snap / ".llmops-partial").exists()


def test_a_waiting_host_writes_nothing_and_takes_over_a_holder_that_stopped(built, server, tmp_path):
    root = tmp_path / "shared"
    pace(server, 1 << 20)  # 1 MiB/s per connection: gpu01's first call (0.3 s) cannot finish the 12 MiB
    try:
        rc, res, out = run_module(args(server, root, "gpu01", wait_budget=0.3))  # gpu01 starts and gets the lock
    finally:
        pace(server, 0)
    assert rc == 0 and res["done"] is False, out
    commit = res["commit"]
    lock = root / (".llmops-lock-" + commit)
    assert lock.is_dir(), out
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    rc, res, out = run_module(args(server, root, "gpu02", wait_budget=0.3))
    assert rc == 0 and res["done"] is False and res["waiting_for"] == "gpu01", out
    assert "waiting for gpu01" in res["msg"]
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before  # wrote nothing
    # gpu01's run was killed: its heartbeat ages past lock_stale (set here, not waited for)
    old = time.time() - 31
    os.utime(lock / "owner.json", (old, old))
    rc, res, out = run_module(args(server, root, "gpu02", lock_stale=30))
    assert rc == 0 and res["done"] and res["commit"] == commit, out
    assert any(r["path"] == FILE and r["from"] > 0 for r in res["resumed"]), out  # from gpu01's partial file
    assert not lock.exists() and (root / commit / FILE).stat().st_size == SIZE
