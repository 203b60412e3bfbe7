"""On a simulated node: the stand-in as a systemd unit, its HTTP API read from the controller.

/health answers 503 while the server warms up and 200 once it is ready; /v1/models and /server_info report the
served model and the calibrated KV pool (RTX PRO 6000 x 8, GLM-5-like NVFP4, TP 8, --mem-fraction-static 0.88).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request

import pytest
from _node_util import LOG, MODEL, PORT, UNIT, record
from events import wait_until

pytestmark = pytest.mark.node

# Straight to the node: never through a proxy from the environment.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
HOLD = "/run/it-hold-warmup"


def get(url: str, timeout: float = 30.0) -> tuple[int | None, bytes]:
    try:
        with OPENER.open(url, timeout=timeout) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()
    except OSError:
        return None, b""  # not listening yet


def test_health_503_then_200_and_server_info(case_node):
    node = case_node
    base = f"http://{node.ip}:{PORT}"
    # the server waits between uvicorn's start and its warm-up while the hold file exists (fault knob): the test lets
    # it go once it has seen the 503, so the 503 phase is observed whatever the machine's load
    node.run(f"touch {HOLD}")
    node.configure(env={"SGLANG_SIM_FAULT": f"hold@http_up file={HOLD}"})
    t0 = time.time()
    node.run(f"systemctl start {UNIT}")
    seen: list[tuple[float, int | None]] = []

    def health(until):
        code, _ = get(base + "/health")
        if not seen or seen[-1][1] != code:
            seen.append((round(time.time() - t0, 2), code))
        return code == until

    try:
        wait_until(lambda: health(503), lambda: f"/health to answer 503 while the warm-up is held: {seen}")
    finally:
        node.run(f"rm -f {HOLD}")
    wait_until(
        lambda: health(200), lambda: f"/health to answer 200 after the warm-up: {seen}\n{node.sh(f'tail -30 {LOG}')}"
    )
    codes = [c for _, c in seen]
    assert 503 in codes, f"/health never answered 503 before 200: {seen}"
    assert codes.index(503) < codes.index(200)
    assert set(codes) <= {None, 503, 200}, seen
    # once 200, it stays 200
    assert get(base + "/health")[0] == 200

    code, body = get(base + "/v1/models")
    assert code == 200
    models = json.loads(body)
    assert [m["id"] for m in models["data"]] == [MODEL]
    assert models["data"][0]["max_model_len"] == 202752

    code, body = get(base + "/server_info")
    assert code == 200
    info = json.loads(body)
    assert info["max_total_num_tokens"] == 425664
    assert info["mem_fraction_static"] == pytest.approx(0.88)
    assert info["tp_size"] == 8
    assert info["internal_states"][0]["max_total_num_tokens"] == 425664
    first_503 = next(t for t, c in seen if c == 503)
    first_200 = next(t for t, c in seen if c == 200)
    print(f"\n/health from the controller: {seen}")
    record("stand-in /health 503->200", "ready", None, None, f"503 at {first_503:.2f} s, 200 at {first_200:.2f} s")
