"""HTTP server (the parent process), like SGLang 0.5.x's FastAPI/uvicorn app, on http.server.

Endpoints: /health, /health_generate, /model_info, /get_model_info, /server_info, /get_server_info, /v1/models,
/get_load and /v1/loads (the in-flight requests, as SGLang's scheduler reports them), /metrics (only with
--enable-metrics), /ping, POST /generate, /v1/chat/completions, /v1/completions.

The routes SGLang's router (sglang-router 0.3.2) calls on a worker: /health (its health checker and the
connection-mode probe), /server_info and /model_info (metadata discovery; it falls back to /get_server_info and
/get_model_info on 404), /get_load (its load monitor, summing ``num_tokens``), and the inference routes it proxies.
Shapes follow SGLang 0.5.9's http_server.py, v1_loads.py and io_struct.py (GetLoadReqOutput, GetLoadsReqOutput).

``app`` is what code outside SGLang can rely on of its module-level FastAPI app (Starlette): ``add_middleware(cls,
**options)`` until the server starts (RuntimeError after), each middleware an ASGI callable wrapping the app, the
last added outermost; every answer of the server passes through them.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import http
import json
import logging
import os
import re
import signal
import socket
import socketserver
import sys
import threading
import time
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from sglang.srt import sim_speed
from sglang.srt.entrypoints import engine
from sglang.srt.metrics.collector import TokenizerMetrics, metrics_text
from sglang.srt.sim_faults import FaultInjector, hold_while
from sglang.srt.utils.common import CHILD_PROCESSES, get_exception_traceback, kill_process_tree, sim_sleep
from sglang.version import __version__

logger = logging.getLogger(__name__)
access_logger = logging.getLogger("uvicorn.access")

WARMUP_PROMPT = "The capital city of France is"
_WORDS = (
    "the of and to in is that for it as with was on be by this are from at or an which have not but all can its "
    "model server token cache memory graph batch request latency throughput kernel tensor rank node layer"
).split()


def _uvicorn(level: str, msg: str) -> None:
    prefix = {"INFO": "INFO:     ", "WARNING": "WARNING:  ", "ERROR": "ERROR:    "}[level]
    logger.log(getattr(logging, level), prefix + msg)


def _setup_access_logger(server_args) -> None:
    access_logger.handlers.clear()
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(logging.Formatter("[%(asctime)s] %(message)s", datefmt="%Y-%m-%d %H:%M:%S"))
    access_logger.addHandler(handler)
    access_logger.propagate = False
    level = server_args.log_level_http or server_args.log_level
    access_logger.setLevel(getattr(logging, str(level).upper(), logging.INFO))


def count_tokens(text: str) -> int:
    return len(re.findall(r"\w+|[^\w\s]", text)) + 1


def generate_text(prompt: str, max_new_tokens: int) -> list[str]:
    """Deterministic "generation": the same prompt always yields the same words."""
    if prompt.rstrip().endswith(WARMUP_PROMPT):
        base = "Paris. It is the most populous city of France and its political centre".split()
    else:
        digest = hashlib.sha256(prompt.encode()).digest()
        base = [_WORDS[b % len(_WORDS)] for b in digest]
    words = []
    while len(words) < max_new_tokens:
        words.extend(base)
    return words[:max_new_tokens]


class TokenizerManager:
    """Talks to the scheduler processes (one pipe per rank); holds the server status and the metrics counters."""

    def __init__(self, server_args, model_config, conns, procs, infos):
        self.server_args = server_args
        self.model_config = model_config
        self.conns = conns
        self.procs = procs
        self.info = infos[0] or {}
        self.server_status = "Starting"
        self.gracefully_exit = False
        self.lock = threading.Lock()
        self.start_time = time.time()
        self.num_requests = 0
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.startup_time = 0.0
        self.metrics = TokenizerMetrics()
        # Requests received and not yet answered (what SGLang's scheduler counts as running + waiting) and their
        # prompt tokens: /get_load and /v1/loads report them, drain logic waits for zero.
        self.inflight_lock = threading.Lock()
        self.inflight: dict[str, int] = {}
        # The speed model's inputs (sim_speed.py), set by launch_server: the visible GPUs and the faults.
        self.system = None
        self.faults: list = []

    def _roundtrip(self, req: dict, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self.lock.acquire(timeout=-1 if timeout is None else timeout):
            return False
        try:
            for c in self.conns:
                c.send(req)
            for c in self.conns:
                left = None if deadline is None else max(0.0, deadline - time.monotonic())
                if left is not None and not c.poll(left):
                    return False
                c.recv()
            return True
        except (EOFError, OSError):
            return False
        finally:
            self.lock.release()

    def generate(self, prompt: str, max_new_tokens: int) -> dict:
        rid = uuid.uuid4().hex
        input_len = count_tokens(prompt)
        tic = time.time()
        with self.inflight_lock:
            self.inflight[rid] = input_len
        try:
            answered = self._roundtrip({"type": "generate", "rid": rid, "input_len": input_len}, None)
            if answered:
                # Decoding time of one request (real seconds, default none), so that in-flight requests are visible;
                # SGLANG_SIM_REQUEST_HOLD=PATH: every request also waits while PATH exists (a test's event)
                time.sleep(float(os.environ.get("SGLANG_SIM_REQUEST_SECONDS") or 0))
                if os.environ.get("SGLANG_SIM_REQUEST_HOLD"):
                    hold_while(os.environ["SGLANG_SIM_REQUEST_HOLD"])
        finally:
            with self.inflight_lock:
                self.inflight.pop(rid, None)
        if not answered:
            raise RuntimeError("scheduler did not answer")
        words = generate_text(prompt, max_new_tokens)
        self.num_requests += 1
        self.prompt_tokens += input_len
        self.generation_tokens += len(words)
        e2e = time.time() - tic
        self.metrics.observe_one_finished_request(input_len, len(words), e2e, e2e)
        gpus = self.system.gpus if self.system is not None else ()
        sim_timing = sim_speed.timing(input_len, gpus=gpus, tp=int(self.server_args.tp_size or 1),
                                      nvswitch=bool(self.system and self.system.nvswitch), faults=self.faults,
                                      model_path=str(self.server_args.model_path))  # fmt: skip
        return {
            "sim_timing": sim_timing,
            "rid": rid,
            "text": " " + " ".join(words) if words else "",
            "prompt_tokens": input_len,
            "completion_tokens": len(words),
            "e2e_latency": time.time() - tic,
        }

    def load(self) -> dict:
        """One scheduler's load: the scheduler holds one request at a time, the others wait for it."""
        with self.inflight_lock:
            reqs, tokens = len(self.inflight), sum(self.inflight.values())
        running = min(reqs, 1)
        return {"running": running, "waiting": reqs - running, "tokens": tokens}

    def health(self, timeout: float) -> bool:
        return self._roundtrip({"type": "health", "rid": uuid.uuid4().hex}, timeout)

    def notify_ready(self) -> None:
        for c in self.conns:
            try:
                c.send({"type": "ready"})
            except OSError:
                pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, addr, handler, family):
        self.address_family = family
        super().__init__(addr, handler, bind_and_activate=False)

    def server_bind(self):
        # skip HTTPServer's socket.getfqdn() (a reverse DNS lookup)
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), self.server_address[1]


