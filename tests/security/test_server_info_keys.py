"""The launcher's key mask (roles/server/files/sglang-launch: MaskSecrets, guard, GuardOnImport) against what it meets
on a real server, without one:

* SGLang's own HTTP module, read from the release wheels (tests/sim/real_releases.py): a module-level FastAPI ``app``
  that takes middlewares, ``/server_info`` answering every server argument (so the API key read the admin key), and
  ``sglang.launch_server`` importing that module - the hook point the launcher relies on exists in each release.
* Starlette's own application (FastAPI's base class, its wheel fetched the same way): the mask is added with the
  real ``add_middleware`` and the answer driven through the real middleware stack keeps no key and a Content-Length
  equal to its body.
* A release without that app is refused in one line before anything serves (the real launcher over a stand-in
  package).
The stand-in's answers through the launcher: tests/sim/test_launcher_masks_keys.py."""

from __future__ import annotations

import ast
import asyncio
import json
import os
import subprocess
import sys
import types
import zipfile
from pathlib import Path

import pytest
from server_launcher import LAUNCHER, load

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "sim"))
from real_releases import wheel  # noqa: E402

STARLETTE = "1.10.0"
RELEASES = ["0.5.9", "0.5.14"]  # the stand-in's two log families (tests/sim/test_standin_lines_match_real_releases.py)
API = "Ak3" + "k" * 37
ADMIN = "Dm3" + "m" * 37


@pytest.mark.parametrize("release", RELEASES)
def test_each_release_serves_its_arguments_from_a_module_app_the_launcher_can_reach(release):
    with zipfile.ZipFile(wheel(release)) as z:
        http = ast.parse(z.read("sglang/srt/entrypoints/http_server.py"))
        launch = z.read("sglang/launch_server.py").decode()
    apps = [
        n for n in http.body
        if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "app" for t in n.targets)
        and isinstance(n.value, ast.Call) and getattr(n.value.func, "id", None) == "FastAPI"
    ]  # fmt: skip
    assert len(apps) == 1, f"{release}: expected one module-level app = FastAPI(...)"
    info = next(
        f for f in http.body
        if isinstance(f, ast.AsyncFunctionDef)
        and any(isinstance(d, ast.Call) and ast.unparse(d) == "app.get('/server_info')" for d in f.decorator_list)
    )  # fmt: skip
    body = ast.unparse(info)  # every field of ServerArgs, the keys included
    assert "dataclasses.asdict(_global_state.tokenizer_manager.server_args)" in body or (
        "server_args = _global_state.tokenizer_manager.server_args" in body
        and "dataclasses.asdict(server_args)" in body
    ), body
    assert "from sglang.srt.entrypoints.http_server import" in launch  # the import the launcher's hook waits for


@pytest.fixture(scope="module")
def starlette(tmp_path_factory):
    unpacked = tmp_path_factory.mktemp("starlette")
    with zipfile.ZipFile(wheel(STARLETTE, package="starlette")) as z:
        z.extractall(unpacked)
    sys.path.insert(0, str(unpacked))
    try:
        import starlette.applications
        import starlette.responses
        import starlette.routing

        yield types.SimpleNamespace(
            Starlette=starlette.applications.Starlette, Route=starlette.routing.Route,
            JSONResponse=starlette.responses.JSONResponse,
        )  # fmt: skip
    finally:
        sys.path.remove(str(unpacked))


def _get(app, path):
    out = {"body": b""}

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        if message["type"] == "http.response.start":
            out["status"], out["headers"] = message["status"], dict(message["headers"])
        elif message["type"] == "http.response.body":
            out["body"] += message.get("body", b"")

    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET", "scheme": "http",
        "path": path, "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": [],
        "client": ("127.0.0.1", 40000), "server": ("127.0.0.1", 30000),
    }  # fmt: skip
    asyncio.run(app(scope, receive, send))
    return out


def test_the_mask_on_starlettes_own_app_keeps_no_key_and_the_announced_length(starlette):
    def server_info(request):
        return starlette.JSONResponse({"api_key": API, "admin_api_key": ADMIN, "launch_command": f"--api-key {API}"})

    app = starlette.Starlette(routes=[starlette.Route("/server_info", server_info)])
    load().guard(types.SimpleNamespace(app=app), [API, ADMIN, ""])
    got = _get(app, "/server_info")
    assert got["status"] == 200
    assert API.encode() not in got["body"] and ADMIN.encode() not in got["body"]
    assert json.loads(got["body"]) == {
        "api_key": "*" * 40,
        "admin_api_key": "*" * 40,
        "launch_command": "--api-key " + "*" * 40,
    }
    assert int(got["headers"][b"content-length"]) == len(got["body"])


def _release_without_an_app(tmp_path):
    """A stand-in ``sglang`` on tmp_path whose HTTP module's app takes no middleware; launch_server imports it."""
    pkg = tmp_path / "sglang"
    (pkg / "srt" / "entrypoints").mkdir(parents=True)
    for d in (pkg, pkg / "srt", pkg / "srt" / "entrypoints"):
        (d / "__init__.py").write_text("")
    (pkg / "srt" / "entrypoints" / "http_server.py").write_text("app = object()\n")
    (pkg / "launch_server.py").write_text("from sglang.srt.entrypoints.http_server import app\nprint('SERVING')\n")


def _run_launcher(env):
    return subprocess.run(
        [sys.executable, str(LAUNCHER)], env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_a_release_whose_http_module_has_no_such_app_is_refused_in_one_line(tmp_path):
    _release_without_an_app(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "SGLANG_API_KEY": API}
    p = _run_launcher(env)
    assert p.returncode == 2, (p.returncode, p.stdout, p.stderr)
    lines = (p.stdout + p.stderr).splitlines()
    assert len(lines) == 1 and lines[0].startswith("sglang-launch: expected sglang.srt.entrypoints.http_server.app"), (
        lines
    )
    assert "SERVING" not in p.stdout and API not in p.stdout + p.stderr


def test_without_keys_the_launcher_leaves_the_http_module_alone(tmp_path):
    _release_without_an_app(tmp_path)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SGLANG_")}
    env["PYTHONPATH"] = str(tmp_path)
    p = _run_launcher(env)
    assert p.returncode == 0 and p.stdout == "SERVING\n", (p.returncode, p.stdout, p.stderr)
