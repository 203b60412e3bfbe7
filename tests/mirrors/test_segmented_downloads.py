"""hf_snapshot's segmented transfers against the hub stand-in: interrupted, corrupted, out of disk, retried, gated.

The stand-in paces each connection (``/_sim/hub`` rate) so that a transfer is still running when a test interrupts
it. The 12 MiB ``model.safetensors`` of ``sim-org/big-shard`` is fetched in 1 MiB segments.
"""

import hashlib
import json
import os
import random
import re
import subprocess
import threading
import time
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from _mirror_util import control, http
from _module_util import finished_segments, kill_when, run_module, segment_state, start_module
from events import GUARD
from events import wait_until as wait_for
from share_util import start_share, stop_share

BIG = "sim-org/big-shard"
FILE = "model.safetensors"
SIZE = 12 * 1024 * 1024
MIB = 1 << 20


@pytest.fixture
def hub(server):
    control(server, "requests", "DELETE")
    control(server, "faults", "DELETE")
    yield server
    control(server, "faults", "DELETE")
    http(f"{server['control']}hub", "POST", json.dumps({"rate": 0, "latency": 0}).encode())


def pace(server, rate):
    status, _, _ = http(f"{server['control']}hub", "POST", json.dumps({"rate": rate}).encode())
    assert status == 200


def args(server, dest, **kw):
    return {
        "repo_id": BIG,
        "endpoint": server["hf_root"],
        "dest": str(dest),
        "reserve_gib": 0,
        "segment_mib": 1,
        "connections": 2,
        "retries": 0,
        **kw,
    }


def file_gets(server, since):
    """GETs of the big file (hub and storage host) started after ``since``: (range start or 0, status, bytes).
    The answers a killed run left in flight are logged when the server notices the closed connection: ``settle``
    waits for that (on the server's own state, no sleep), and the start time keeps an earlier run's out."""
    out = []
    for r in control(server, "requests?settle="):
        if r["time"] >= since and r["method"] == "GET" and r["path"].endswith("/" + FILE) and r["status"] in (200, 206):
            start = int(r["range"].split("=")[1].split("-")[0]) if r["range"] else 0
            out.append((start, r["status"], r["bytes"]))
    return out


def on_disk(dest):
    """Bytes of the big file the segment state records as written."""
    return sum(s[2] for s in segment_state(dest, FILE) or [])


def expected_sha(built):
    meta = json.loads((built["out"] / "hub" / BIG / "repo.json").read_text())
    files = meta["commits"][meta["refs"]["main"]]["files"]
    return next(f for f in files if f["path"] == FILE)["lfs"]["oid"]


def sha256(path):
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def assert_no_finished_segment_fetched(server, finished, since):
    starts = {s for s, _, _ in file_gets(server, since)}
    assert not starts & {i * MIB for i in finished}, (sorted(starts), finished)


def test_killed_mid_segment_resumes_and_never_refetches_a_finished_segment(built, hub, tmp_path):
    dest = tmp_path / "model"
    pace(hub, 1 * MIB)
    # killed mid-segment: both connections are inside their next range
    kill_when(args(hub, dest), lambda: len(finished_segments(dest, FILE)) >= 3, "three finished segments")
    saved = segment_state(dest, FILE)
    finished = finished_segments(dest, FILE)
    kept = sum(s[2] for s in saved)
    assert len(finished) >= 3 and not (dest / ".llmops-snapshot.json").exists()
    pace(hub, 0)
    since = time.time()
    rc, res, out = run_module(args(hub, dest))
    assert rc == 0 and res["done"], out
    assert {"path": FILE, "from": kept} in res["resumed"]
    assert sum(b for _, _, b in file_gets(hub, since)) == SIZE - kept  # only the missing bytes crossed the wire
    assert_no_finished_segment_fetched(hub, finished, since)
    assert sha256(dest / FILE) == expected_sha(built)
    marker = json.loads((dest / ".llmops-snapshot.json").read_text())
    assert marker["files"][FILE]["digest"] == expected_sha(built)
    assert not (dest / ".llmops-partial").exists()


