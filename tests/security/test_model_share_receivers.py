"""The receivers of the model fan-out (hf_snapshot's peer source: hf_transfer.Transfer with hf_http.Fetcher): each
case is named after the failure it proves is handled. Time comes from the values the receiver is given (an injected
short peer_down), never from sleeping for the real window."""

import http.server
import os
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from events import GUARD
from share_util import mark_verified, start_share, stop_share

from ansible_collections.llmops.sglang.plugins.module_utils.hf_http import Fetcher
from ansible_collections.llmops.sglang.plugins.module_utils.hf_hub import HubError
from ansible_collections.llmops.sglang.plugins.module_utils.hf_local import (
    check_inputs,
    load_streak,
    read_peer_token,
    save_streak,
)
from ansible_collections.llmops.sglang.plugins.module_utils.hf_snapshot_run import argument_spec
from ansible_collections.llmops.sglang.plugins.module_utils.hf_transfer import FileJob, Transfer

COMMIT = "d" * 40
DATA = os.urandom(256 << 10)


def closed_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there any more: connections are refused, as after the seed's share stopped
    return port


def transfer_from(url, tmp_path, *, token=None, peer_down=0.2, timeout=5, **carried):
    job = FileJob(
        "model.safetensors", url, {"size": len(DATA), "digest": "0" * 64, "kind": "sha256"}, str(tmp_path / "part"), 0
    )
    netloc = url.split("://", 1)[1].split("/", 1)[0]
    t = Transfer(
        [job],
        connections=1,
        retries=100,  # the retry count must not be what ends the wait: the window does
        fetcher_factory=lambda: Fetcher(
            "https://hub.invalid", "hf_hub_secret", timeout, peer=(netloc, token) if token else None
        ),
        split=False,
        wait_missing=GUARD,
        peer_down=peer_down,
        **carried,
    )
    return t.run(lambda job: None)


def test_seed_whose_share_stopped_fails_the_receiver_within_peer_down_naming_the_seed(tmp_path):
    port = closed_port()
    with pytest.raises(HubError) as err:
        transfer_from(f"http://127.0.0.1:{port}/{COMMIT}/model.safetensors", tmp_path)
    msg = str(err.value)
    assert f"127.0.0.1:{port}" in msg and "has not answered" in msg and "\n" not in msg


def test_a_streak_carried_from_the_previous_call_ends_the_wait_at_the_first_refusal(tmp_path):
    """The role calls the module again every wait_budget seconds; the time the seed has not answered is carried
    from call to call, so a call that starts after peer_down seconds of refusals fails at its first one."""
    port = closed_port()
    with pytest.raises(HubError) as err:
        transfer_from(
            f"http://127.0.0.1:{port}/{COMMIT}/model.safetensors",
            tmp_path,
            peer_down=GUARD,
            peer_failing_since=time.time() - GUARD,
        )
    assert "has not answered for" in str(err.value)


def test_the_streak_survives_between_the_calls_of_a_loop_and_not_a_failed_one(tmp_path):
    (tmp_path / ".llmops-partial").mkdir()
    assert load_streak(tmp_path)["failing_since"] is None and load_streak(tmp_path)["errors"] == 0
    since = time.time() - 20
    call = SimpleNamespace(last_progress=since - 5, peer_failing_since=since, errors=4)
    save_streak(tmp_path, call, failed=False)
    assert load_streak(tmp_path) == {"last_progress": since - 5, "failing_since": since, "errors": 4}
    save_streak(tmp_path, call, failed=True)  # the loop ended: the next run's retries are its own
    assert load_streak(tmp_path)["errors"] == 0 and load_streak(tmp_path)["failing_since"] is None
    (tmp_path / ".llmops-partial" / "streak.json").write_text('{"errors": "x", "saved_at": "y"}')
    assert load_streak(tmp_path)["errors"] == 0  # unreadable: a fresh streak, never a traceback


class _Record(http.server.BaseHTTPRequestHandler):
    seen = None

    def log_message(self, *a):
        pass

    def do_GET(self):
        self.seen.append(self.headers.get("Authorization"))
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()


def recorder():
    seen = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), type("R", (_Record,), {"seen": seen}))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, seen


