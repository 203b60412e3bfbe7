#!/usr/bin/env python3
"""Serve the generated mirrors over HTTP (one stdlib ThreadingHTTPServer process; stops cleanly on SIGTERM/SIGINT).

    serve.py --root DIR [--bind IP] [--port N] [--hub-port M] [--hub-token T ...] [--hub-token-no-access T ...]
             [--hub-rate BYTES_PER_S] [--hub-latency S] [--hub-page-size K] [--faults FILE] [--log FILE]
             [--ready-file FILE]

Main port:  /nvidia/...   apt repository (static)       /pypi/...  simple indexes and wheels (static)
            /git/...      git repositories (dumb HTTP)   /hf/...    Hugging Face hub stand-in
            /_sim/faults  GET, POST (JSON list or object, appended), DELETE       /_sim/requests  GET, DELETE
            /_sim/hub     GET, POST {"rate": bytes/s per connection, "latency": s} (the hub's pace)
Hub port (optional): the hub at the URL root, for clients that want HF_ENDPOINT without a path.
The first line on stdout is a JSON object with the URLs; --ready-file gets the same JSON once listening.
"""

import argparse
import fnmatch
import json
import mimetypes
import os
import re
import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hub

CHUNK = 64 * 1024
CONTENT_TYPES = {".deb": "application/vnd.debian.binary-package", ".whl": "application/zip", ".gz": "application/gzip"}
TEXT_NAMES = {"Release", "InRelease", "Packages", "HEAD", "info/refs", "objects/info/packs"}


class Faults:
    """Fault rules: {"match": glob on the request path, "action": "drop"|"slow"|"status", "times": N or null,
    "methods": [..] (optional), "client": "10.213.0.61" (optional: only requests from this address, so a test's
    fault never hits another test's node sharing the mirrors), "after_bytes" | "at_offset" (drop), "bytes_per_sec"
    (slow), "status" and "headers" (status, e.g. {"Retry-After": "1"})}."""

    def __init__(self, path=None):
        self.path = Path(path) if path else None
        self.file_rules, self.file_mtime = [], None
        self.posted = []
        self.lock = threading.Lock()

    def _reload(self):
        if not self.path:
            return
        try:
            mtime = self.path.stat().st_mtime_ns
        except OSError:
            self.file_rules, self.file_mtime = [], None
            return
        if mtime != self.file_mtime:
            data = json.loads(self.path.read_text() or "[]")
            self.file_rules = [dict(r, used=0) for r in (data if isinstance(data, list) else data.get("faults", []))]
            self.file_mtime = mtime

    def add(self, rules):
        rules = rules if isinstance(rules, list) else rules.get("faults", [rules])
        for r in rules:
            if r.get("action") not in ("drop", "slow", "status") or "match" not in r:
                raise ValueError(f"bad fault rule {r!r}")
        with self.lock:
            self.posted += [dict(r, used=0) for r in rules]

    def clear(self):
        with self.lock:
            self.posted = []
            for r in self.file_rules:
                r["used"] = r.get("times") or 0
            self.file_rules = []
            if self.path and self.path.exists():
                self.file_mtime = self.path.stat().st_mtime_ns

    def listing(self):
        with self.lock:
            self._reload()
            return self.file_rules + self.posted

    def take(self, path, method, actions, client=None):
        """The first live rule for this request (from address `client`) among actions; counts one use."""
        with self.lock:
            self._reload()
            for r in self.file_rules + self.posted:
                if r["action"] not in actions or not fnmatch.fnmatchcase(path, r["match"]):
                    continue
                if r.get("methods") and method not in r["methods"]:
                    continue
                if r.get("client") and r["client"] != client:
                    continue
                if r.get("times") is not None and r["used"] >= r["times"]:
                    continue
                r["used"] += 1
                return dict(r)
        return None


