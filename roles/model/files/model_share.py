# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Serve the seed host's verified model files read-only over HTTP to the other hosts of a fleet (model role, fan-out).

Usage: python3 model_share.py DIRECTORY ADDRESS PORT    (PORT 0: any free port; the first line on stdout names it)

The share's secret and its allow-list come from a JSON file, never from argv: `$CREDENTIALS_DIRECTORY/share` (the
role starts this as a transient unit with `LoadCredential=share:FILE`, FILE root-only 0600), or the file named by
`LLMOPS_SHARE_CONFIG` (tests). It holds {"token": SECRET, "allow": [peer addresses], "max_connections": N,
"timeout": S, "idle_exit": S}. Without it, or with an empty token or allow-list, the share refuses to start.

Every request must come from an address in "allow" (else 403) and carry `Authorization: Bearer SECRET` (else 401);
neither answer carries a byte of a file. Paths are /COMMIT/PATH: a file is served only when the seed's own records
(the completion marker, or the verified-files record of the download in progress) list PATH for COMMIT, and, for a
file verified during a download, only while its size and mtime are the ones recorded - so after a revision update the
old file is never served under the new commit (404: "not yet", the receiver asks again). A path that resolves outside
DIRECTORY (a symlink) is refused (403). When the seed's download of COMMIT failed after this share started (its
failure record, .llmops-partial/failed.json), a file not yet verified answers 410 at once: the receivers stop with
that reason instead of waiting for a file that will not come. DIRECTORY is a snapshot, or a root of one snapshot per
commit (the model role's llmops_model_revisions_dir): a file of COMMIT is then looked up in DIRECTORY/COMMIT.

Byte ranges: one range `bytes=A-B` / `bytes=A-`, answered 206 with `Content-Range`; any other or unsatisfiable Range
answers 416 with `Content-Range: bytes */SIZE`. At most max_connections handlers at once (a further connection gets
503 and is closed), a connection idle for TIMEOUT seconds (headers not sent, body not read) is closed, and the
share exits after "idle_exit" seconds (default 900) without an authenticated request: the run that started it is over.
No reverse DNS lookup at start; bodies go out with sendfile(2). Standard library only (Python 3.7+).
"""

import hmac
import http.server
import ipaddress
import json
import os
import re
import socket
import socketserver
import sys
import threading
import time
import urllib.parse

PARTIAL_DIR = ".llmops-partial"
MARKER = ".llmops-snapshot.json"
VERIFIED = "verified.json"
FAILED = "failed.json"  # written by the seed's hf_snapshot when its download fails (module_utils/hf_local.py)
RANGE = re.compile(r"bytes=(\d{1,18})-(\d{0,18})$")
COMMIT = re.compile(r"[0-9a-f]{40}$")
TIMEOUT = 30  # seconds a connection may sit idle (request headers, or a body the peer stopped reading)
MAX_CONNECTIONS = 32
IDLE_EXIT = 900  # seconds without any request (receivers ask every second while they wait): the run is over


def load_config(environ):
    """The share's config (token, allow, max_connections) or SystemExit with a one-line reason (never the token)."""
    path = environ.get("LLMOPS_SHARE_CONFIG")
    if not path and environ.get("CREDENTIALS_DIRECTORY"):
        path = os.path.join(environ["CREDENTIALS_DIRECTORY"], "share")
    if not path:
        raise SystemExit(
            "model_share: no config: expected the credential 'share' (LoadCredential=) or LLMOPS_SHARE_CONFIG"
        )
    try:
        with open(path, encoding="utf-8") as f:
            cfg = json.load(f)
    except (OSError, ValueError) as exc:
        raise SystemExit(f"model_share: cannot read the config {path}: {type(exc).__name__}") from None
    token = cfg.get("token") if isinstance(cfg, dict) else None
    allow = cfg.get("allow") if isinstance(cfg, dict) else None
    if not isinstance(token, str) or len(token) < 16:
        raise SystemExit("model_share: the config's token must be a string of at least 16 characters")
    if not isinstance(allow, list) or not allow or not all(isinstance(a, str) and a for a in allow):
        raise SystemExit("model_share: the config's allow must be a non-empty list of peer addresses")
    out = {"token": token, "allow": peer_addresses(allow)}
    for name, default in (("max_connections", MAX_CONNECTIONS), ("idle_exit", IDLE_EXIT), ("timeout", TIMEOUT)):
        value = cfg.get(name, default)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise SystemExit(f"model_share: {name} must be a positive integer; found {value!r}")
        out[name] = value
    return out


def peer_addresses(allow):
    """The allow-list as IP addresses: literals as given (no lookup), host names resolved once at start."""
    out = set()
    for name in allow:
        try:
            out.add(str(ipaddress.ip_address(name)))
            continue
        except ValueError:
            pass
        try:
            out.update(str(ipaddress.ip_address(ai[4][0].split("%")[0])) for ai in socket.getaddrinfo(name, None))
        except (OSError, UnicodeError):
            raise SystemExit(f"model_share: cannot resolve the peer {name!r} of the allow-list") from None
    # an IPv4 peer on a dual-stack socket shows as ::ffff:a.b.c.d
    return frozenset(out | {"::ffff:" + a for a in out if "." in a})


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def listed(root, commit, rel, path):
    """True when the seed's records say ``rel`` is the verified file of ``commit`` (and it is still that file)."""
    marker = _read_json(os.path.join(root, MARKER))
    if marker.get("commit") == commit and isinstance(marker.get("files"), dict) and rel in marker["files"]:
        want = marker["files"][rel]
        size = want.get("size") if isinstance(want, dict) else None
        return size is None or os.stat(path).st_size == size
    rec = _read_json(os.path.join(root, PARTIAL_DIR, VERIFIED))
    files = rec.get("files") if rec.get("commit") == commit else None
    entry = files.get(rel) if isinstance(files, dict) else None
    if not isinstance(entry, dict) or not isinstance(entry.get("stamp"), dict):
        return False
    st = os.stat(path)
    return entry["stamp"].get("size") == st.st_size and entry["stamp"].get("mtime_ns") == st.st_mtime_ns


def failed(root, commit, since):
    """True when the seed's failure record names ``commit`` and was written at or after ``since`` (this share's start:
    a record from an earlier run is not this run's failure)."""
    rec = _read_json(os.path.join(root, PARTIAL_DIR, FAILED))
    at = rec.get("failed_at")
    return rec.get("commit") == commit and isinstance(at, (int, float)) and at >= since


class ShareServer(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address, handler, root, config):
        self.root = os.path.realpath(root)
        self.config = config
        self.slots = threading.BoundedSemaphore(config["max_connections"])
        self.last_request = time.monotonic()
        self.started = time.time()  # wall clock, as the seed's failure record is
        super().__init__(address, handler)

    def server_bind(self):
        socketserver.TCPServer.server_bind(self)  # not HTTPServer's: it resolves the bind address's name
        self.server_name, self.server_port = self.server_address[0], self.server_address[1]

    def service_actions(self):
        if time.monotonic() - self.last_request > self.config["idle_exit"]:
            sys.stderr.write(f"no request for {self.config['idle_exit']} s: the run that started this share is over\n")
            raise SystemExit(0)

    def process_request(self, request, client_address):
        if not self.slots.acquire(blocking=False):  # every handler busy: refuse now rather than start a thread
            try:
                request.settimeout(1)
                request.sendall(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            except OSError:
                pass
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self.slots.release()
            raise

    def process_request_thread(self, request, client_address):
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.slots.release()


class ShareHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: a peer's connection serves its next file

    def setup(self):
        self.timeout = self.server.config["timeout"]  # socket timeout: an idle or stalled peer releases its handler
        super().setup()

    def log_message(self, format, *args):  # one line per request to stderr (the journal); never a header
        sys.stderr.write(f"{self.client_address[0]} {format % args}\n")

    def _refuse(self, code, why, size=None):
        self.send_response(code, why)
        self.send_header("X-Error-Message", why)  # the receiver's one-line error says why
        if size is not None:
            self.send_header("Content-Range", f"bytes */{size}")
        if code == 401:
            self.send_header("WWW-Authenticate", 'Bearer realm="llmops-model-share"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    def _allowed(self):
        cfg = self.server.config
        if self.client_address[0] not in cfg["allow"]:
            self._refuse(403, f"{self.client_address[0]} is not in the share's allow-list (model_fleet_peer_addresses)")
            return False
        got = self.headers.get("Authorization") or ""
        want = "Bearer " + cfg["token"]
        if not hmac.compare_digest(got.encode("utf-8", "replace"), want.encode("utf-8")):
            self._refuse(401, "this run's share secret is required (peer_token_file)")
            return False
        return True

    def _not_yet(self, root, commit, why):
        """404 ("not yet": the receiver asks again), or 410 when the seed's download of ``commit`` failed."""
        if failed(root, commit, self.server.started):
            return self._refuse(
                410, "the seed host's download of this commit failed: see its output, fix it, run again"
            )
        return self._refuse(404, why)

    def do_HEAD(self):
        self._serve(body=False)

    def do_GET(self):
        self._serve(body=True)

    def _serve(self, body):
        if not self._allowed():
            return
        self.server.last_request = time.monotonic()  # only the fleet's own requests keep the share up
        parts = urllib.parse.unquote(urllib.parse.urlsplit(self.path).path).split("/")
        if len(parts) < 3 or parts[0] or not COMMIT.match(parts[1]):
            return self._refuse(404, "expected /COMMIT/PATH")
        commit, names = parts[1], parts[2:]
        if any(n in ("", ".", "..") or "\\" in n or "\0" in n for n in names) or names[0] in (PARTIAL_DIR, MARKER):
            return self._refuse(404, "not a file of the snapshot")
        rel = "/".join(names)
        root = self.server.root
        if os.path.isdir(os.path.join(root, commit)):  # a root of one snapshot per commit
            root = os.path.realpath(os.path.join(root, commit))
        path = os.path.realpath(os.path.join(root, rel))
        if os.path.commonpath([root, path]) != root or path == root:
            return self._refuse(403, "outside the snapshot")
        if not os.path.isfile(path):
            return self._not_yet(root, commit, "not verified yet")
        try:
            f = open(path, "rb")
        except OSError:
            return self._refuse(404, "not readable")
        with f:
            if not listed(root, commit, rel, path):
                return self._not_yet(root, commit, "not verified for this commit")
            size = os.fstat(f.fileno()).st_size
            start, end = 0, size
            asked = self.headers.get("Range")
            if asked is not None:
                m = RANGE.match(asked.strip())
                if not m:
                    return self._refuse(416, "malformed Range", size)
                start = int(m.group(1))
                end = min(size, int(m.group(2)) + 1) if m.group(2) else size
                if start >= size or end <= start:
                    return self._refuse(416, "range not satisfiable", size)
                self.send_response(206)
                self.send_header("Content-Range", f"bytes {start}-{end - 1}/{size}")
            else:
                self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(end - start))
            self.send_header("Accept-Ranges", "bytes")
            self.end_headers()
            if body and end > start:
                self.connection.sendfile(f, start, end - start)


def main(argv, environ):
    if len(argv) != 4 or not argv[3].isdigit():
        raise SystemExit("usage: model_share.py DIRECTORY ADDRESS PORT")
    if argv[2] in ("", "0.0.0.0", "::"):
        raise SystemExit(
            f"model_share: refusing to listen on every interface ({argv[2]!r}): give the seed's fleet address"
        )
    config = load_config(environ)
    with ShareServer((argv[2], int(argv[3])), ShareHandler, argv[1], config) as srv:
        print(f"Serving {argv[1]} on {srv.server_name} port {srv.server_port}", flush=True)
        srv.serve_forever()


if __name__ == "__main__":
    main(sys.argv, os.environ)
