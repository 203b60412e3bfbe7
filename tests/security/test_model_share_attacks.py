"""Attacks on the model fan-out share (roles/model/files/model_share.py) from the same network, on loopback: each
case is named after what it proves. The share runs as the role runs it (a process; its secret and allow-list in a
0600 config file, tests/share_util.py)."""

import http.client
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from events import GUARD, wait_until
from share_util import SHARE, mark_verified, start_share, stop_share, write_private

COMMIT = "c" * 40
OLD_COMMIT = "0" * 40
DATA = os.urandom(1 << 20)


def ask(port, path, token=None, headers=None, method="GET"):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=GUARD)
    h = dict(headers or {})
    if token is not None:
        h["Authorization"] = "Bearer " + token
    conn.request(method, path, headers=h)
    r = conn.getresponse()
    out = r.status, dict(r.getheaders()), r.read()
    conn.close()
    return out


@pytest.fixture
def seed(tmp_path):
    d = tmp_path / "seed"
    d.mkdir()
    (d / "model.safetensors").write_bytes(DATA)
    mark_verified(d, COMMIT, ["model.safetensors"])
    return d


@pytest.fixture
def share(seed, tmp_path):
    proc = start_share(seed, tmp_path / "run")
    yield proc
    stop_share(proc)


FILE = f"/{COMMIT}/model.safetensors"


# ---- authentication --------------------------------------------------------------------------------------------
def test_anonymous_request_gets_401_and_no_file_bytes(share):
    status, headers, body = ask(share.port, FILE)
    assert status == 401 and body == b"" and headers["Content-Length"] == "0"


def test_wrong_token_gets_401_and_no_file_bytes(share):
    status, _, body = ask(share.port, FILE, token="x" * len(share.token))
    assert status == 401 and body == b""


def test_token_prefix_gets_401(share):
    status, _, body = ask(share.port, FILE, token=share.token[:-1])
    assert status == 401 and body == b""


def test_token_with_extra_characters_gets_401(share):
    status, _, body = ask(share.port, FILE, token=share.token + "x")
    assert status == 401 and body == b""


def test_basic_auth_instead_of_bearer_gets_401(share):
    status, _, body = ask(share.port, FILE, headers={"Authorization": "Basic " + share.token})
    assert status == 401 and body == b""


def test_anonymous_head_request_gets_401(share):
    status, _, _ = ask(share.port, FILE, method="HEAD")
    assert status == 401


def test_the_right_token_gets_the_file(share):
    status, _, body = ask(share.port, FILE, token=share.token)
    assert status == 200 and body == DATA


# ---- peer allow-list -------------------------------------------------------------------------------------------
def test_address_outside_the_fleet_gets_403_even_with_the_token(seed, tmp_path):
    proc = start_share(seed, tmp_path / "run", allow=("10.213.0.77",))
    try:
        status, headers, body = ask(proc.port, FILE, token=proc.token)
    finally:
        stop_share(proc)
    assert status == 403 and body == b""
    assert "model_fleet_peer_addresses" in headers["X-Error-Message"]