def test_seed_answering_5xx_fails_the_receiver_within_peer_down(tmp_path):
    srv, seen = recorder()
    try:
        with pytest.raises(HubError) as err:
            transfer_from(f"http://127.0.0.1:{srv.server_port}/{COMMIT}/f", tmp_path, token="peer-secret-1234567")
    finally:
        srv.shutdown()
        srv.server_close()
    assert "has not answered" in str(err.value) and seen


def test_the_hub_token_never_goes_to_the_seed_and_the_share_secret_goes_only_there(tmp_path):
    srv, seen = recorder()
    try:
        with pytest.raises(HubError):
            transfer_from(f"http://127.0.0.1:{srv.server_port}/{COMMIT}/f", tmp_path, token="peer-secret-1234567")
    finally:
        srv.shutdown()
        srv.server_close()
    assert set(seen) == {"Bearer peer-secret-1234567"}  # never "Bearer hf_hub_secret"


def test_receiver_with_a_wrong_secret_fails_at_once_with_401_naming_the_seed(tmp_path):
    seed = tmp_path / "seed"
    seed.mkdir()
    (seed / "model.safetensors").write_bytes(DATA)
    mark_verified(seed, COMMIT, ["model.safetensors"])
    share = start_share(seed, tmp_path / "run")
    try:
        with pytest.raises(HubError) as err:
            transfer_from(
                f"{share.url}/{COMMIT}/model.safetensors", tmp_path, token="wrong-secret-1234567", peer_down=GUARD
            )
    finally:
        stop_share(share)
    assert err.value.status == 401 and f"127.0.0.1:{share.port}" in str(err.value) and "share secret" in str(err.value)


def test_the_module_defaults_make_a_receiver_fail_within_a_minute_of_its_seed():
    """Worst case after the seed's last answer: peer_down seconds of errors, plus one request that started just
    before the window closed and waits its whole timeout (connect or read)."""
    spec = argument_spec()
    assert spec["peer_down"]["default"] + spec["peer_timeout"]["default"] <= 60


def test_the_model_role_passes_bounded_peer_timeouts():
    tasks = yaml.safe_load((Path(__file__).resolve().parents[2] / "roles/model/tasks/main.yml").read_text())
    download = next(t for t in tasks if "block" in t and any("llmops.sglang.hf_snapshot" in s for s in t["block"]))
    args = next(s for s in download["block"] if "llmops.sglang.hf_snapshot" in s)["llmops.sglang.hf_snapshot"]
    defaults = yaml.safe_load((Path(__file__).resolve().parents[2] / "roles/model/defaults/main.yml").read_text())
    down = defaults[args["peer_down"].strip("{} ")]
    timeout = defaults[args["peer_timeout"].strip("{} ")]
    assert down + timeout <= 60
    assert "peer_token_file" in args
    # the wait for a file still coming is the role's own, documented bound, not the module's default
    assert args["peer_wait"].strip("{} ") == "model_fleet_peer_wait" and defaults["model_fleet_peer_wait"] > 0


@pytest.mark.parametrize(
    ("name", "value"), [("peer_timeout", 0), ("peer_timeout", 100000), ("peer_down", -1), ("peer_down", float("inf"))]
)
def test_unbounded_peer_timeouts_are_refused_in_one_line(tmp_path, name, value):
    params = {k: v.get("default") for k, v in argument_spec().items()}
    params.update(repo_id="org/model", dest=str(tmp_path / "m"), endpoint="http://127.0.0.1:1", **{name: value})
    problem = check_inputs(params)
    assert problem and problem.startswith(name) and "\n" not in problem


@pytest.mark.parametrize(
    "content", ["", "\n", "two words\n", "line\x1b[31m\n"], ids=["empty", "blank", "space", "ansi"]
)
def test_bad_peer_token_file_is_refused_without_showing_it(tmp_path, content):
    f = tmp_path / "token"
    f.write_text(content)
    err = read_peer_token(str(f))
    assert isinstance(err, ValueError) and (content.strip() == "" or content.strip() not in str(err))


def test_missing_peer_token_file_is_an_error_not_a_traceback(tmp_path):
    assert isinstance(read_peer_token(str(tmp_path / "absent")), OSError)
