"""The keys a server starts with never come back in its answers: SGLang's /server_info (and /get_server_info) answers
every server argument, the API key and the admin key included (0.5.9 http_server.py server_info:
``dataclasses.asdict(server_args)``; 0.5.23 ``resolved_dict()`` and ``launch_command``), so a caller with the API key
read the admin key there. The launcher (roles/server/files/sglang-launch) adds an ASGI middleware to SGLang's HTTP
app that masks both keys in every answer body. Run here as the unit runs it: the real launcher over the stand-in,
both keys from the environment, nothing on the command line."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import pytest
from events import wait_until
from real_router import running_router

READY = "The server is fired up and ready to roll!"
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
API = "Ak3" + "k" * 37  # keys as the controller generates them (40 letters and digits)
ADMIN = "Dm3" + "m" * 37


def call(port: int, path: str, key: str | None = None, method: str = "GET") -> tuple[int, bytes, dict]:
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers, method=method)
    try:
        with OPENER.open(req, timeout=10) as r:
            return r.status, r.read(), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, e.read(), dict(e.headers)


@pytest.fixture
def keyed(launch, models):
    env = {"SGLANG_API_KEY": API, "SGLANG_ADMIN_API_KEY": ADMIN, "LLMOPS_ADMIN_API_KEY_FLAG": "--admin-api-key"}
    s = launch(["--model-path", str(models["llama3-8b"])], profile="h100-80gb-x8.json", env=env, launcher=True)
    assert s.wait_for(READY), s.log
    return s


@pytest.mark.parametrize("path", ["/server_info", "/get_server_info"])
def test_the_api_key_does_not_read_the_admin_key_from_the_servers_arguments(keyed, path):
    code, body, headers = call(keyed.port, path, key=API)
    assert code == 200, body[:300]
    info = json.loads(body)
    assert info["api_key"] == "*" * len(API) and info["admin_api_key"] == "*" * len(ADMIN), info
    assert API.encode() not in body and ADMIN.encode() not in body
    assert int(headers["content-length"]) == len(body)  # the mask keeps the length the server announced
    assert info["max_total_num_tokens"] > 0  # the rest of the answer is the server's own


def test_the_keys_still_decide_who_may_call(keyed):
    # the mask changes answers, not the server's checks: each key still opens exactly its routes
    assert call(keyed.port, "/server_info")[0] == 401
    assert call(keyed.port, "/server_info", key=ADMIN)[0] == 401  # normal routes take the API key only (0.5.9)
    assert call(keyed.port, "/flush_cache", key=API, method="POST")[0] == 401
    assert call(keyed.port, "/flush_cache", key=ADMIN, method="POST")[0] == 200
    assert API not in keyed.log and ADMIN not in keyed.log


def test_an_unkeyed_server_answers_unmasked_and_the_launcher_adds_nothing(launch, models):
    s = launch(["--model-path", str(models["llama3-8b"])], profile="h100-80gb-x8.json", launcher=True)
    assert s.wait_for(READY), s.log
    code, body, _ = call(s.port, "/server_info")
    assert code == 200 and json.loads(body)["api_key"] is None


def test_the_router_answers_no_replica_key_to_its_clients_or_to_anyone(keyed, tmp_path):
    # The real sglang-router (tests/real_router.py) with this replica added as the role adds it
    # (POST /workers with the replica's own API key): its /get_server_info and /get_model_info, anonymous and with the
    # clients' key, carry neither of the replica's keys.
    client, control = "Cl3" + "c" * 37, "Ct3" + "t" * 37
    with running_router(tmp_path / "router", client, control) as router:
        port = router["port"]

        def answers(path, key=None, method="GET"):
            try:
                return call(port, path, key=key, method=method)
            except OSError:
                return None, b"", {}

        req = urllib.request.Request(
            f"http://127.0.0.1:{port}/workers", method="POST",
            data=json.dumps({"url": f"http://127.0.0.1:{keyed.port}", "api_key": API}).encode(),
            headers={"Authorization": f"Bearer {control}", "Content-Type": "application/json"},
        )  # fmt: skip
        with OPENER.open(req, timeout=10) as r:
            assert r.status == 202

        def healthy():
            workers = json.loads(answers("/workers", key=control)[1] or b"{}").get("workers", [])
            return any(w.get("is_healthy") for w in workers)

        wait_until(healthy, "the replica to be a healthy worker of the router")
        seen = {}
        for path in ("/get_server_info", "/get_model_info", "/server_info", "/model_info", "/v1/models"):
            for key in (None, client):
                code, body, _ = answers(path, key=key)
                seen[(path, bool(key))] = code
                assert API.encode() not in body and ADMIN.encode() not in body, (path, key, body[:300])
        assert seen[("/get_server_info", False)] == 200  # answered, and to anyone: what it answers is the point
        assert json.loads(answers("/get_server_info")[1]).keys() == {"router_manager", "routers_count", "workers_count"}
