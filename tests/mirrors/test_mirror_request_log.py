"""The mirror's request log (/_sim/requests) as tests read it: an entry is in before its answer's last byte, a DELETE is
a boundary no earlier request can cross, and ?settle waits (on the server's own state) for answers cut short.

The answers are slowed by the mirror's "slow" fault so that, with the old order (entry written after the answer),
these tests fail every time rather than now and then; with the current order their outcome depends on no timing.
"""

import json
import socket
import urllib.parse

import pytest
from _mirror_util import control, http

BODY = b"0123"


@pytest.fixture
def small_file(built, server):
    """A 4-byte file under the mirror's www (the session's private mirror), its path, and no fault left behind."""
    www = built["out"] / "www" / "_request_log"
    www.mkdir(exist_ok=True)
    (www / "four.txt").write_bytes(BODY)
    control(server, "faults", "DELETE")
    yield "/_request_log/four.txt"
    control(server, "faults", "DELETE")


def slow(server, path, bytes_per_sec):
    control(server, "faults", "POST", {"match": path, "action": "slow", "bytes_per_sec": bytes_per_sec})


def entries(server, path, query=""):
    return [r for r in control(server, "requests" + query) if r["path"] == path]


def test_an_answer_is_in_the_log_before_its_last_byte(server, small_file):
    # 1 byte/s: the server sleeps a second after each byte it sends; an entry written after the answer would be
    # missing when the client, holding all 4 bytes, asks for the log.
    slow(server, small_file, 1)
    control(server, "requests", "DELETE")
    status, _, body = http(server["base"] + small_file)
    assert (status, body) == (200, BODY)
    log = entries(server, small_file)
    assert [(r["method"], r["status"], r["bytes"]) for r in log] == [("GET", 200, 4)]
    control(server, "faults", "DELETE")
    for method, path, want in (("HEAD", small_file, 200), ("GET", small_file + ".missing", 404)):
        control(server, "requests", "DELETE")
        assert http(server["base"] + path, method)[0] == want
        assert [(r["method"], r["status"]) for r in entries(server, path)] == [(method, want)]


def test_a_request_begun_before_the_log_was_cleared_never_appears_after_it(server, small_file):
    """The flake of issue 24: a previous test's answer, still being sent, landed in the next test's fresh log."""
    slow(server, small_file, 4)  # one byte every 0.25 s
    host, port = urllib.parse.urlsplit(server["base"]).netloc.split(":")
    with socket.create_connection((host, int(port)), timeout=30) as s:
        s.sendall(f"GET {small_file} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
        f = s.makefile("rb")
        while f.readline() not in (b"\r\n", b""):  # the headers: the request has begun on the server
            pass
        control(server, "requests", "DELETE")  # as the next test does first
        assert f.read() == BODY  # the answer completes after the clear
    assert entries(server, small_file, "?settle=") == []
    # ... while the --log file keeps every request
    lines = [json.loads(line) for line in server["log"].read_text().splitlines()]
    assert [r["bytes"] for r in lines if r["path"] == small_file][-1] == len(BODY)


def test_settle_waits_until_an_answer_cut_short_by_its_client_is_logged(server, small_file):
    slow(server, small_file, 2)  # one byte every 0.5 s: the client is gone long before the answer could end
    control(server, "requests", "DELETE")
    host, port = urllib.parse.urlsplit(server["base"]).netloc.split(":")
    s = socket.create_connection((host, int(port)), timeout=30)
    s.sendall(f"GET {small_file} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    f = s.makefile("rb")
    while f.readline() not in (b"\r\n", b""):
        pass
    assert f.read(1) == BODY[:1]
    f.close()
    s.close()  # a killed download: the server finds out on its next write
    log = entries(server, small_file, "?settle=127.0.0.1")
    assert len(log) == 1 and log[0]["status"] == 200 and 1 <= log[0]["bytes"] < len(BODY), log
