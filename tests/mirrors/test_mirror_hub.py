"""The Hugging Face hub stand-in, driven by the real huggingface_hub client in a subprocess."""

import hashlib
import json
import subprocess
import sys
import time
import urllib.parse
from http.client import HTTPConnection
from pathlib import Path

import pytest
from _mirror_util import clean_env, control, http

REPO = "sim-org/GLM-5-NVFP4"
GATED = "sim-org/Meta-Llama-3-8B-Instruct"
BIG = "sim-org/big-shard"
BIG_FILE = "model.safetensors"
DROP_AT = 11_000_000  # after huggingface_hub has written its first 10 MiB chunk

SCRIPT = """
import json, sys
from huggingface_hub import snapshot_download
kw = json.loads(sys.argv[1])
try:
    path = snapshot_download(**kw)
    print(json.dumps({"ok": path}))
except Exception as e:
    print(json.dumps({"error": type(e).__name__, "message": str(e)[:500]}))
"""


def download(endpoint, tmp_path, **kw):
    env = clean_env(
        HF_ENDPOINT=endpoint,
        HF_HUB_DISABLE_XET="1",
        HF_HOME=str(tmp_path / "hf-home"),
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
    )
    kw.setdefault("revision", "main")
    kw.setdefault("local_dir", str(tmp_path / "model"))
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT, json.dumps(kw)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def repo_meta(built, repo_id):
    return json.loads((built["out"] / "hub" / repo_id / "repo.json").read_text())


def assert_files_match(built, repo_id, local_dir, ref="main"):
    meta = repo_meta(built, repo_id)
    files = meta["commits"][meta["refs"][ref]]["files"]
    assert files
    for f in files:
        data = (local_dir / f["path"]).read_bytes()
        assert len(data) == f["size"]
        if "lfs" in f:
            assert hashlib.sha256(data).hexdigest() == f["lfs"]["oid"]
        else:
            assert hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest() == f["oid"]


def requests(server, **match):
    return [r for r in control(server, "requests") if all(r.get(k) == v for k, v in match.items())]


@pytest.mark.parametrize("endpoint", ["hf", "hf_root"])
def test_snapshot_download_gets_every_file(built, server, tmp_path, endpoint):
    control(server, "requests", "DELETE")
    result = download(server[endpoint], tmp_path, repo_id=REPO)
    assert "ok" in result, result
    assert_files_match(built, REPO, tmp_path / "model")
    assert len(repo_meta(built, REPO)["commits"][repo_meta(built, REPO)["refs"]["main"]]["files"]) > 3
    trees = [r for r in control(server, "requests") if "/tree/" in r["path"]]
    assert len(trees) >= 3 and any("cursor=" in r["query"] for r in trees)  # paginated via Link: rel="next"


def test_older_revision_by_tag(built, server, tmp_path):
    result = download(server["hf"], tmp_path, repo_id=REPO, revision="v1.0")
    assert "ok" in result, result
    assert_files_match(built, REPO, tmp_path / "model", ref="v1.0")
    readme = tmp_path / "model" / "README.md"
    assert not readme.exists() or "Revision 2" not in readme.read_text()


def test_resolve_headers_and_range(built, server):
    meta = repo_meta(built, REPO)
    sha = meta["refs"]["main"]
    entry = next(f for f in meta["commits"][sha]["files"] if f["path"].endswith(".safetensors"))
    url = f"{server['hf']}/{REPO}/resolve/main/{entry['path']}"
    # An LFS file: 302 to the storage host (another origin) with the object's metadata on the redirect itself.
    u = urllib.parse.urlsplit(url)
    conn = HTTPConnection(u.netloc, timeout=10)
    conn.request("HEAD", u.path)
    resp = conn.getresponse()
    headers = dict(resp.headers)
    conn.close()
    assert resp.status == 302
    assert headers["X-Repo-Commit"] == sha
    assert headers["X-Linked-Etag"] == f'"{entry["lfs"]["oid"]}"' and headers["X-Linked-Size"] == str(entry["size"])
    assert headers["ETag"] == f'"{entry["oid"]}"'  # the pointer's git oid, as on the real hub
    location = urllib.parse.urlsplit(headers["Location"])
    assert location.netloc != u.netloc and location.netloc == urllib.parse.urlsplit(server["cdn"]).netloc
    status, headers, _ = http(url, "HEAD")  # urllib follows the redirect: the storage host's answer
    assert status == 200 and headers["ETag"] == f'"{entry["lfs"]["oid"]}"'
    assert headers["Content-Length"] == str(entry["size"]) and headers["Accept-Ranges"] == "bytes"
    assert "X-Xet-Hash" not in headers
    status, headers, body = http(url, headers={"Range": "bytes=100-"})
    assert status == 206 and headers["Content-Range"] == f"bytes 100-{entry['size'] - 1}/{entry['size']}"
    assert len(body) == entry["size"] - 100
    status, headers, _ = http(f"{server['hf']}/{REPO}/resolve/main/config.json", "HEAD")
    cfg = next(f for f in meta["commits"][sha]["files"] if f["path"] == "config.json")
    assert headers["ETag"] == f'"{cfg["oid"]}"'