def test_a_corrupted_finished_segment_is_fetched_again_and_nothing_else(built, hub, tmp_path):
    dest = tmp_path / "model"
    pace(hub, 1 * MIB)
    # an interrupted download with two finished segments (the event, not a time budget)
    kill_when(args(hub, dest), lambda: len(finished_segments(dest, FILE)) >= 2, "two finished segments")
    finished = finished_segments(dest, FILE)
    assert len(finished) >= 2, segment_state(dest, FILE)
    bad = finished[1]
    part = dest / ".llmops-partial" / (FILE + ".incomplete")
    with open(part, "r+b") as f:  # flip bytes in the middle of a finished segment
        f.seek(bad * MIB + MIB // 2)
        f.write(b"\xde\xad\xbe\xef")
    pace(hub, 0)
    since = time.time()
    rc, res, out = run_module(args(hub, dest))
    assert rc == 0 and res["done"], out
    assert res["refetched"] == [{"path": FILE, "segments": [bad]}]
    starts = [s for s, _, _ in file_gets(hub, since)]
    assert starts.count(bad * MIB) == 1
    assert not set(starts) & {i * MIB for i in finished if i != bad}
    assert sha256(dest / FILE) == expected_sha(built)
    assert (dest / ".llmops-snapshot.json").exists()


class _CorruptPeer(SimpleHTTPRequestHandler):
    asked = None  # a threading.Event set at the first request (see peer_server)

    def log_message(self, *a):
        pass

    def do_GET(self):
        if self.asked is not None:
            self.asked.set()
        super().do_GET()

    def translate_path(self, path):  # receivers ask for /COMMIT/PATH (the share serves a file only for its commit)
        return super().translate_path(re.sub(r"^/[0-9a-f]{40}(?=/)", "", path))


def peer_server(directory):
    """A plain file server over ``directory`` (a peer host's share); ``srv.asked`` is set once it has been asked."""
    asked = threading.Event()
    srv = ThreadingHTTPServer(
        ("127.0.0.1", 0), partial(type("Peer", (_CorruptPeer,), {"asked": asked}), directory=str(directory))
    )
    srv.asked = asked
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def test_bytes_that_do_not_match_the_listing_are_never_marked_done(built, hub, tmp_path):
    """A peer serving a damaged copy: the file fails its sha256 against the hub listing, is removed, no marker."""
    peer_dir = tmp_path / "peer"
    rc, res, out = run_module(args(hub, peer_dir))
    assert rc == 0, out
    with open(peer_dir / FILE, "r+b") as f:
        f.seek(5 * MIB)
        f.write(b"\x00" * 16)
    srv = peer_server(peer_dir)
    dest = tmp_path / "model"
    try:
        rc, res, out = run_module(
            args(hub, dest, peer_url=f"http://127.0.0.1:{srv.server_port}", segment_mib=0, connections=2)
        )
    finally:
        srv.shutdown()
    assert rc == 1 and res["failed"], out
    assert f"the listing says {expected_sha(built)}" in res["msg"] and "Traceback" not in out
    assert not (dest / ".llmops-snapshot.json").exists() and not (dest / FILE).exists()
    assert not (dest / ".llmops-partial" / (FILE + ".incomplete")).exists()


@pytest.fixture
def small_fs(tmp_path):
    """A 16 MiB tmpfs the test mounts and always unmounts."""
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root")
    mnt = tmp_path / "small"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_stops_with_one_line_and_the_next_run_keeps_the_finished_segments(built, hub, small_fs):
    dest = small_fs / "model"
    pace(hub, 1 * MIB)
    proc = start_module(args(hub, dest))
    try:
        wait_for(lambda: len(finished_segments(dest, FILE)) >= 2, "two finished segments")
        with open(small_fs / "filler", "wb") as f:  # take every free byte
            try:
                for _ in range(64):
                    f.write(b"\0" * MIB)
                    f.flush()
            except OSError:
                pass
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        os.unlink(proc.args_file)
    res = json.loads(out)
    assert proc.returncode == 1 and res["failed"], res
    assert "the disk is full while writing" in res["msg"] and "\n" not in res["msg"]
    assert b"Traceback" not in out + err
    assert not (dest / ".llmops-snapshot.json").exists()
    finished = finished_segments(dest, FILE)
    kept = sum(s[2] for s in segment_state(dest, FILE))
    assert len(finished) >= 2
    (small_fs / "filler").unlink()
    pace(hub, 0)
    since = time.time()
    rc, res, out = run_module(args(hub, dest))
    assert rc == 0 and res["done"], out
    assert sum(b for _, _, b in file_gets(hub, since)) == SIZE - kept
    assert_no_finished_segment_fetched(hub, finished, since)
    assert sha256(dest / FILE) == expected_sha(built)


def test_429_and_503_are_retried_honouring_retry_after(built, hub, tmp_path):
    control(
        hub,
        "faults",
        "POST",
        [
            {
                "match": f"*/resolve/*/{FILE}",
                "action": "status",
                "status": 429,
                "times": 1,
                "headers": {"Retry-After": "1"},
            },
            {"match": f"/cdn-lfs/*/{FILE}", "action": "status", "status": 503, "times": 2},
        ],
    )
    dest = tmp_path / "model"
    rc, res, out = run_module(args(hub, dest, retries=3, connections=1, segment_mib=0))
    assert rc == 0 and res["done"], out
    log = [r for r in control(hub, "requests") if r["path"].endswith("/" + FILE)]
    statuses = [r["status"] for r in log]
    assert statuses[0] == 429 and statuses.count(503) == 2 and statuses[-1] in (200, 206)
    assert log[1]["time"] - log[0]["time"] >= 0.9  # the retry waited for Retry-After
    assert sha256(dest / FILE) == expected_sha(built)


def test_gated_repo_on_the_download_path_gives_the_gated_hint(hub, tmp_path):
    gated = "sim-org/Meta-Llama-3-8B-Instruct"
    for token, status in ((None, 401), ("hf_no_access_token", 403)):
        rc, res, out = run_module(args(hub, tmp_path / "m", repo_id=gated, token=token))
        assert rc == 1, out
        assert f"answered HTTP {status} (GatedRepo)" in res["msg"] and "The repository is gated" in res["msg"]
        assert "hf_no_access_token" not in out  # the token is never shown, not even in the invocation


def test_a_peer_still_downloading_is_waited_for_and_the_hub_sends_no_file_bytes(built, hub, tmp_path):
    seed = tmp_path / "seed"
    rc, res, out = run_module(args(hub, seed))
    assert rc == 0, out
    share = tmp_path / "share"
    share.mkdir()
    srv = peer_server(share)
    since = time.time()
    proc = start_module(
        args(hub, tmp_path / "model", peer_url=f"http://127.0.0.1:{srv.server_port}", segment_mib=0, peer_wait=300)
    )
    try:
        # the peer has nothing yet: the module has asked (404) and will ask again; peer_wait is a hang guard here
        assert srv.asked.wait(GUARD), "the module never asked the peer"
        for f in sorted(p.name for p in seed.iterdir() if p.is_file() and not p.name.startswith(".")):
            tmp = share / (f + ".tmp")
            tmp.write_bytes((seed / f).read_bytes())
            tmp.rename(share / f)  # as the seed does: a file appears whole, once verified
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        os.unlink(proc.args_file)
        srv.shutdown()
    res = json.loads(out)
    assert proc.returncode == 0 and res["done"], res
    assert sha256(tmp_path / "model" / FILE) == expected_sha(built)
    hub_bytes = [r for r in control(hub, "requests") if r["time"] >= since and "/api/" not in r["path"] and r["bytes"]]
    assert hub_bytes == []  # listing and digests from the hub, every file byte from the peer


def calls_until_the_end(module_args, limit=40):
    """Call the module as the role's until/retries loop does (the same arguments again while it answers done=false)
    at most ``limit`` times: (calls made, the last returncode, result, output)."""
    for n in range(1, limit + 1):
        rc, res, out = run_module(module_args)
        if rc != 0 or res.get("done"):
            return n, rc, res, out
    return limit, rc, res, out


def test_a_hub_that_fails_for_good_ends_the_loop_of_short_calls_after_its_retries(built, hub, tmp_path):
    """Each call lasts wait_budget (0.3 s), shorter than one backoff delay, so one call alone never uses up the
    retries; the streak of failed requests is carried from call to call and ends the loop, whatever the time."""
    dest = tmp_path / "model"
    control(hub, "faults", "POST", [{"match": f"*/{FILE}", "action": "status", "status": 503, "times": None}])
    n, rc, res, out = calls_until_the_end(args(hub, dest, connections=1, retries=2, wait_budget=0.3))
    assert rc == 1 and "503" in res["msg"] and "the next run resumes" in res["msg"], (n, out)
    assert not (dest / ".llmops-partial" / "streak.json").exists()  # the next run's retries are its own
    control(hub, "faults", "DELETE")
    n, rc, res, out = calls_until_the_end(args(hub, dest, connections=1, retries=2, wait_budget=0.3), limit=400)
    assert rc == 0 and res["done"] and sha256(dest / FILE) == expected_sha(built), (n, out)


def test_a_seed_share_that_stopped_ends_the_receivers_loop_of_short_calls_after_peer_down(hub, tmp_path):
    """A receiver's calls (wait_budget 0.3 s) are each shorter than peer_down (1 s): the time since the seed's share
    last answered is carried from call to call, so the loop ends naming the seed instead of asking until
    model_download_max_hours. Slower calls only make it end in fewer of them (the carried record itself:
    tests/security/test_model_share_receivers.py)."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there: refused, as after the seed's share stopped
    dest = tmp_path / "model"
    module_args = args(hub, dest, peer_url=f"http://127.0.0.1:{port}", segment_mib=0, peer_down=1, wait_budget=0.3)
    n, rc, res, out = calls_until_the_end(module_args)
    assert rc == 1 and f"127.0.0.1:{port}" in res["msg"] and "has not answered" in res["msg"], (n, out)


def test_a_peer_that_never_gets_the_file_fails_after_peer_wait(hub, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    srv = peer_server(empty)
    try:
        rc, res, out = run_module(
            args(hub, tmp_path / "model", peer_url=f"http://127.0.0.1:{srv.server_port}", segment_mib=0, peer_wait=2)
        )
    finally:
        srv.shutdown()
    assert rc == 1 and "the peer has not had" in res["msg"] and "(peer_wait)" in res["msg"], out
    assert "Traceback" not in out and not (tmp_path / "model" / ".llmops-snapshot.json").exists()


def test_a_seed_whose_download_fails_stops_its_receivers_at_once_not_after_peer_wait(hub, tmp_path):
    """The seed's share is up (the role starts it before the download), the seed's download fails (the hub refuses
    the file), and a receiver then asks for that file: it fails at once with the seed's reason (410), although its
    peer_wait and peer_down are an hour: it never waits for a file that will not come."""
    seed = tmp_path / "seed"
    seed.mkdir()
    share = start_share(seed, tmp_path / "run")
    try:
        control(hub, "faults", "POST", [{"match": f"*/{FILE}", "action": "status", "status": 403, "times": 100}])
        rc, res, out = run_module(args(hub, seed))
        assert rc == 1 and "download of" in res["msg"] and "failed" in res["msg"], out
        record = json.loads((seed / ".llmops-partial" / "failed.json").read_text())
        assert record["commit"] == res["commit"]
        control(hub, "faults", "DELETE")
        receiver = tmp_path / "model"
        rc, res, out = run_module(
            args(
                hub,
                receiver,
                peer_url=share.url,
                peer_token_file=share.token_file,
                segment_mib=0,
                peer_wait=3600,
                peer_down=3600,
            ),
            timeout=120,  # a hang guard: the assertion is on the answer, not on the time
        )
    finally:
        stop_share(share)
    assert (
        rc == 1
        and "answered HTTP 410" in res["msg"]
        and "the seed host's download of this commit failed" in (res["msg"])
    ), out
    assert not (receiver / ".llmops-partial" / "failed.json").exists()  # a receiver is nobody's seed
    assert "Traceback" not in out


def test_a_seed_that_downloads_again_forgets_its_earlier_failure(built, hub, tmp_path):
    seed = tmp_path / "seed"
    control(hub, "faults", "POST", [{"match": f"*/{FILE}", "action": "status", "status": 403, "times": 100}])
    assert run_module(args(hub, seed))[0] == 1
    assert (seed / ".llmops-partial" / "failed.json").exists()
    control(hub, "faults", "DELETE")
    rc, res, out = run_module(args(hub, seed))
    assert rc == 0 and res["done"], out
    assert not (seed / ".llmops-partial").exists() and sha256(seed / FILE) == expected_sha(built)


def test_a_copy_from_the_seed_killed_mid_file_resumes_there_with_a_byte_range(built, hub, tmp_path):
    """A host copying from the seed is killed inside a file (one segment: peers fetch whole files); the next run
    asks the seed's share for the rest of the file only (206), and verifies the whole file."""
    seed = tmp_path / "seed"
    rc, res, out = run_module(args(hub, seed))
    assert rc == 0 and res["done"], out
    dest = tmp_path / "model"
    pace(hub, 1 * MIB)
    kill_when(
        args(hub, dest, segment_mib=0, connections=1),
        lambda: (segment_state(dest, FILE) or [[0, 0, 0]])[0][2] > 0,
        "bytes of the file on disk",
    )
    kept = segment_state(dest, FILE)[0][2]
    assert 0 < kept < SIZE and not (dest / FILE).exists()
    pace(hub, 0)
    share = start_share(seed, tmp_path / "share")
    since = time.time()
    try:
        rc, res, out = run_module(
            args(hub, dest, peer_url=share.url, peer_token_file=share.token_file, segment_mib=0, connections=1)
        )
    finally:
        stop_share(share)
    assert rc == 0 and res["done"], out
    assert res["resumed"] == [{"path": FILE, "from": kept}] and res["downloaded"] == [FILE]
    assert res["bytes_fetched"] == SIZE - kept  # the rest of the file, from the seed
    assert [r for r in control(hub, "requests") if r["time"] >= since and "/api/" not in r["path"] and r["bytes"]] == []
    assert sha256(dest / FILE) == expected_sha(built)
    assert (dest / ".llmops-snapshot.json").exists()


def test_killed_at_random_points_never_refetches_a_finished_segment(built, hub, tmp_path):
    """Three kills at random points of the transfer (seeded), then a full run: a segment recorded as finished before a
    kill is never fetched again by a later run, and the file is verified only once whole. A point is an amount of
    bytes on disk, not a moment: how fast this machine is decides nothing."""
    rng = random.Random(17)
    dest = tmp_path / "model"
    pace(hub, 768 * 1024)  # 2 connections: about 1.5 MiB/s, slow enough that the kill lands inside the transfer
    fetched_after = []  # (range starts fetched by a run, segments finished before it)
    for _ in range(3):
        finished = set(finished_segments(dest, FILE))
        point = on_disk(dest) + rng.randint(MIB // 4, 2 * MIB)  # and one more finished segment: never all 12 MiB

        def reached(point=point, finished=finished):
            return on_disk(dest) >= point and len(finished_segments(dest, FILE)) > len(finished)

        since = time.time()
        kill_when(args(hub, dest, connections=2), reached, f"{point} bytes on disk and a newly finished segment")
        fetched_after.append(({s for s, _, _ in file_gets(hub, since)}, finished))
        assert not (dest / ".llmops-snapshot.json").exists()
    pace(hub, 0)
    finished = set(finished_segments(dest, FILE))
    since = time.time()
    rc, res, out = run_module(args(hub, dest, connections=2))
    assert rc == 0 and res["done"], out
    fetched_after.append(({s for s, _, _ in file_gets(hub, since)}, finished))
    for starts, done_before in fetched_after:
        assert not starts & {i * MIB for i in done_before}, (sorted(starts), sorted(done_before))
    assert sum(len(d) for _, d in fetched_after) > 0  # the kills did leave finished segments behind
    assert sha256(dest / FILE) == expected_sha(built)


def test_slices_end_between_answers_so_the_hub_sends_every_byte_once(built, hub, tmp_path):
    """wait_budget slices (how the role shows progress): each range is sized to the time left, so a slice never cuts
    an answer and the source sends each byte once."""
    dest = tmp_path / "model"
    pace(hub, 1 * MIB)
    since = time.time()
    results = []
    for _ in range(200):  # bounded (a hang guard): about 6 slices are needed, more only on a starved machine
        rc, res, out = run_module(args(hub, dest, wait_budget=1))
        assert rc == 0, out
        results.append(res)
        if res["done"]:
            break
    assert results[-1]["done"] and len(results) >= 3
    assert sum(b for _, _, b in file_gets(hub, since)) == SIZE
    assert sha256(dest / FILE) == expected_sha(built)
