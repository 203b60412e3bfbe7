"""The real sglang-router on this host's loopback, for tests without nodes.

The pinned release's own wheel (roles/router/defaults router_version; tests/sim/real_releases.py takes it from the
shared cache or fetches it with pip), unpacked and started with a client key and an admin key as the role's launcher
starts it (sglang_router.router.Router.from_args on the parser's RouterArgs; the launcher's other imports -
setproctitle, the Python mini load balancer - are not needed). Stopped by its PID at the end."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import zipfile
from pathlib import Path

import yaml
from events import wait_until

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "sim"))
from real_releases import wheel  # noqa: E402

VERSION = yaml.safe_load((ROOT / "roles" / "router" / "defaults" / "main.yml").read_text())["router_version"]
START = """
import argparse, sys
from sglang_router.router_args import RouterArgs
from sglang_router.router import Router
p = argparse.ArgumentParser()
RouterArgs.add_cli_args(p, use_router_prefix=False)
args = RouterArgs.from_cli_args(p.parse_args(sys.argv[1:]))
args._validate_router_args()
Router.from_args(args).start()
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def status(url: str):
    """The HTTP status of a GET of ``url`` (no proxy), or None when nothing answers."""
    try:
        with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(url, timeout=5) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return None


@contextlib.contextmanager
def running_router(where: Path, client_key: str, admin_key: str):
    """{'port', 'metrics', 'log'}: the real router in ``where``, keyed, answering (GET /workers 401 without a key)."""
    with zipfile.ZipFile(wheel(VERSION, package="sglang-router")) as z:
        z.extractall(where)
    (where / "start_router.py").write_text(START)
    port, metrics = free_port(), free_port()
    argv = [
        sys.executable, str(where / "start_router.py"), "--host", "127.0.0.1", "--port", str(port),
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics),
        "--api-key", client_key, "--control-plane-api-keys", f"t:llmops-test:admin:{admin_key}",
    ]  # fmt: skip
    log_path = where / "router.log"
    log = log_path.open("w")
    proc = subprocess.Popen(
        argv, cwd=where, env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(where)}, stdout=log,
        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/workers"
        wait_until(lambda: proc.poll() is not None or status(url), "the real sglang-router to answer on loopback")
        assert proc.poll() is None, log_path.read_text()[-2000:]
        assert status(url) == 401  # a key is asked
        yield {"port": port, "metrics": metrics, "log": log_path}
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=60)
        log.close()