class _App:
    """The part of Starlette's application contract the stand-in keeps (see the module's docstring)."""

    def __init__(self):
        self.user_middleware: list = []
        self.started = False

    def add_middleware(self, middleware_class, *args, **kwargs) -> None:
        if self.started:
            raise RuntimeError("Cannot add middleware after an application has started")
        self.user_middleware.insert(0, (middleware_class, args, kwargs))

    def answer(self, scope: dict, status: int, headers: list, body: bytes) -> tuple[int, list, bytes]:
        """The answer (status, headers, body) as the middlewares let it out."""
        if not self.user_middleware:
            return status, headers, body

        async def endpoint(scope, receive, send):
            await send({"type": "http.response.start", "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body, "more_body": False})

        asgi = endpoint
        for cls, args, kwargs in reversed(self.user_middleware):
            asgi = cls(asgi, *args, **kwargs)
        out: dict = {"body": []}

        async def receive():
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message):
            if message["type"] == "http.response.start":
                out["status"], out["headers"] = message["status"], list(message.get("headers", []))
            else:
                out["body"].append(bytes(message.get("body", b"")))

        asyncio.run(asgi(scope, receive, send))
        return out["status"], out["headers"], b"".join(out["body"])


app = _App()


def make_handler(tm: TokenizerManager):
    sa = tm.server_args
    mc = tm.model_config

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "uvicorn"
        sys_version = ""

        def log_message(self, format, *args):  # access log is written in _send
            return

        def _send(self, code: int, body: bytes = b"", ctype: str = "application/json") -> None:
            # The access line first, as uvicorn writes it when the response starts (h11_impl/httptools_impl
            # RequestResponseCycle.send, at "http.response.start"): a client holding the answer finds it in the log.
            host, port = self.client_address[:2]
            try:
                phrase = http.HTTPStatus(code).phrase
            except ValueError:
                phrase = ""
            access_logger.info(f'INFO:     {host}:{port} - "{self.command} {self.path} HTTP/1.1" {code} {phrase}')
            headers = [(b"content-length", str(len(body)).encode())]
            if body:
                headers.append((b"content-type", ctype.encode()))
            scope = {
                "type": "http", "method": self.command, "path": self.path.split("?", 1)[0], "scheme": "http",
                "headers": [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in self.headers.items()],
            }  # fmt: skip
            code, headers, body = app.answer(scope, code, headers, body)
            self.send_response_only(code)
            self.send_header("date", self.date_time_string())
            self.send_header("server", "uvicorn")
            for name, value in headers:
                self.send_header(name.decode("latin-1"), value.decode("latin-1"))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, code: int, obj) -> None:
            self._send(code, json.dumps(obj).encode())

        def _read_json(self):
            n = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(n) if n else b""
            try:
                return json.loads(raw or b"{}")
            except ValueError:
                return None

        def _authorized(self, method: str, path: str) -> int:
            """0 when allowed, else the status SGLang answers (decide_request_auth below)."""
            level = ADMIN_OPTIONAL if path in _ADMIN_OPTIONAL_ROUTES else NORMAL
            return decide_request_auth(
                method=method,
                path=path,
                authorization=self.headers.get("Authorization"),
                api_key=sa.api_key,
                admin_api_key=getattr(sa, "admin_api_key", None),
                level=level,
            )

        def do_GET(self):
            self._dispatch("GET")

        def do_POST(self):
            self._dispatch("POST")

        def _dispatch(self, method: str) -> None:
            path = self.path.split("?", 1)[0]
            if method == "POST" and path not in _POST_ROUTES:
                self._read_json()
            refused = self._authorized(method, path)
            if refused:
                self._json(refused, {"error": "Unauthorized" if refused == 401 else "Forbidden"})
                return
            routes = _GET_ROUTES if method == "GET" else _POST_ROUTES
            name = routes.get(path)
            if name is None:
                other = _POST_ROUTES if method == "GET" else _GET_ROUTES
                if path in other:
                    self._json(405, {"detail": "Method Not Allowed"})
                else:
                    self._json(404, {"detail": "Not Found"})
                return
            try:
                getattr(self, name)(path)
            except (BrokenPipeError, ConnectionResetError):
                pass

        # ----- admin routes (the real answers: 0.5.9 http_server.py:715-719 and :1259-1260) -----
        def flush_cache(self, path):
            if self.command == "POST":
                self._read_json()
            body = (
                "Cache flushed.\nPlease check backend logs for more details. "
                "(When there are running or waiting requests, the operation will not be performed.)\n"
            )
            self._send(200, body.encode(), "text/plain; charset=utf-8")

        def configure_logging(self, path):
            if self.command == "POST":
                self._read_json()
            self._send(200)

        # ----- GET -----
        def health(self, path):
            if tm.gracefully_exit or tm.server_status == "Starting":
                self._send(503)
                return
            if path == "/health" and os.environ.get("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true") == "false":
                self._send(200)
                return
            timeout = float(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))
            tic = time.time()
            if tm.health(timeout):
                self._send(200)
            else:
                logger.error(
                    f"Health check failed. Server couldn't get a response from detokenizer for last {timeout:g} "
                    f"seconds. tic start time: {tic:.2f}. last_heartbeat time: {tm.start_time:.2f}"
                )
                self._send(503)

        def model_info(self, path):
            if path == "/get_model_info":
                logger.warning(
                    "Endpoint '/get_model_info' is deprecated and will be removed in a future version. "
                    "Please use '/model_info' instead."
                )
            self._json(
                200,
                {
                    "model_path": sa.model_path,
                    "tokenizer_path": sa.tokenizer_path,
                    "is_generation": True,
                    "preferred_sampling_params": None,
                    "weight_version": "default",
                    "has_image_understanding": False,
                    "has_audio_understanding": False,
                    "model_type": mc.model_type,
                    "architectures": mc.architectures,
                },
            )

        def server_info(self, path):
            if path == "/get_server_info":
                logger.warning(
                    "Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
                    "Please use '/server_info' instead."
                )
            info = tm.info
            internal = {
                "memory_usage": info.get("memory_usage", {}),
                "max_total_num_tokens": info.get("max_total_num_tokens"),
                "max_running_requests": info.get("max_running_requests"),
                "avg_spec_accept_length": None,
                "last_gen_throughput": 0.0,
                "available_gpu_mem": info.get("available_gpu_mem"),
            }
            body = {
                **sa.public_dict(),
                "max_total_num_tokens": info.get("max_total_num_tokens"),
                "max_req_input_len": info.get("max_req_input_len"),
                "internal_states": [internal],
                "version": __version__,
            }
            self._json(200, body)

        def models(self, path):
            self._json(
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": sa.served_model_name,
                            "object": "model",
                            "created": int(tm.start_time),
                            "owned_by": "sglang",
                            "root": sa.served_model_name,
                            "parent": None,
                            "max_model_len": mc.context_len,
                        }
                    ],
                },
            )

        def metrics(self, path):
            if not sa.enable_metrics:
                self._json(404, {"detail": "Not Found"})
                return
            self._send(200, _metrics(tm).encode(), "text/plain; version=0.0.4; charset=utf-8")

        def get_load(self, path):
            logger.warning(
                "Endpoint '/get_load' is deprecated and will be removed in a future version. "
                "Please use '/v1/loads' instead."
            )
            load = tm.load()
            self._json(
                200,
                [
                    {
                        "rid": None,
                        "http_worker_ipc": None,
                        "dp_rank": 0,
                        "num_reqs": load["running"] + load["waiting"],
                        "num_waiting_reqs": load["waiting"],
                        "num_tokens": load["tokens"],
                        "ts_tic": time.perf_counter(),
                    }
                ],
            )

        def loads(self, path):
            load = tm.load()
            total = tm.info.get("max_total_num_tokens") or 0
            usage = round(load["tokens"] / total, 4) if total else 0.0
            entry = {
                "dp_rank": 0,
                "num_running_reqs": load["running"],
                "num_waiting_reqs": load["waiting"],
                "num_used_tokens": load["tokens"],
                "max_total_num_tokens": total,
                "token_usage": usage,
                "gen_throughput": 0.0,
                "cache_hit_rate": 0.0,
                "utilization": usage,
                "max_running_requests": tm.info.get("max_running_requests") or 0,
                "num_total_reqs": load["running"] + load["waiting"],
            }
            self._json(
                200,
                {
                    "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime()),
                    "version": __version__,
                    "dp_rank_count": 1,
                    "loads": [entry],
                    "aggregate": {
                        "total_running_reqs": entry["num_running_reqs"],
                        "total_waiting_reqs": entry["num_waiting_reqs"],
                        "total_reqs": entry["num_total_reqs"],
                        "avg_token_usage": usage,
                        "avg_throughput": 0.0,
                        "avg_utilization": usage,
                    },
                },
            )

        def ping(self, path):
            self._send(200)

        def version(self, path):
            self._json(200, {"version": __version__})

        # ----- POST -----
        def _gen_or_500(self, prompt: str, max_new_tokens: int):
            try:
                return tm.generate(prompt, max_new_tokens)
            except RuntimeError as e:
                self._json(500, {"error": {"message": str(e)}})
                return None

        def generate(self, path):
            req = self._read_json()
            if not isinstance(req, dict) or ("text" not in req and "input_ids" not in req):
                self._json(400, {"error": {"message": "Either text or input_ids should be provided."}})
                return
            text = req.get("text")
            if isinstance(text, list):
                text = text[0] if text else ""
            if text is None:
                text = " ".join(str(t) for t in req.get("input_ids") or [])
            params = req.get("sampling_params") or {}
            res = self._gen_or_500(str(text), int(params.get("max_new_tokens", 128)))
            if res is None:
                return
            self._json(
                200,
                {
                    "text": res["text"],
                    "meta_info": {
                        "id": res["rid"],
                        "finish_reason": {"type": "length", "length": res["completion_tokens"]},
                        "prompt_tokens": res["prompt_tokens"],
                        "weight_version": "default",
                        "completion_tokens": res["completion_tokens"],
                        "cached_tokens": 0,
                        "e2e_latency": round(res["e2e_latency"], 4),
                        # the stand-in's speed model (srt/sim_speed.py), read by its sglang.bench_serving
                        "sim_timing": res["sim_timing"],
                    },
                },
            )

        def chat(self, path):
            req = self._read_json()
            if not isinstance(req, dict) or not isinstance(req.get("messages"), list):
                self._json(
                    400,
                    {
                        "object": "error",
                        "message": "messages is required",
                        "type": "BadRequestError",
                        "param": None,
                        "code": 400,
                    },
                )
                return
            prompt = "\n".join(str(m.get("content", "")) for m in req["messages"] if isinstance(m, dict))
            self._completion(req, prompt, chat=True)

        def completions(self, path):
            req = self._read_json()
            if not isinstance(req, dict) or "prompt" not in req:
                self._json(
                    400,
                    {
                        "object": "error",
                        "message": "prompt is required",
                        "type": "BadRequestError",
                        "param": None,
                        "code": 400,
                    },
                )
                return
            prompt = req["prompt"][0] if isinstance(req["prompt"], list) and req["prompt"] else req["prompt"]
            self._completion(req, str(prompt), chat=False)

        def _completion(self, req: dict, prompt: str, chat: bool) -> None:
            natural = 12
            limit = req.get("max_completion_tokens") or req.get("max_tokens")
            n = natural if limit is None else min(int(limit), natural)
            finish = "length" if limit is not None and int(limit) < natural else "stop"
            res = self._gen_or_500(prompt, n)
            if res is None:
                return
            text = res["text"].strip()
            usage = {
                "prompt_tokens": res["prompt_tokens"],
                "total_tokens": res["prompt_tokens"] + res["completion_tokens"],
                "completion_tokens": res["completion_tokens"],
                "prompt_tokens_details": None,
            }
            if chat:
                choice = {
                    "index": 0,
                    "message": {"role": "assistant", "content": text, "reasoning_content": None, "tool_calls": None},
                    "logprobs": None,
                    "finish_reason": finish,
                    "matched_stop": None,
                }
                obj = "chat.completion"
            else:
                choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "matched_stop": None}
                obj = "text_completion"
            self._json(
                200,
                {
                    "id": res["rid"],
                    "object": obj,
                    "created": int(time.time()),
                    "model": req.get("model") or sa.served_model_name,
                    "choices": [choice],
                    "usage": usage,
                },
            )

    return Handler