def test_dropped_connection_is_resumed_with_range(built, server, tmp_path):
    control(server, "requests", "DELETE")
    control(server, "faults", "POST", {"match": f"*/{BIG_FILE}", "action": "drop", "at_offset": DROP_AT, "times": 1})
    try:
        result = download(server["hf"], tmp_path, repo_id=BIG)
    finally:
        control(server, "faults", "DELETE")
    assert "ok" in result, result
    assert_files_match(built, BIG, tmp_path / "model")
    gets = [r for r in requests(server, method="GET") if r["path"].endswith(BIG_FILE)]
    assert gets[0]["range"] is None and gets[0]["bytes"] == DROP_AT and gets[0]["fault"]["action"] == "drop"
    resumed_at = int(gets[1]["range"].removeprefix("bytes=").rstrip("-"))
    assert 0 < resumed_at <= DROP_AT and gets[1]["status"] == 206
    assert gets[1]["bytes"] == 12 * 1024 * 1024 - resumed_at


def test_download_that_keeps_failing_errors_then_a_new_call_succeeds(built, server, tmp_path):
    control(server, "requests", "DELETE")
    control(server, "faults", "POST", {"match": f"*/{BIG_FILE}", "action": "drop", "at_offset": DROP_AT})
    try:
        first = download(server["hf"], tmp_path, repo_id=BIG)
    finally:
        control(server, "faults", "DELETE")
    assert "error" in first, first
    tries = [r for r in requests(server, method="GET") if r["path"].endswith(BIG_FILE)]
    assert len(tries) > 2 and all(r["range"] and r["status"] == 206 for r in tries[1:])
    control(server, "requests", "DELETE")
    second = download(server["hf"], tmp_path, repo_id=BIG)
    assert "ok" in second, second
    assert_files_match(built, BIG, tmp_path / "model")
    # huggingface_hub 2.x keeps no partial file between calls: the new call fetches the file from byte 0.
    again = [r for r in requests(server, method="GET") if r["path"].endswith(BIG_FILE)]
    assert [r["range"] for r in again] == [None]


def test_gated_repo_needs_a_token(built, server, tmp_path):
    denied = download(server["hf"], tmp_path, repo_id=GATED)
    assert denied["error"] == "GatedRepoError", denied
    status, headers, _ = http(f"{server['hf']}/{GATED}/resolve/main/config.json", "HEAD")
    assert status == 401 and headers["X-Error-Code"] == "GatedRepo"
    # listed openly, as on the real hub; a known token whose account did not accept the terms gets 403
    status, _, body = http(f"{server['hf']}/api/models/{GATED}/tree/main?recursive=true")
    assert status == 200 and json.loads(body)
    no_access = {"Authorization": "Bearer hf_no_access_token"}
    status, headers, _ = http(f"{server['hf']}/{GATED}/resolve/main/config.json", "HEAD", headers=no_access)
    assert status == 403 and headers["X-Error-Code"] == "GatedRepo"
    assert download(server["hf"], tmp_path, repo_id=GATED, token="hf_no_access_token")["error"] == "GatedRepoError"
    wrong = download(server["hf"], tmp_path, repo_id=GATED, token="hf_wrong")
    assert "error" in wrong
    ok = download(server["hf"], tmp_path, repo_id=GATED, token="hf_test_token")
    assert "ok" in ok, ok
    assert_files_match(built, GATED, tmp_path / "model")