# ---- refuses to start insecurely -------------------------------------------------------------------------------
def refusal(tmp_path, config, address="127.0.0.1", env_extra=None):
    env = {k: v for k, v in os.environ.items() if k not in ("LLMOPS_SHARE_CONFIG", "CREDENTIALS_DIRECTORY")}
    if config is not None:
        env["LLMOPS_SHARE_CONFIG"] = str(write_private(tmp_path / "share.json", json.dumps(config)))
    env.update(env_extra or {})
    r = subprocess.run(  # noqa: PLW1510 (the exit status is asserted)
        [sys.executable, str(SHARE), str(tmp_path), address, "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=GUARD,
    )
    return r


@pytest.mark.parametrize(
    "config",
    [
        None,
        {"token": "", "allow": ["127.0.0.1"]},
        {"token": "short", "allow": ["127.0.0.1"]},
        {"token": "s" * 32, "allow": []},
        {"token": "s" * 32},
        {"token": "s" * 32, "allow": ["127.0.0.1"], "max_connections": 0},
        {"token": "s" * 32, "allow": ["127.0.0.1"], "timeout": "never"},
    ],
    ids=["no-config", "empty-token", "short-token", "empty-allow-list", "no-allow-list", "zero-connections", "timeout"],
)
def test_share_without_a_secret_or_allow_list_refuses_to_start(tmp_path, config):
    r = refusal(tmp_path, config)
    assert r.returncode != 0 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr
    assert "s" * 32 not in r.stderr


@pytest.mark.parametrize("address", ["0.0.0.0", "::", ""])
def test_share_on_every_interface_refuses_to_start(tmp_path, address):
    r = refusal(tmp_path, {"token": "s" * 32, "allow": ["127.0.0.1"]}, address=address)
    assert r.returncode != 0 and "every interface" in r.stderr and "Traceback" not in r.stderr


def test_unreadable_config_refusal_does_not_print_its_content(tmp_path):
    (tmp_path / "share.json").write_text("SECRET-NOT-JSON")
    env = {**os.environ, "LLMOPS_SHARE_CONFIG": str(tmp_path / "share.json")}
    r = subprocess.run(  # noqa: PLW1510 (the exit status is asserted)
        [sys.executable, str(SHARE), str(tmp_path), "127.0.0.1", "0"],
        capture_output=True,
        text=True,
        env=env,
        timeout=GUARD,
    )
    assert r.returncode != 0 and "SECRET" not in r.stderr and "Traceback" not in r.stderr


def test_the_secret_is_not_in_the_share_processs_argv_or_environment(share):
    cmdline = Path(f"/proc/{share.pid}/cmdline").read_bytes()
    environ = Path(f"/proc/{share.pid}/environ").read_bytes()
    assert share.token.encode() not in cmdline and share.token.encode() not in environ
    assert oct(os.stat(share.config).st_mode & 0o777) == "0o600"


def test_the_secret_is_not_in_the_share_log(seed, tmp_path):
    proc = start_share(seed, tmp_path / "run")
    try:
        ask(proc.port, FILE, token=proc.token)
        ask(proc.port, FILE, token="wrong-token-wrong-token")
    finally:
        proc.terminate()
        proc.wait(GUARD)
    log = proc.stderr.read()
    stop_share(proc)
    assert '" 200 ' in log and '" 401 ' in log  # the log was written, one line per request
    assert proc.token not in log and "wrong-token" not in log


# ---- symlinks out of the snapshot ------------------------------------------------------------------------------
@pytest.fixture
def shadow(tmp_path):
    secret = tmp_path / "etc" / "shadow"
    secret.parent.mkdir()
    secret.write_text("root:$6$planted-hash:19000:0:99999:7:::\n")
    return secret


def test_planted_symlink_to_a_shadow_file_gets_403_and_no_bytes(seed, share, shadow):
    (seed / "tokenizer.json").symlink_to(shadow)
    mark_verified(seed, COMMIT, ["model.safetensors", "tokenizer.json"])  # even when listed as verified
    status, _, body = ask(share.port, f"/{COMMIT}/tokenizer.json", token=share.token)
    assert status == 403 and b"planted-hash" not in body


def test_planted_symlinked_directory_out_of_the_snapshot_gets_403(seed, share, shadow):
    (seed / "sub").symlink_to(shadow.parent, target_is_directory=True)
    status, _, body = ask(share.port, f"/{COMMIT}/sub/shadow", token=share.token)
    assert status == 403 and b"planted-hash" not in body


@pytest.mark.parametrize("path", ["../etc/shadow", "%2e%2e/etc/shadow", "sub/../../etc/shadow", "/etc/shadow"])
def test_dot_dot_paths_out_of_the_snapshot_get_no_bytes(share, shadow, path):
    status, _, body = ask(share.port, f"/{COMMIT}/{path}", token=share.token)
    assert status in (403, 404) and b"planted-hash" not in body


def test_symlink_inside_the_snapshot_is_served(seed, share):
    (seed / "alias.safetensors").symlink_to("model.safetensors")
    mark_verified(seed, COMMIT, ["model.safetensors", "alias.safetensors"])
    status, _, body = ask(share.port, f"/{COMMIT}/alias.safetensors", token=share.token)
    assert status == 200 and body == DATA


# ---- Range -----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value",
    [
        "bytes=5-3",
        f"bytes={len(DATA)}-",
        "bytes=-500",
        "bytes=abc-",
        "bytes=0-1,5-6",
        "items=0-1",
        "bytes=99999999999999999999999999-",
        "bytes= 0-1",
        "",
    ],
    ids=["reversed", "past-end", "suffix", "letters", "multi", "unit", "huge", "space", "empty"],
)
def test_bad_range_gets_416_with_content_range_and_the_connection_stays_up(share, value):
    conn = http.client.HTTPConnection("127.0.0.1", share.port, timeout=GUARD)
    auth = {"Authorization": "Bearer " + share.token}
    conn.request("GET", FILE, headers={**auth, "Range": value})
    r = conn.getresponse()
    assert r.status == 416 and r.getheader("Content-Range") == f"bytes */{len(DATA)}" and r.read() == b""
    conn.request("GET", FILE, headers=auth)  # same connection: not dropped
    r = conn.getresponse()
    assert r.status == 200 and r.read() == DATA
    conn.close()


