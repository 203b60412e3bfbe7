"""Once per fleet: three simulated hosts get one model, the hub serves its bytes once, every host verifies every file.

Boots fl1, fl2, fl3 (10.213.0.71-73, no GPU: the model role needs none) and serves a small model from its own hub
stand-in on the bridge (paced per connection, so one host's download takes seconds). First fl1 alone downloads it
(the one-host time), then playbooks/model.yml runs on all three with model_fleet_fanout: fl1 downloads from the hub,
fl2 and fl3 copy from fl1 over the LAN. Prints the wall-time ratio (a figure, not asserted: no timed asserts in
tests; `make bench` measures the same ratio on one machine).

The three nodes also mount one host directory at SHARED (sim/node up --bind), as they would one NFS export with
root_squash (the NFS default; sim/share/root_squash.py performs root's requests as the anonymous account): root is
refused there, and with model_storage shared and model_storage_account one host downloads as that account under the
lock on the share and the other two wait and verify.

Environment: FL_NODE_PREFIX (default fl), FL_NODE_BASE (default 71: addresses 10.213.0.71-73).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from _node_util import (
    ROOT,
    VENV_BIN,
    Node,
    booted_nodes,
    fleet_inventory,
    guarded_run,
    ssh_key,
)  # fmt: skip
from events import PLAYBOOK_GUARD
from playbook_output import failed_tasks, play_recap
from squash_util import root_squashed_share

from ansible_collections.llmops.sglang.plugins.module_utils.hf_hub import PARTIAL_DIR
from ansible_collections.llmops.sglang.plugins.module_utils.hf_lock import PREFIX as LOCK_PREFIX

pytestmark = pytest.mark.node

PREFIX = os.environ.get("FL_NODE_PREFIX", "fl")
BASE = int(os.environ.get("FL_NODE_BASE", "71"))
HOSTS = {f"{PREFIX}{i + 1}": f"10.213.0.{BASE + i}" for i in range(3)}
BRIDGE = "10.213.0.1"
REPO = "sim-org/fleet-model"
RATE = 256 * 1024  # bytes/s per connection at the hub: the download, not Ansible, dominates the wall time
MIB = 1 << 20
SHARED = "/srv/shared-models"  # where each node mounts the one shared directory
ACCOUNT, UID = "llmops-model", 3717  # owns the share's directory on the "file server"; the role creates it on the nodes


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    if os.geteuid() != 0 or shutil.which("systemd-nspawn") is None:
        pytest.skip("node tests need root and systemd-nspawn")
    assert re.fullmatch(r"[a-z]{2}[a-z0-9-]{0,8}", PREFIX) and 70 < BASE < 96
    work = tmp_path_factory.mktemp("fleet")
    src = work / "model"
    src.mkdir()
    (src / "config.json").write_text('{"model_type": "llama"}\n')
    for i in range(6):
        (src / f"model-{i:05d}-of-00006.safetensors").write_bytes(random.Random(i).randbytes(4 * MIB))
    out = work / "out"
    subprocess.run(
        [
            sys.executable,
            ROOT / "sim/mirrors/build.py",
            "--out",
            out,
            "--base-url",
            f"http://{BRIDGE}:8080",
            "--only",
            "hub",
            "--hub-model",
            f"{REPO}={src}",
        ],
        check=True,
        capture_output=True,
        timeout=300,
    )
    control = Path(f"/tmp/fl-ssh-{os.getpid()}")  # ssh ControlMaster sockets (short path: sun_path limit)
    with (
        root_squashed_share(UID, UID) as (shared, mount),
        booted_nodes({name: (ip, "none") for name, ip in HOSTS.items()}, bind=f"{mount}:{SHARED}"),
        contextlib.ExitStack() as cleanup,
    ):
        cleanup.callback(shutil.rmtree, control, ignore_errors=True)
        control.mkdir(exist_ok=True)
        nodes = {ip: Node(name, ip, ssh_key(), control) for name, ip in HOSTS.items()}
        for node in nodes.values():
            cleanup.callback(node.close)
        yield served_fleet(work, out, nodes, cleanup, shared)


def served_fleet(work, out, nodes, cleanup, shared) -> dict:
    """The hub stand-in on the bridge (stopped by ``cleanup``) and the inventory of the booted nodes."""
    hub = subprocess.Popen(
        [
            sys.executable,
            ROOT / "sim/mirrors/serve.py",
            "--root",
            out,
            "--bind",
            BRIDGE,
            "--port",
            "0",
            "--hub-port",
            "0",
            "--hub-rate",
            str(RATE),
            "--hub-latency",
            "0.01",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    cleanup.callback(hub.wait, 15)
    cleanup.callback(hub.send_signal, signal.SIGTERM)
    urls = json.loads(hub.stdout.readline())
    # its own stage variables (no sim group_vars): the model role alone, against this hub
    inv = fleet_inventory(work / "inventory", {"gpu_servers": {"hosts": HOSTS}}, sim_group_vars=False) / "hosts.yml"
    meta = json.loads((out / "hub" / REPO / "repo.json").read_text())
    files = meta["commits"][meta["refs"]["main"]]["files"]
    for node in nodes.values():
        node.sh("systemctl is-system-running --wait >/dev/null || true", timeout=120)
    return {"nodes": nodes, "inv": inv, "urls": urls, "files": files, "work": work, "shared": shared}


def requests_log(urls):
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(urls["control"] + "requests", timeout=10) as r:
        return json.loads(r.read())


def hub_file_bytes(urls, since):
    return sum(
        r["bytes"]
        for r in requests_log(urls)
        if r["time"] >= since and r["listener"] in ("hub", "cdn") and "/api/" not in r["path"]
    )


def run_model(fleet, limit, extra, *, ok=True):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        PATH=f"{VENV_BIN}:{env.get('PATH', '')}",
        ANSIBLE_CALLBACKS_ENABLED="llmops.sglang.sglang_progress",
    )
    variables = {
        "llmops_model_repo_id": REPO,
        "model_hf_endpoint": fleet["urls"]["hf_root"],
        "model_progress_interval": 2,
        "model_download_connections": 4,
        "model_reserve_gib": 0,
        **extra,
    }
    t0 = time.monotonic()
    p = guarded_run(
        [
            shutil.which("ansible-playbook", path=env["PATH"]),
            "-i",
            str(fleet["inv"]),
            "--limit",
            limit,
            "-e",
            json.dumps(variables),
            str(ROOT / "playbooks/model.yml"),
        ],
        nodes=fleet["nodes"].values(),
        env=env,
        cwd=ROOT,
        timeout=PLAYBOOK_GUARD,
        stdin=subprocess.DEVNULL,
    )
    if not ok:
        assert p.returncode != 0, p.stdout[-3000:]
        return time.monotonic() - t0, p.stdout
    if p.returncode != 0:
        seed = fleet["nodes"][next(iter(HOSTS.values()))]
        journal = seed.sh("journalctl -u llmops-model-share --no-pager | tail -20", check=False, timeout=30)
        raise AssertionError(
            "failed tasks:\n" + failed_tasks(p.stdout) + "\n\nthe output's tail:\n" + p.stdout[-3000:]
            + p.stderr[-2000:] + "\nshare unit on the seed:\n" + journal
        )  # fmt: skip
    return time.monotonic() - t0, p.stdout


def assert_verified_copy(fleet, ip, llmops_model_dir):
    listing = {f["path"]: f for f in fleet["files"]}
    node = fleet["nodes"][ip]
    marker = json.loads(node.sh(f"cat {llmops_model_dir}/.llmops-snapshot.json"))
    assert set(marker["files"]) == set(listing)
    sums = node.sh(f"cd {llmops_model_dir} && sha256sum " + " ".join(sorted(listing)))
    for line in sums.splitlines():
        digest, path = line.split()
        f = listing[path]
        if "lfs" in f:
            assert digest == f["lfs"]["oid"], (ip, path)
        else:
            data = node.run(f"cat {llmops_model_dir}/{path}").stdout
            assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == f["oid"], (ip, path)


def test_the_hub_serves_the_model_once_for_three_hosts_and_every_host_verifies_it(fleet):
    model_bytes = sum(f["size"] for f in fleet["files"])
    first = next(iter(HOSTS))
    t = time.time()
    solo, _ = run_model(fleet, first, {"llmops_model_dir": "/opt/models/solo"})
    assert hub_file_bytes(fleet["urls"], t) == model_bytes
    t = time.time()
    wall, out = run_model(fleet, "all", {"llmops_model_dir": "/opt/models/fleet", "model_fleet_fanout": True})
    assert hub_file_bytes(fleet["urls"], t) == model_bytes  # once, not three times
    for ip in HOSTS.values():
        assert_verified_copy(fleet, ip, "/opt/models/fleet")
    # the share is gone once the copies are done
    share = fleet["nodes"][HOSTS[first]].sh("systemctl is-active llmops-model-share.service || true")
    assert share.strip() != "active"
    # and so is the run's secret, on every host (the share's config on the seed, the receivers' token files)
    for ip in HOSTS.values():
        assert (
            fleet["nodes"][ip].sh("test -e /run/llmops-sglang/model-share && echo left || echo gone").strip() == "gone"
        )
    assert re.search(rf"\[model\] {re.escape(first)}: \d+/\d+ files", out), out[-3000:]
    print(
        f"\nfleet of 3: one host {solo:.1f} s, three hosts {wall:.1f} s, ratio {wall / solo:.2f} (target <= 1.5); "
        f"hub served {model_bytes / MIB:.1f} MiB once"
    )


def test_three_hosts_on_one_shared_model_directory_download_once_and_each_verifies(fleet):
    """model_storage shared on a root_squash export: root is refused in one line and writes nothing; as the account
    that owns the share, the hub serves the bytes once, to one host, every host reads the complete snapshot through its
    own mount, and the share keeps no partial file and no lock."""
    model_bytes = sum(f["size"] for f in fleet["files"])
    shared = {
        "llmops_model_dir": "/opt/models/glm",  # the link each host serves from: its own disk
        "llmops_model_revisions_dir": f"{SHARED}/glm.revisions",
        "model_storage": "shared",
    }
    # as root (no account): the export writes root's files as its anonymous account, which owns nothing there
    _, out = run_model(fleet, "all", shared, ok=False)
    refused = re.findall(
        r"fatal: \[(\S+)\]: FAILED! => [^\n]*dest: expected a writable directory; found \S+ not writable for root "
        r"\(on a share exported with root_squash[^\n]*model_storage_account",
        out,
    )
    assert sorted(refused) == sorted(HOSTS), failed_tasks(out)
    assert list(fleet["shared"].iterdir()) == [], "root wrote on the share"
    as_owner = {**shared, "model_storage_account": ACCOUNT, "model_storage_uid": UID}
    t = time.time()
    _, out = run_model(fleet, "all", as_owner)
    served = [r for r in requests_log(fleet["urls"]) if r["time"] >= t and r["listener"] in ("hub", "cdn")]
    assert hub_file_bytes(fleet["urls"], t) == model_bytes  # 1.00 x: once, not three times
    downloaders = {r["client"] for r in served if "/api/" not in r["path"] and r["bytes"]}
    assert len(downloaders) == 1, f"file bytes went to {sorted(downloaders)}: expected one host"
    for ip in HOSTS.values():
        assert_verified_copy(fleet, ip, shared["llmops_model_dir"])
        node = fleet["nodes"][ip]
        assert node.sh(f"getent passwd {ACCOUNT} | cut -d: -f3,4,7").strip() == f"{UID}:{UID}:/usr/sbin/nologin"
    # a host that came while the download ran waited for the host that downloaded (the progress line names the lock's
    # holder), and that host never waited (how many came while it ran depends on the machine's speed: not asserted)
    (downloader,) = [name for name, ip in HOSTS.items() if ip in downloaders]
    waits = set(re.findall(r"\[model\] (\S+): \d+/\d+ files verified by (\S+)", out))
    assert all(holder == downloader != host for host, holder in waits), (downloader, waits)
    # on the file server: everything the download left belongs to the account, nothing to the anonymous one
    owners = {(p.lstat().st_uid, p.lstat().st_gid) for p in fleet["shared"].rglob("*")}
    assert owners == {(UID, UID)}, owners
    left = sorted(
        str(p.relative_to(fleet["shared"]))
        for p in fleet["shared"].rglob("*")
        if p.name == PARTIAL_DIR or p.name.startswith(LOCK_PREFIX)
    )
    assert not left, f"left on the share: {left}"
    # a second run downloads nothing and changes nothing, on any host
    t = time.time()
    _, again = run_model(fleet, "all", as_owner)
    assert hub_file_bytes(fleet["urls"], t) == 0
    recap = play_recap(again)
    assert set(recap) == set(HOSTS) and all(c["changed"] == 0 for c in recap.values()), recap