def test_status_and_slow_faults(server):
    path = "/nvidia/compute/cuda/repos/debian12/x86_64/Packages"
    control(
        server,
        "faults",
        "POST",
        [
            {"match": path, "action": "status", "status": 503, "times": 2},
            {"match": path, "action": "slow", "bytes_per_sec": 40000, "times": 1},
        ],
    )
    control(server, "requests", "DELETE")
    try:
        assert http(server["base"] + path)[0] == 503
        assert http(server["base"] + path)[0] == 503
        t0 = time.monotonic()
        status, _, body = http(server["base"] + path)
        elapsed = time.monotonic() - t0
        assert http(server["base"] + path)[0] == 200
    finally:
        control(server, "faults", "DELETE")
    # the throttle is real (a lower bound: a loaded machine is only slower) ...
    assert status == 200 and elapsed >= len(body) / 40000 * 0.8
    # ... and "times" counts: which answer each rule touched is in the log, not guessed from how fast it came
    log = [(r["status"], r["fault"]) for r in control(server, "requests") if r["path"] == path]
    assert log == [
        (503, {"action": "status", "match": path}),
        (503, {"action": "status", "match": path}),
        (200, {"slow": 40000}),
        (200, None),
    ]


def test_a_fault_for_one_client_spares_the_others_and_the_log_names_the_client(server):
    # make test runs molecule beside the node tests, both on the one mirror server: a test's fault names its node.
    path = "/nvidia/compute/cuda/repos/debian12/x86_64/Packages"
    control(server, "requests", "DELETE")
    control(server, "faults", "POST", [{"match": path, "action": "status", "status": 503, "client": "127.0.0.2"}])
    try:
        assert http(server["base"] + path)[0] == 200  # this test's requests come from 127.0.0.1
        control(server, "faults", "POST", [{"match": path, "action": "status", "status": 503, "client": "127.0.0.1"}])
        assert http(server["base"] + path)[0] == 503
    finally:
        control(server, "faults", "DELETE")
    log = [r for r in control(server, "requests") if r["path"] == path]
    assert [(r["client"], r["status"]) for r in log] == [("127.0.0.1", 200), ("127.0.0.1", 503)]


def test_hf_download_cli_gets_every_file_through_the_storage_redirect(built, server, tmp_path):
    control(server, "requests", "DELETE")
    env = clean_env(
        HF_ENDPOINT=server["hf_root"],
        HF_HUB_DISABLE_XET="1",
        HF_HOME=str(tmp_path / "hf-home"),
        HF_HUB_DISABLE_TELEMETRY="1",
    )
    hf = Path(sys.executable).parent / "hf"
    proc = subprocess.run(
        [str(hf), "download", BIG, "--local-dir", str(tmp_path / "model"), "--format", "quiet"],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert_files_match(built, BIG, tmp_path / "model")
    log = control(server, "requests")
    cdn = [r for r in log if r["listener"] == "cdn" and r["path"].endswith("/" + BIG_FILE)]
    assert cdn and not any(r["authorization"] for r in cdn)  # the storage host never sees the token header
    assert any(r["method"] == "HEAD" and r["status"] == 302 for r in log if r["path"].endswith("/" + BIG_FILE))


def test_the_hub_paces_each_connection(server):
    meta_url = f"{server['hf_root']}/{BIG}/resolve/main/{BIG_FILE}"
    status, _, _ = http(f"{server['control']}hub", "POST", json.dumps({"rate": 1 << 20, "latency": 0.2}).encode())
    assert status == 200
    try:
        t0 = time.monotonic()
        status, _, body = http(meta_url, headers={"Range": "bytes=0-2097151"})
        elapsed = time.monotonic() - t0
    finally:
        http(f"{server['control']}hub", "POST", json.dumps({"rate": 0, "latency": 0}).encode())
    assert status == 206 and len(body) == 2 << 20
    assert elapsed >= 0.2 * 2 + 2 * 0.9  # two answers (302, then the range) each 0.2 s late, 2 MiB at 1 MiB/s
