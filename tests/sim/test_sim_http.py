"""HTTP API of the stand-in (SGLang 0.5.1+ semantics)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

from events import wait_until

READY = "The server is fired up and ready to roll!"
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def call(port: int, path: str, body: dict | None = None, key: str | None = None) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, headers=headers)
    try:
        with OPENER.open(req, timeout=10) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_http_api(launch, models, tmp_path):
    hold = tmp_path / "hold-warmup"
    hold.touch()  # the server waits before its warm-up until the test has seen /health answer 503
    env = {
        "SGLANG_SIM_FAULT": f"hold@http_up file={hold}",
        # a proxy that would break the warm-up if it were used for 127.0.0.1
        "http_proxy": "http://127.0.0.1:9",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "no_proxy": "",
    }
    s = launch(
        [
            "--model-path",
            str(models["llama3-8b"]),
            "--api-key",
            "sk-test",
            "--enable-metrics",
            "--served-model-name",
            "llama-3-8b",
            "--mem-fraction-static",
            "0.85",
        ],
        profile="h100-80gb-x8.json",
        env=env,
    )
    assert s.wait_for("Uvicorn running on")
    assert call(s.port, "/health")[0] == 503  # starting: warm-up not done
    hold.unlink()
    assert s.wait_for(READY), s.log
    assert call(s.port, "/health")[0] == 200
    assert call(s.port, "/health_generate")[0] == 200

    # API key: 401 without, 200 with; /health* and /metrics are exempt
    assert call(s.port, "/v1/models") == (401, b'{"error": "Unauthorized"}')
    code, body = call(s.port, "/v1/models", key="sk-test")
    assert code == 200
    models_list = json.loads(body)
    assert models_list["object"] == "list"
    assert models_list["data"][0]["id"] == "llama-3-8b" and models_list["data"][0]["max_model_len"] == 8192

    code, body = call(s.port, "/server_info", key="sk-test")
    info = json.loads(body)
    assert code == 200
    assert info["mem_fraction_static"] == 0.85 and info["tp_size"] == 1
    assert info["max_total_num_tokens"] == 424670
    assert info["version"] == "0.5.9.dev0"
    assert info["internal_states"][0]["memory_usage"]["token_capacity"] == 424670
    assert json.loads(call(s.port, "/get_server_info", key="sk-test")[1])["max_total_num_tokens"] == 424670

    code, body = call(s.port, "/model_info", key="sk-test")
    assert code == 200 and json.loads(body)["architectures"] == ["LlamaForCausalLM"]
    assert call(s.port, "/get_model_info", key="sk-test")[0] == 200

    code, body = call(s.port, "/metrics")
    text = body.decode()
    assert code == 200
    assert 'sglang:max_total_num_tokens{engine_type="unified",model_name="llama-3-8b"' in text
    assert "sglang:is_cuda_graph{" in text and "} 1.0" in text

    req = {"text": "Hello there", "sampling_params": {"max_new_tokens": 5}}
    assert call(s.port, "/generate", req)[0] == 401
    code, body = call(s.port, "/generate", req, key="sk-test")
    gen1 = json.loads(body)
    gen2 = json.loads(call(s.port, "/generate", req, key="sk-test")[1])
    assert code == 200 and gen1["text"] == gen2["text"] and len(gen1["text"].split()) == 5
    assert gen1["meta_info"]["completion_tokens"] == 5

    chat = {"model": "llama-3-8b", "messages": [{"role": "user", "content": "Say hi"}], "max_tokens": 4}
    code, body = call(s.port, "/v1/chat/completions", chat, key="sk-test")
    resp = json.loads(body)
    assert code == 200 and resp["object"] == "chat.completion"
    assert resp["choices"][0]["message"]["role"] == "assistant"
    assert resp["choices"][0]["finish_reason"] == "length"
    assert resp["usage"]["completion_tokens"] == 4
    assert call(s.port, "/nope", key="sk-test")[0] == 404
    assert '"GET /health HTTP/1.1" 503 Service Unavailable' in s.log


def test_metrics_off_and_health_when_schedulers_hang(launch, models):
    s = launch(
        ["--model-path", str(models["llama3-8b"]), "--tp", "2"],
        profile="h100-80gb-x8.json",
        env={"SGLANG_SIM_FAULT": "hang@ready", "SGLANG_HEALTH_CHECK_TIMEOUT": "0.5"},
    )
    assert s.wait_for(READY)
    assert call(s.port, "/metrics")[0] == 404
    # the schedulers stop answering right after the ready line: /health turns 503 once they do (each unanswered
    # check takes the 0.5 s health timeout)
    wait_until(lambda: call(s.port, "/health")[0] == 503, "/health to answer 503 once the schedulers hang")
    assert "Health check failed. Server couldn't get a response from detokenizer for last 0.5 seconds." in s.log


def test_load_endpoints_count_requests_in_flight(launch, models, tmp_path):
    """/get_load (what SGLang's router polls) and /v1/loads (what a drain waits on) count unanswered requests."""
    import threading

    hold = tmp_path / "hold-requests"
    s = launch(
        ["--model-path", str(models["llama3-8b"]), "--served-model-name", "llama-3-8b"],
        profile="h100-80gb-x8.json",
        env={"SGLANG_SIM_REQUEST_HOLD": str(hold)},  # requests wait while the file exists
    )
    assert s.wait_for(READY), s.log
    idle = json.loads(call(s.port, "/v1/loads")[1])
    assert idle["aggregate"]["total_reqs"] == 0 and idle["dp_rank_count"] == 1
    assert json.loads(call(s.port, "/get_load")[1])[0]["num_reqs"] == 0

    req = {"text": "a prompt of seven tokens here", "sampling_params": {"max_new_tokens": 3}}
    hold.touch()
    threads = [threading.Thread(target=call, args=(s.port, "/generate", req)) for _ in range(3)]
    for t in threads:
        t.start()
    try:
        busy = wait_until(
            lambda: (b := json.loads(call(s.port, "/v1/loads")[1]))["aggregate"]["total_reqs"] == 3 and b,
            "3 requests in flight",
        )
        load = json.loads(call(s.port, "/get_load")[1])[0]
    finally:
        hold.unlink()
        for t in threads:
            t.join()
    assert busy["aggregate"]["total_reqs"] == 3, busy
    assert busy["loads"][0]["num_running_reqs"] + busy["loads"][0]["num_waiting_reqs"] == 3
    assert load["num_reqs"] == 3 and load["num_tokens"] == 3 * 7, load
    assert json.loads(call(s.port, "/v1/loads")[1])["aggregate"]["total_reqs"] == 0
    assert "Endpoint '/get_load' is deprecated" in s.log
