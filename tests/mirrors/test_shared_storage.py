"""hf_snapshot on shared storage (lock_owner): hosts that see one model root download each commit once, the others
wait without writing and verify read-only; a holder that stopped is taken over. Several hosts are several module
processes with their own lock_owner on one directory, against the hub stand-in."""

import json
import os
import pwd
import threading
import time

import pytest
from _mirror_util import control, http
from _module_util import run_module
from share_util import write_private
from squash_util import root_squashed_share

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


# ---- a share exported with root_squash (sim/share/root_squash.py) ---------------------------------------------------
ACCOUNT = "daemon"  # an account every Debian and Ubuntu host has (base-passwd): it owns the share's directory


def test_on_a_root_squash_share_root_is_refused_in_one_line_and_writes_nothing(built, server, tmp_path):
    pw = pwd.getpwnam(ACCOUNT)
    with root_squashed_share(pw.pw_uid, pw.pw_gid) as (backing, mnt):
        rc, res, out = run_module(args(server, mnt / "glm.revisions", "gpu01"))
        assert rc != 0 and res["failed"], out
        assert "Traceback" not in out
        msg = res["msg"]
        assert msg == (
            f"dest: expected a writable directory; found {mnt} not writable for root (on a share exported with "
            "root_squash, root writes as the anonymous account: set run_as, the model role's model_storage_account, "
            "to the account that owns it); choose a writable path or fix it"
        ), msg
        assert list(backing.iterdir()) == []


def test_on_a_root_squash_share_run_as_the_owner_downloads_once_and_leaves_its_files(built, server, tmp_path):
    pw = pwd.getpwnam(ACCOUNT)
    token = tmp_path / "hf-token.env"  # root-only, in a root-only directory: read as root while writing as the account
    write_private(token, "HF_TOKEN=hf_test_token\n")
    with root_squashed_share(pw.pw_uid, pw.pw_gid) as (backing, mnt):
        root = mnt / "glm.revisions"
        rc, res, out = run_module(args(server, root, "gpu01", run_as=ACCOUNT, token_file=str(token)))
        assert rc == 0 and res["done"] and res["changed"], out
        commit = res["commit"]
        assert sorted(p.name for p in (backing / "glm.revisions").iterdir()) == [commit]  # no lock, nothing aside
        snap = backing / "glm.revisions" / commit
        written = [snap.parent, snap, *snap.rglob("*")]
        assert {(p.lstat().st_uid, p.lstat().st_gid) for p in written} == {(pw.pw_uid, pw.pw_gid)}
        assert (snap / FILE).stat().st_size == SIZE and not (snap / ".llmops-partial").exists()
        # every host that mounts it: a second call (another owner) finds the snapshot complete, writes nothing
        before = sorted((str(p.relative_to(backing)), p.stat().st_mtime_ns) for p in backing.rglob("*"))
        rc, res, out = run_module(args(server, root, "gpu02", run_as=ACCOUNT))
        assert rc == 0 and res["done"] and not res["changed"] and res["commit"] == commit, out
        assert sorted((str(p.relative_to(backing)), p.stat().st_mtime_ns) for p in backing.rglob("*")) == before


@pytest.mark.parametrize(
    ("account", "expected"),
    [
        ("llmops-no-such-account", "run_as: no account llmops-no-such-account on this host; create the account"),
        ("root", "run_as: the account root is root: name an account that owns the directory instead"),
        ("Bad Name", "run_as: expected an account name (lower-case letters, digits, _ and -, at most 32); found"),
    ],
)
def test_run_as_an_account_that_cannot_be_used_is_refused_in_one_line(built, server, tmp_path, account, expected):
    rc, res, out = run_module(args(server, tmp_path / "models", "gpu01", run_as=account))
    assert rc != 0 and res["msg"].startswith(expected) and "\n" not in res["msg"], out
    assert "Traceback" not in out and not (tmp_path / "models").exists()
