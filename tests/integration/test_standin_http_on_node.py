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

pytestmark = pytest.mark.node

# Straight to the node: never through a proxy from the environment.
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def get(url: str, timeout: float = 2.0) -> tuple[int | None, bytes]:
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
    # a 2 s pause between uvicorn start and the warm-up request (fault knob), so the 503 phase is observable
    node.configure(env={"SGLANG_SIM_FAULT": "delay@http_up seconds=2"})
    t0 = time.time()
    node.run(f"systemctl start {UNIT}")
    seen: list[tuple[float, int | None]] = []
    deadline = t0 + 60
    while time.time() < deadline:
        code, _ = get(base + "/health")
        if not seen or seen[-1][1] != code:
            seen.append((round(time.time() - t0, 2), code))
        if code == 200:
            break
        time.sleep(0.1)
    codes = [c for _, c in seen]
    assert codes[-1] == 200, f"/health never answered 200 within 60 s: {seen}\n{node.sh(f'tail -30 {LOG}')}"
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
