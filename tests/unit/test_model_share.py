"""The seed host's share server (roles/model/files/model_share.py), run as the role runs it: a process on a port, its
secret in a 0600 config file (tests/share_util.py). The attacks on it are in tests/security/test_model_share_*.py."""

import http.client
import json
import os
import time

import pytest
from share_util import mark_verified, start_share, stop_share

COMMIT = "a" * 40


def get(conn, path, headers=None, token=None):
    h = dict(headers or {})
    if token:
        h["Authorization"] = "Bearer " + token
    conn.request("GET", path, headers=h)
    r = conn.getresponse()
    return r.status, dict(r.getheaders()), r.read()


@pytest.fixture
def seed_dir(tmp_path):
    d = tmp_path / "seed"
    (d / "sub").mkdir(parents=True)
    (d / ".llmops-partial").mkdir()
    (d / "sub" / "model.safetensors").write_bytes(os.urandom(3 << 20))
    (d / ".llmops-partial" / "model-2.safetensors.incomplete").write_bytes(b"not verified")
    (d / "config.json").write_text(json.dumps({"model_type": "llama"}))
    mark_verified(d, COMMIT, ["sub/model.safetensors", "config.json"])
    return d


def test_the_share_serves_whole_files_and_byte_ranges_over_one_connection(seed_dir, tmp_path):
    data = (seed_dir / "sub" / "model.safetensors").read_bytes()
    proc = start_share(seed_dir, tmp_path / "run")
    try:
        conn = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=10)
        path, t = f"/{COMMIT}/sub/model.safetensors", proc.token
        status, headers, body = get(conn, path, token=t)
        assert status == 200 and body == data and headers["Accept-Ranges"] == "bytes"
        status, headers, body = get(conn, path, {"Range": "bytes=1048576-2097151"}, token=t)
        assert status == 206 and body == data[1 << 20 : 2 << 20]
        assert headers["Content-Range"] == f"bytes 1048576-2097151/{len(data)}"
        status, headers, body = get(conn, path, {"Range": f"bytes={len(data) - 10}-"}, token=t)
        assert status == 206 and body == data[-10:]
        status, headers, _ = get(conn, path, {"Range": f"bytes={len(data)}-"}, token=t)
        assert status == 416 and headers["Content-Range"] == f"bytes */{len(data)}"
        conn.close()
    finally:
        stop_share(proc)


def test_the_share_answers_404_for_listings_unverified_and_missing_files(seed_dir, tmp_path):
    proc = start_share(seed_dir, tmp_path / "run")
    try:
        for path in (
            "/",
            f"/{COMMIT}/",
            f"/{COMMIT}/sub/",
            f"/{COMMIT}/sub",
            f"/{COMMIT}/.llmops-partial/model-2.safetensors.incomplete",
            f"/{COMMIT}/.llmops-partial/verified.json",
            f"/{COMMIT}/.llmops-partial/",
            f"/{COMMIT}/missing.bin",
            f"/{COMMIT}/../etc/passwd",
            "/sub/model.safetensors",  # no commit in the path
        ):
            conn = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=10)
            status, _, body = get(conn, path, token=proc.token)
            assert status == 404 and b"model-2" not in body and b"model.safetensors" not in body, path
            conn.close()
    finally:
        stop_share(proc)


def test_the_share_starts_and_serves_without_any_name_lookup(seed_dir, tmp_path):
    """`python3 -m http.server` resolves its bind address's name at start (10 s and more where the name server does
    not answer); the share must not look up any name (its allow-list of IP literals included)."""
    code = (
        "import runpy, socket, sys\n"
        "def _no_dns(*a):\n"
        "    raise AssertionError('name lookup at start: %r' % (a,))\n"
        "socket.getfqdn = socket.gethostbyaddr = socket.gethostbyname = socket.getaddrinfo = _no_dns\n"
        "sys.argv = sys.argv[1:]\n"
        "runpy.run_path(sys.argv[0], run_name='__main__')\n"
    )
    proc = start_share(seed_dir, tmp_path / "run", argv_prefix=("-c", code))
    try:
        conn = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=10)
        status, _, body = get(conn, f"/{COMMIT}/config.json", token=proc.token)
        assert status == 200 and json.loads(body) == {"model_type": "llama"}
        conn.close()
    finally:
        proc.terminate()
        proc.wait(10)
    assert "name lookup" not in proc.stderr.read()
    proc.stdout.close()
    proc.stderr.close()


def _fail_record(seed_dir, commit, failed_at):
    (seed_dir / ".llmops-partial" / "failed.json").write_text(json.dumps({"commit": commit, "failed_at": failed_at}))


@pytest.mark.parametrize(
    "row",
    [
        ("this run's failure of this commit", COMMIT, 0, 410),
        ("a failure recorded before this share started (an earlier run)", COMMIT, -3600, 404),
        ("a failure of another commit", "b" * 40, 0, 404),
    ],
)
def test_a_file_not_yet_verified_answers_410_only_after_this_runs_seed_failed(seed_dir, tmp_path, row):
    case, commit, offset, want = row
    proc = start_share(seed_dir, tmp_path / "run")
    try:
        _fail_record(seed_dir, commit, time.time() + offset)  # written after the share started (offset 0)
        conn = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=10)
        status, headers, body = get(conn, f"/{COMMIT}/missing.bin", token=proc.token)
        assert status == want and body == b"", case
        if want == 410:
            assert "download of this commit failed" in headers["X-Error-Message"]
        # a verified file is still served: what the seed verified before it failed is right
        status, _, body = get(conn, f"/{COMMIT}/config.json", token=proc.token)
        assert status == 200 and json.loads(body) == {"model_type": "llama"}, case
        conn.close()
    finally:
        stop_share(proc)
