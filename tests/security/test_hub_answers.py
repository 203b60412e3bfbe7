"""What comes back from a hub reaches a path or carries the token only when it is what it must be: the commit a
revision resolves to names the snapshot's directory, so anything but 40 lowercase hex digits is refused; the token goes
only to the endpoint's own scheme and host - never to a host a redirect names, never over plain HTTP when the
endpoint is https (the download workers' Fetcher and the API client's redirect handler alike). Loopback HTTP servers
record the Authorization header each request carried."""

from __future__ import annotations

import http.server
import threading
import urllib.request

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import hf_http, hf_hub

GOOD = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize(
    "sha",
    ["../../../../etc", "/etc", GOOD + "\n", GOOD.upper(), GOOD[:39], GOOD + "0", 12345, ["x"], GOOD + "/.."],
)
def test_a_revision_that_resolves_to_anything_but_a_commit_is_refused(sha):
    client = hf_hub.HubClient("https://hub.invalid")
    client._json = lambda url: ({"sha": sha}, None)
    with pytest.raises(hf_hub.HubError, match="expected a 40-hex commit"):
        client.resolve("org/model", "main")


def test_a_commit_is_taken_as_it_came():
    client = hf_hub.HubClient("https://hub.invalid")
    client._json = lambda url: ({"sha": GOOD}, None)
    assert client.resolve("org/model", "main") == GOOD


class Recorder(http.server.BaseHTTPRequestHandler):
    seen: list  # (port, path, Authorization)
    redirect_to: str | None = None

    def do_GET(self):
        type(self).seen.append((self.server.server_address[1], self.path, self.headers.get("Authorization")))
        if self.path == "/redirect" and type(self).redirect_to:
            self.send_response(302)
            self.send_header("Location", type(self).redirect_to)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args):
        pass


@pytest.fixture
def servers():
    Recorder.seen = []
    started = []
    for _ in range(2):
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
        t = threading.Thread(target=httpd.serve_forever, daemon=True)
        t.start()
        started.append((httpd, t))
    yield [h.server_address[1] for h, _ in started]
    for httpd, t in started:
        httpd.shutdown()
        httpd.server_close()
        t.join(timeout=10)


def fetch(fetcher, url):
    resp, _ = fetcher.get(url, {})
    resp.read()
    fetcher.close()


def test_the_workers_send_the_token_to_the_endpoint_itself(servers):
    a, _ = servers
    fetch(hf_http.Fetcher(f"http://127.0.0.1:{a}", "hf_secret", 10), f"http://127.0.0.1:{a}/file")
    assert Recorder.seen == [(a, "/file", "Bearer hf_secret")]


def test_the_workers_never_send_an_https_endpoints_token_over_plain_http(servers):
    a, _ = servers
    fetch(hf_http.Fetcher(f"https://127.0.0.1:{a}", "hf_secret", 10), f"http://127.0.0.1:{a}/file")
    assert Recorder.seen == [(a, "/file", None)]


def test_the_workers_never_send_the_token_to_the_host_a_redirect_names(servers):
    a, b = servers
    Recorder.redirect_to = f"http://127.0.0.1:{b}/storage"
    try:
        fetch(hf_http.Fetcher(f"http://127.0.0.1:{a}", "hf_secret", 10), f"http://127.0.0.1:{a}/redirect")
    finally:
        Recorder.redirect_to = None
    assert Recorder.seen == [(a, "/redirect", "Bearer hf_secret"), (b, "/storage", None)]


@pytest.mark.parametrize(
    ("asked", "new", "kept"),
    [
        ("https://hub.example/api/x", "http://hub.example/api/y", False),  # https to plain HTTP, same host
        ("https://hub.example/api/x", "https://cdn.example/y", False),  # another host
        ("https://hub.example/api/x", "https://hub.example/api/y", True),  # the endpoint itself
    ],
)
def test_the_api_clients_redirects_keep_the_token_only_on_the_same_scheme_and_host(asked, new, kept):
    req = urllib.request.Request(asked, headers={"Authorization": "Bearer hf_secret"})
    out = hf_hub._SameHostAuthRedirect().redirect_request(req, None, 302, "Found", {}, new)
    assert ("Bearer hf_secret" in out.headers.values()) is kept, out.headers