_GET_ROUTES = {
    "/health": "health",
    "/health_generate": "health",
    "/model_info": "model_info",
    "/get_model_info": "model_info",
    "/server_info": "server_info",
    "/get_server_info": "server_info",
    "/v1/models": "models",
    "/get_load": "get_load",
    "/v1/loads": "loads",
    "/metrics": "metrics",
    "/ping": "ping",
    "/version": "version",
}
_POST_ROUTES = {
    "/generate": "generate",
    "/v1/chat/completions": "chat",
    "/v1/completions": "completions",
    "/flush_cache": "flush_cache",
    "/configure_logging": "configure_logging",
}
_GET_ROUTES.update({"/flush_cache": "flush_cache", "/configure_logging": "configure_logging"})
# Admin routes the stand-in serves, marked @auth_level(AuthLevel.ADMIN_OPTIONAL) in the real release (0.5.9
# sglang/srt/entrypoints/http_server.py:710-711 /flush_cache, :1255-1256 /configure_logging; both GET and POST).
_ADMIN_OPTIONAL_ROUTES = frozenset({"/flush_cache", "/configure_logging"})
NORMAL, ADMIN_OPTIONAL, ADMIN_FORCE = "normal", "admin_optional", "admin_force"


def decide_request_auth(*, method, path, authorization, api_key, admin_api_key, level) -> int:
    """0 when SGLang lets the request through, else its status: the rules of the real release's decide_request_auth
    (0.5.8 ... 0.5.23 sglang/srt/utils/auth.py:74; tests/security/test_replica_admin_routes.py compares the two on
    every combination). Health and metrics paths are always open; an admin route takes the admin key when one is set,
    else the API key; every other route takes the API key when one is set (the admin key does not open it)."""
    if method == "OPTIONS" or path.startswith("/health") or path.startswith("/metrics"):
        return 0

    def bearer(expected):
        parts = (authorization or "").split(" ", 1)
        return len(parts) == 2 and parts[0].lower() == "bearer" and hmac.compare_digest(parts[1], expected)

    if level == ADMIN_FORCE:
        if not admin_api_key:
            return 403
        return 0 if bearer(admin_api_key) else 401
    if level == ADMIN_OPTIONAL:
        if admin_api_key:
            return 0 if bearer(admin_api_key) else 401
        if api_key:
            return 0 if bearer(api_key) else 401
        return 0
    if api_key:
        return 0 if bearer(api_key) else 401
    return 0


