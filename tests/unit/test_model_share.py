"""The seed host's share server (roles/model/files/model_share.py), run as the role runs it: a process on a port."""

import http.client
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SHARE = Path(__file__).resolve().parents[2] / "roles" / "model" / "files" / "model_share.py"


def start(directory, *, no_dns=False):
    """The share on 127.0.0.1, any free port; with no_dns every name lookup raises in the server process."""
    if no_dns:
        code = (
            "import runpy, socket, sys\n"
            "def _no_dns(*a):\n"
            "    raise AssertionError('name lookup at start: %r' % (a,))\n"
            "socket.getfqdn = socket.gethostbyaddr = socket.gethostbyname = _no_dns\n"
            "sys.argv = sys.argv[1:]\n"
            "runpy.run_path(sys.argv[0], run_name='__main__')\n"
        )
        argv = [sys.executable, "-c", code, str(SHARE), str(directory), "127.0.0.1", "0"]
    else:
        argv = [sys.executable, str(SHARE), str(directory), "127.0.0.1", "0"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if " port " not in line:
        proc.kill()
        _, err = proc.communicate(timeout=10)
        raise AssertionError(f"the share did not start: {line!r} {err[-2000:]}")
    proc.port = int(line.split(" port ")[1])
    return proc


def stop(proc):
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def get(conn, path, headers=None):
    conn.request("GET", path, headers=headers or {})
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
    return d


def test_the_share_serves_whole_files_and_byte_ranges_over_one_connection(seed_dir):
    data = (seed_dir / "sub" / "model.safetensors").read_bytes()
    proc = start(seed_dir)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=10)
        status, headers, body = get(conn, "/sub/model.safetensors")
        assert status == 200 and body == data and headers["Accept-Ranges"] == "bytes"
        status, headers, body = get(conn, "/sub/model.safetensors", {"Range": "bytes=1048576-2097151"})
        assert status == 206 and body == data[1 << 20 : 2 << 20]
        assert headers["Content-Range"] == f"bytes 1048576-2097151/{len(data)}"
        status, headers, body = get(conn, "/sub/model.safetensors", {"Range": f"bytes={len(data) - 10}-"})
        assert status == 206 and body == data[-10:]
        status, headers, _ = get(conn, "/sub/model.safetensors", {"Range": f"bytes={len(data)}-"})
        assert status == 416 and headers["Content-Range"] == f"bytes */{len(data)}"
        conn.close()
    finally:
        stop(proc)


def test_the_share_answers_404_for_listings_unverified_and_missing_files(seed_dir):
    proc = start(seed_dir)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=10)
        for path in (
            "/",
            "/sub/",
            "/sub",
            "/.llmops-partial/model-2.safetensors.incomplete",
            "/.llmops-partial/",
            "/missing.bin",
            "/../etc/passwd",
        ):
            status, _, body = get(conn, path)
            assert status == 404 and b"model-2" not in body and b"model.safetensors" not in body, path
            conn.close()  # an error answer closes the connection
    finally:
        stop(proc)


def test_the_share_starts_and_serves_without_any_name_lookup(seed_dir):
    """`python3 -m http.server` resolves its bind address's name at start (10 s and more where the name server does
    not answer); the share must not look up any name."""
    proc = start(seed_dir, no_dns=True)
    try:
        conn = http.client.HTTPConnection("127.0.0.1", proc.port, timeout=10)
        status, _, body = get(conn, "/config.json")
        assert status == 200 and json.loads(body) == {"model_type": "llama"}
        conn.close()
    finally:
        stop(proc)
    assert "name lookup" not in proc.stderr.read()