class Mirror:
    def __init__(self, args):
        self.root = Path(args.root).resolve()
        self.www = self.root / "www"
        self.hub = hub.HubStore(self.root / "hub")
        self.hub_tokens = set(args.hub_token or []) or {
            t for t in os.environ.get("SIM_HUB_TOKENS", "hf_sim_test_token").split(",") if t
        }
        self.hub_tokens_no_access = set(args.hub_token_no_access or [])
        self.hub_tokens |= self.hub_tokens_no_access
        self.hub_page_size = args.hub_page_size
        self.hub_rate = args.hub_rate or None  # bytes per second per connection (file bodies), None = unlimited
        self.hub_latency = args.hub_latency  # seconds before each file answer (a far-away hub / CDN)
        self.cdn_port = None
        self.faults = Faults(args.faults)
        self.log_file = open(args.log, "a", buffering=1) if args.log else None
        self.requests = []
        self.lock = threading.Lock()
        self.settled = threading.Condition(self.lock)
        self.seq, self.cleared_at, self.inflight = 0, 0, {}
        self.stopping = threading.Event()

    def hub_pause(self):
        if self.hub_latency > 0:
            time.sleep(self.hub_latency)

    def begin(self, client):
        """A request starts: its sequence number (what a clear of the log compares with)."""
        with self.lock:
            self.seq += 1
            self.inflight[self.seq] = client
            return self.seq

    def record(self, seq, entry):
        """The request's log entry, written before the last byte of its answer leaves (Handler.write_body): a
        client holding its whole answer always finds the entry. A request begun before the last DELETE of the log
        stays out of /_sim/requests (it belongs to whoever ran before the clear); --log keeps everything."""
        with self.settled:
            if seq > self.cleared_at:
                self.requests.append(entry)
                del self.requests[:-20000]
            if self.log_file:
                self.log_file.write(json.dumps(entry) + "\n")

    def end(self, seq):
        with self.settled:
            self.inflight.pop(seq, None)
            self.settled.notify_all()

    def clear(self, seq):
        with self.lock:
            self.requests.clear()
            self.cleared_at = seq

    def wait_settled(self, own, client=None, timeout=60.0):
        """Block until no request but `own` (from `client`, or from anyone) is in flight: the entries of requests
        whose client went away mid-answer (a killed download) land when the server notices. False on timeout."""
        with self.settled:
            return self.settled.wait_for(
                lambda: not [s for s, c in self.inflight.items() if s != own and client in (None, c)], timeout
            )


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "llmops-sim-mirror/1"

    def log_message(self, format, *args):
        pass

    # ---------------------------------------------------------------------------------------------- plumbing
    def _start(self):
        self.t0 = time.time()
        self.sent = 0
        self.status = None
        self.fault = None
        self.length = None  # the answer's Content-Length
        self.recorded = False
        self.seq = self.server.mirror.begin(self.client_address[0])

    def send_response(self, code, message=None):
        self.status = code
        super().send_response(code, message)

    def send_header(self, keyword, value):
        if keyword.lower() == "content-length":
            self.length = int(value)
        super().send_header(keyword, value)

    def end_headers(self):
        # an answer without a body is complete with its headers: its log entry goes first
        if not getattr(self, "recorded", True) and (self.command == "HEAD" or self.length == 0):
            self._record()
        super().end_headers()

    def write_body(self, data: bytes):
        """Send part of the body. Before the answer's last byte the request is logged, so no client can hold a
        whole answer whose entry is not in the log yet (the next test's DELETE of the log cannot be overtaken)."""
        last = self.length is not None and self.sent + len(data) >= self.length
        if last and not self.recorded and len(data) > 1:
            self.wfile.write(data[:-1])
            self.sent += len(data) - 1
            data = data[-1:]
        if last and not self.recorded:
            self.sent += len(data)
            self._record()
            self.wfile.write(data)
            return
        self.wfile.write(data)
        self.sent += len(data)

    def _finish(self):
        # an answer cut short (a drop fault, a client gone, the server stopping) is logged here, before the
        # connection closes: the client notices the cut only after this
        if not self.recorded:
            self._record()
        self.server.mirror.end(self.seq)

    def _record(self):
        self.recorded = True
        url = urlsplit(self.path)
        self.server.mirror.record(
            self.seq,
            {
                "time": round(self.t0, 3),
                "listener": self.server.name,
                "client": self.client_address[0],
                "method": self.command,
                "path": url.path,
                "query": url.query,
                "range": self.headers.get("Range"),
                "authorization": bool(self.headers.get("Authorization")),
                "status": self.status,
                "bytes": self.sent,
                "fault": self.fault,
                "seconds": round(time.time() - self.t0, 3),
            },
        )

    def send_body(self, status, body: bytes, headers=None, content_type="text/plain; charset=utf-8"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD" and body:
            self.write_body(body)

    def send_json(self, obj, status=200, headers=None):
        self.send_body(status, json.dumps(obj).encode(), headers, "application/json")

    def send_file(self, path: Path, headers=None, head=False, rate=None):
        try:
            size = path.stat().st_size
        except OSError:
            return self.send_body(404, b"not found\n")
        headers = dict(headers or {})
        start, end, status = 0, size - 1, 200
        rng = self.headers.get("Range")
        if rng:
            m = re.fullmatch(r"bytes=(\d*)-(\d*)", rng.strip())
            if not m or (not m.group(1) and not m.group(2)):
                return self.send_body(416, b"bad range\n", {"Content-Range": f"bytes */{size}"})
            if m.group(1):
                start = int(m.group(1))
                end = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
            else:
                start = max(0, size - int(m.group(2)))
            if start >= size or start > end:
                return self.send_body(416, b"range not satisfiable\n", {"Content-Range": f"bytes */{size}"})
            status = 206
            headers["Content-Range"] = f"bytes {start}-{end}/{size}"
        length = end - start + 1
        ctype = headers.pop("Content-Type", None) or CONTENT_TYPES.get(path.suffix)
        if not ctype:
            ctype = mimetypes.guess_type(path.name)[0] or "application/octet-stream"
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(length))
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("Last-Modified", self.date_time_string(path.stat().st_mtime))
        for k, v in headers.items():
            self.send_header(k, v)
        self.end_headers()
        if head:
            return None
        mirror = self.server.mirror
        req_path = urlsplit(self.path).path
        drop = mirror.faults.take(req_path, self.command, ("drop",), self.client_address[0])
        slow = mirror.faults.take(req_path, self.command, ("slow",), self.client_address[0])
        limit = None
        if drop:
            self.fault = {"action": "drop", "match": drop["match"]}
            if "at_offset" in drop:
                limit = max(0, int(drop["at_offset"]) - start)
            else:
                limit = int(drop.get("after_bytes", 0))
        if slow:
            self.fault = (self.fault or {}) | {"slow": slow["bytes_per_sec"]}
        t_body = time.monotonic()
        with path.open("rb") as f:
            f.seek(start)
            remaining = length
            while remaining > 0 and not mirror.stopping.is_set():
                n = min(CHUNK, remaining)
                if rate:
                    # per-connection cap: never ahead of rate * elapsed (small chunks keep the pace even)
                    n = min(n, max(4096, int(rate) // 50))
                    ahead = (length - remaining) / rate - (time.monotonic() - t_body)
                    if ahead > 0:
                        time.sleep(ahead)
                if slow:
                    n = min(n, max(1, int(slow["bytes_per_sec"]) // 10))
                if limit is not None:
                    n = min(n, limit - self.sent)
                    if n <= 0:
                        self.wfile.flush()
                        self.close_connection = True
                        return None
                data = f.read(n)
                if not data:
                    break
                self.write_body(data)
                remaining -= len(data)
                if slow:
                    time.sleep(len(data) / float(slow["bytes_per_sec"]))
        return None

    # ---------------------------------------------------------------------------------------------- routing
    def _route(self):
        self._start()
        try:
            url = urlsplit(self.path)
            path = url.path
            if path.startswith("/_sim/"):
                return self._control(path)
            mirror = self.server.mirror
            fault = mirror.faults.take(path, self.command, ("status",), self.client_address[0])
            if fault:
                self.fault = {"action": "status", "match": fault["match"]}
                return self.send_body(int(fault.get("status", 503)), b"simulated failure\n", fault.get("headers"))
            if self.server.name == "cdn":
                if not path.startswith("/cdn-lfs/"):
                    return self.send_body(404, b"NoSuchKey\n")
                return hub.handle(self, path, url.query, "")
            if self.server.hub_only:
                return hub.handle(self, path, url.query, "")
            if path == "/hf" or path.startswith("/hf/"):
                return hub.handle(self, path[3:] or "/", url.query, "/hf")
            if self.command not in ("GET", "HEAD"):
                return self.send_body(405, b"method not allowed\n")
            return self._static(path)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        finally:
            self._finish()

    def _static(self, path):
        www = self.server.mirror.www
        rel = unquote(path).lstrip("/")
        target = (www / rel).resolve()
        if target != www and www not in target.parents:
            return self.send_body(404, b"not found\n")
        if target.is_dir():
            if not path.endswith("/"):
                return self.send_body(301, b"", {"Location": path + "/"})
            if (target / "index.html").is_file():
                return self.send_file(
                    target / "index.html", {"Content-Type": "text/html; charset=utf-8"}, head=self.command == "HEAD"
                )
            names = sorted(p.name + ("/" if p.is_dir() else "") for p in target.iterdir())
            body = "".join(f'<a href="{n}">{n}</a><br/>\n' for n in names)
            return self.send_body(200, f"<html><body>\n{body}</body></html>\n".encode(), None, "text/html")
        if not target.is_file():
            return self.send_body(404, b"not found\n")
        headers = {}
        if target.name in TEXT_NAMES or target.suffix in (".pub", ".asc", ".list"):
            headers["Content-Type"] = "text/plain; charset=utf-8"
        return self.send_file(target, headers, head=self.command == "HEAD")

    def _control(self, path):
        mirror = self.server.mirror
        if path == "/_sim/faults":
            if self.command == "GET":
                return self.send_json(mirror.faults.listing())
            if self.command == "DELETE":
                mirror.faults.clear()
                return self.send_json({"ok": True})
            if self.command == "POST":
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    mirror.faults.add(json.loads(self.rfile.read(length) or b"[]"))
                except (ValueError, AttributeError) as e:
                    return self.send_json({"error": str(e)}, 400)
                return self.send_json({"ok": True, "faults": mirror.faults.listing()})
        if path == "/_sim/hub":
            # GET the hub's pace; POST {"rate": bytes/s per connection or 0, "latency": seconds} to change it
            if self.command == "POST":
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                    if "rate" in body:
                        mirror.hub_rate = float(body["rate"]) or None
                    if "latency" in body:
                        mirror.hub_latency = max(0.0, float(body["latency"]))
                except (ValueError, TypeError, AttributeError) as e:
                    return self.send_json({"error": str(e)}, 400)
            return self.send_json({"rate": mirror.hub_rate or 0, "latency": mirror.hub_latency})
        if path == "/_sim/requests":
            if self.command == "DELETE":
                mirror.clear(self.seq)
                return self.send_json({"ok": True})
            query = dict(parse_qsl(urlsplit(self.path).query))
            if "settle" in query:
                # ?settle[=CLIENT]: first wait until no other request (from CLIENT) is in flight, at most 60 s
                if not mirror.wait_settled(self.seq, query["settle"] or None):
                    return self.send_json({"error": "requests still in flight after 60 s"}, 504)
            with mirror.lock:
                entries = list(mirror.requests)
            return self.send_json(entries)
        return self.send_body(404, b"unknown control endpoint\n")

    do_GET = do_HEAD = do_POST = do_DELETE = _route


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, mirror, name, hub_only):
        super().__init__(addr, Handler)
        self.mirror, self.name, self.hub_only = mirror, name, hub_only


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--root", required=True, help="output directory of build.py")
    p.add_argument("--bind", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8080, help="0 picks a free port")
    p.add_argument("--hub-port", type=int, default=None, help="also serve the hub at the root of this port")
    p.add_argument("--hub-token", action="append", help="accepted hub token (repeatable; env SIM_HUB_TOKENS)")
    p.add_argument(
        "--hub-token-no-access", action="append", help="a known token whose account did not accept gated repos' terms"
    )
    p.add_argument("--cdn-port", type=int, default=0, help="port of the LFS storage host the hub redirects to")
    p.add_argument("--hub-rate", type=float, default=0, help="bytes/s per connection for hub file bodies (0: no cap)")
    p.add_argument("--hub-latency", type=float, default=0.0, help="seconds before each hub file answer")
    p.add_argument("--hub-page-size", type=int, default=3, help="tree listing page size (Link: rel=next)")
    p.add_argument("--faults", help="JSON fault rules file, re-read when it changes")
    p.add_argument("--log", help="append one JSON line per request to this file")
    p.add_argument("--ready-file", help="write the URL JSON here once listening")
    args = p.parse_args(argv)
    mirror = Mirror(args)
    servers = [Server((args.bind, args.port), mirror, "main", False)]
    if args.hub_port is not None:
        servers.append(Server((args.bind, args.hub_port), mirror, "hub", True))
    cdn = Server((args.bind, args.cdn_port), mirror, "cdn", False)  # where LFS redirects point (another origin)
    mirror.cdn_port = cdn.server_port
    base = f"http://{args.bind}:{servers[0].server_port}"
    urls = {
        "base": base,
        "apt": f"{base}/nvidia/compute/cuda/repos/debian12/x86_64/",
        "apt_key": f"{base}/nvidia/compute/cuda/repos/debian12/x86_64/cuda-archive-keyring.gpg",
        "cuda_keyring_deb": f"{base}/nvidia/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb",
        "pypi": f"{base}/pypi/simple/",
        "torch_index": f"{base}/pypi/whl/",
        "git": f"{base}/git/",
        "hf": f"{base}/hf",
        "hf_root": f"http://{args.bind}:{servers[1].server_port}" if len(servers) > 1 else None,
        "cdn": f"http://{args.bind}:{cdn.server_port}",
        "control": f"{base}/_sim/",
        "pid": os.getpid(),
    }
    servers.append(cdn)
    threads = [threading.Thread(target=s.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True) for s in servers]
    for t in threads:
        t.start()
    print(json.dumps(urls), flush=True)
    for k, v in urls.items():
        if k != "pid" and v:
            print(f"{k:18} {v}", flush=True)
    if args.ready_file:
        tmp = Path(args.ready_file + ".tmp")
        tmp.write_text(json.dumps(urls) + "\n")
        tmp.replace(args.ready_file)

    def stop(signum, _frame):
        mirror.stopping.set()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    while not mirror.stopping.wait(0.5):
        pass
    for s in servers:
        s.shutdown()
        s.server_close()
    print("mirror server stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