def _metrics(tm: TokenizerManager) -> str:
    info, sa = tm.info, tm.server_args
    gauges = {
        "sglang:max_total_num_tokens": info.get("max_total_num_tokens", 0),
        "sglang:is_cuda_graph": 0 if sa.disable_cuda_graph else 1,
        "sglang:engine_startup_time": tm.startup_time,
        "sglang:engine_load_weights_time": info.get("load_weights_time", 0.0),
    }
    return metrics_text(sa, gauges, tm.metrics)


def _local_opener():
    # Talk to ourselves directly: a proxy from http_proxy/https_proxy must never intercept the warm-up.
    return urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _execute_server_warmup(server_args, tm: TokenizerManager, faults: FaultInjector) -> None:
    host = server_args.host
    if host in ("0.0.0.0", "", "::"):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    base = f"http://{host}:{server_args.port}"
    headers = {"Content-Type": "application/json"}
    if server_args.api_key:
        headers["Authorization"] = f"Bearer {server_args.api_key}"
    opener = _local_opener()
    try:
        faults.at("http_up")
        last = None
        for _ in range(120):
            sim_sleep(0.05)
            try:
                with opener.open(urllib.request.Request(base + "/model_info", headers=headers), timeout=5) as r:
                    if r.status == 200:
                        last = None
                        break
            except OSError as e:
                last = e
                time.sleep(0.05)
        if last is not None:
            raise last
        if not server_args.skip_server_warmup:
            payload = {"text": WARMUP_PROMPT, "sampling_params": {"temperature": 0, "max_new_tokens": 8}}
            req = urllib.request.Request(base + "/generate", data=json.dumps(payload).encode(), headers=headers)
            with opener.open(req, timeout=600) as r:
                body = r.read()
            assert r.status == 200, f"res={r!r}, res.text={body!r}"
    except Exception:
        logger.error(f"Initialization failed. warmup error: {get_exception_traceback()}")
        kill_process_tree(os.getpid())
        return
    tm.server_status = "Up"
    tm.startup_time = time.time() - _START_TIME
    logger.info("The server is fired up and ready to roll!")
    tm.notify_ready()