# ---- revision ----------------------------------------------------------------------------------------------------
def test_file_of_the_old_revision_is_not_served_under_the_new_commit(seed, share):
    # the seed is updating to COMMIT; the file on disk is still the old revision's (it is not in the new record)
    (seed / "old.safetensors").write_bytes(b"old revision bytes")
    status, _, body = ask(share.port, f"/{COMMIT}/old.safetensors", token=share.token)
    assert status == 404 and body == b""


def test_file_replaced_after_it_was_verified_is_not_served(seed, share):
    (seed / "model.safetensors").write_bytes(b"replaced in place by another revision")
    status, _, body = ask(share.port, FILE, token=share.token)
    assert status == 404 and b"replaced" not in body


def test_commit_the_share_does_not_hold_gets_404(share):
    status, _, body = ask(share.port, f"/{OLD_COMMIT}/model.safetensors", token=share.token)
    assert status == 404 and body == b""


def test_marker_of_the_old_commit_does_not_serve_the_new_commit(seed, share):
    (seed / ".llmops-partial" / "verified.json").unlink()
    marker = {"commit": OLD_COMMIT, "files": {"model.safetensors": {"size": len(DATA)}}}
    (seed / ".llmops-snapshot.json").write_text(json.dumps(marker))
    assert ask(share.port, FILE, token=share.token)[0] == 404
    assert ask(share.port, f"/{OLD_COMMIT}/model.safetensors", token=share.token)[0] == 200


@pytest.mark.parametrize("path", [f"/{COMMIT}/.llmops-snapshot.json", f"/{COMMIT}/.llmops-partial/verified.json"])
def test_the_shares_own_records_are_not_served(share, path):
    assert ask(share.port, path, token=share.token)[0] == 404


# ---- connections and timeouts ----------------------------------------------------------------------------------
def test_idle_connections_beyond_the_cap_get_503_not_a_thread(seed, tmp_path):
    proc = start_share(seed, tmp_path / "run", max_connections=2)
    idle = []
    try:
        idle = [socket.create_connection(("127.0.0.1", proc.port), timeout=GUARD) for _ in range(2)]
        extra = socket.create_connection(("127.0.0.1", proc.port), timeout=GUARD)
        answer = extra.recv(200)  # the share answers without a request: every handler is taken
        extra.close()
        assert answer.startswith(b"HTTP/1.1 503")
        for s in idle:
            s.close()
        idle = []
        # the handlers end on EOF: a new connection is served again
        wait_until(lambda: ask(proc.port, FILE, token=proc.token)[0] == 200, "a handler slot freed by EOF")
    finally:
        for s in idle:
            s.close()
        stop_share(proc)


def test_connection_that_never_sends_its_headers_is_closed_after_the_timeout(seed, tmp_path):
    proc = start_share(seed, tmp_path / "run", timeout=1)
    try:
        s = socket.create_connection(("127.0.0.1", proc.port), timeout=GUARD)
        s.sendall(b"GET / HTTP/1.1\r\n")  # and never the rest
        assert s.recv(100) == b""  # closed by the share (GUARD is only the test's hang guard)
        s.close()
    finally:
        stop_share(proc)


def test_share_exits_by_itself_when_nobody_asks_after_an_interrupted_run(seed, tmp_path):
    proc = start_share(seed, tmp_path / "run", idle_exit=1)
    assert proc.wait(GUARD) == 0
    assert "no request for 1 s" in proc.stderr.read()
    stop_share(proc)


def test_anonymous_requests_do_not_keep_the_share_of_an_interrupted_run_up(seed, tmp_path):
    proc = start_share(seed, tmp_path / "run", idle_exit=1)

    def knock():
        if proc.poll() is not None:
            return True
        try:
            assert ask(proc.port, FILE)[0] == 401
        except OSError:
            pass  # the share exited between the check and the request
        return False

    wait_until(knock, "the share's exit while anonymous requests keep coming")
    assert proc.wait(GUARD) == 0 and "no request for 1 s" in proc.stderr.read()
    stop_share(proc)


def test_the_role_default_handler_timeout_and_cap_are_bounded():
    import importlib.util

    spec = importlib.util.spec_from_file_location("model_share", SHARE)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    assert 0 < mod.TIMEOUT <= 60 and 0 < mod.MAX_CONNECTIONS <= 64 and 0 < mod.IDLE_EXIT <= 3600