_START_TIME = time.time()


def launch_server(server_args) -> None:
    system, model_config, faults = engine.prepare(server_args)
    conns, procs, infos = engine.launch_subprocesses(server_args, system, model_config, faults)
    if server_args.node_rank >= 1:
        # Multi-node: nodes with node_rank > 0 run only schedulers (and a dummy /health) and wait for them.
        engine.launch_dummy_health_check_server(server_args.host, server_args.port)
        for proc in procs:
            proc.join()
            logger.error(f"Scheduler or DataParallelController {proc.pid} terminated with {proc.exitcode}")
        return

    tm = TokenizerManager(server_args, model_config, conns, procs, infos)
    tm.system, tm.faults = system, faults
    _setup_access_logger(server_args)
    http_faults = FaultInjector(faults, rank=0)

    # uvicorn
    pid = os.getpid()
    _uvicorn("INFO", f"Started server process [{pid}]")
    _uvicorn("INFO", "Waiting for application startup.")
    _uvicorn("INFO", "Application startup complete.")
    try:
        infos_addr = socket.getaddrinfo(server_args.host, server_args.port, type=socket.SOCK_STREAM)
        family, _, _, _, sockaddr = infos_addr[0]
        httpd = _Server(sockaddr, make_handler(tm), family)
        try:
            httpd.server_bind()
            httpd.server_activate()
        except OSError as exc:
            httpd.server_close()
            raise OSError(
                exc.errno, f"error while attempting to bind on address {sockaddr!r}: {(exc.strerror or '').lower()}"
            ) from None
    except OSError as exc:
        _uvicorn("ERROR", str(exc))
        _uvicorn("INFO", "Waiting for application shutdown.")
        _uvicorn("INFO", "Application shutdown complete.")
        sys.exit(1)
    app.started = True
    shown_host = server_args.host if ":" not in server_args.host else f"[{server_args.host}]"
    _uvicorn("INFO", f"Uvicorn running on http://{shown_host}:{server_args.port} (Press CTRL+C to quit)")

    stop = threading.Event()
    state = {"down": False}

    def running_phase_sigquit_handler(signum=None, frame=None):
        if state["down"]:
            return
        state["down"] = True
        logger.error(f"SIGQUIT received. {signum=}, {frame=}. It usually means one child failed.")
        kill_process_tree(os.getpid())

    def graceful(signum, frame):
        if state["down"]:
            return
        state["down"] = True
        tm.gracefully_exit = True
        _uvicorn("INFO", "Shutting down")
        _uvicorn("INFO", "Waiting for application shutdown.")
        _uvicorn("INFO", "Application shutdown complete.")
        _uvicorn("INFO", f"Finished server process [{pid}]")
        stop.set()

    signal.signal(signal.SIGQUIT, lambda s, f: running_phase_sigquit_handler())
    signal.signal(signal.SIGTERM, graceful)
    signal.signal(signal.SIGINT, graceful)

    def watch_children():
        while not stop.is_set():
            if any(not p.is_alive() for p in procs) and not state["down"]:
                running_phase_sigquit_handler()
                return
            time.sleep(0.2)

    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    threading.Thread(target=watch_children, daemon=True).start()
    threading.Thread(target=_warmup_thread, args=(server_args, tm, http_faults), daemon=True).start()
    while not stop.wait(0.5):
        pass
    httpd.shutdown()
    httpd.server_close()
    kill_process_tree(os.getpid(), include_parent=False, children=list(CHILD_PROCESSES))


def _warmup_thread(server_args, tm, faults) -> None:
    try:
        _execute_server_warmup(server_args, tm, faults)
    except SystemExit:
        pass
