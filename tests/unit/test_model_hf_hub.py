"""hf_hub helpers (the hf_snapshot module's protocol code) and a resumable download against a local fake hub."""

import hashlib
import http.server
import itertools
import json
import os
import threading
from typing import ClassVar

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import hf_http, hf_hub, hf_transfer


def test_filter_paths_follows_huggingface_hub():
    paths = ["config.json", "model-1.safetensors", "original/consolidated.pth", "tokenizer.json"]
    assert hf_hub.filter_paths(paths, ["*.json"]) == ["config.json", "tokenizer.json"]
    assert hf_hub.filter_paths(paths, None, ["original/"]) == ["config.json", "model-1.safetensors", "tokenizer.json"]
    assert hf_hub.filter_paths(paths) == paths


def test_expected_digest_lfs_and_git_blob(tmp_path):
    data = b"hello\n"
    p = tmp_path / "f"
    p.write_bytes(data)
    git_oid = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    assert hf_hub.expected_digest({"oid": git_oid}) == ("git-sha1", git_oid)
    assert hf_hub.hash_file(str(p), "git-sha1", len(data)).hexdigest() == git_oid
    sha = hashlib.sha256(data).hexdigest()
    assert hf_hub.expected_digest({"oid": "x", "lfs": {"oid": "sha256:" + sha}}) == ("sha256", sha)


@pytest.mark.parametrize("bad", ["../x", "/etc/passwd", "a//b", ".llmops-snapshot.json", "a/./b"])
def test_unsafe_paths_are_rejected(bad):
    with pytest.raises(hf_hub.HubError):
        hf_hub.safe_relpath(bad)


def test_read_env_value(tmp_path):
    f = tmp_path / "env"
    f.write_text('# c\nSGLANG_API_KEY=k1\nHF_TOKEN="hf_abc"\n')
    assert hf_hub.read_env_value(str(f), "HF_TOKEN") == "hf_abc"
    assert hf_hub.read_env_value(str(f), "SGLANG_API_KEY") == "k1"
    assert hf_hub.read_env_value(str(f), "NOPE") is None
    assert hf_hub.read_env_value(str(tmp_path / "missing"), "HF_TOKEN") is None


class _Hub(http.server.BaseHTTPRequestHandler):
    """Serves ``files`` with Range support; ``drop_at`` cuts the first whole-file answer after that many bytes."""

    protocol_version = "HTTP/1.1"
    files: ClassVar[dict] = {}
    drop_at = None
    ranges: ClassVar[list] = []

    def log_message(self, *a):
        pass

    def do_GET(self):
        name = self.path.rsplit("/", 1)[-1]
        data = self.files[name]
        start, end = 0, len(data) - 1
        rng = self.headers.get("Range")
        type(self).ranges.append(rng)
        if rng:
            a, _, b = rng.split("=")[1].partition("-")
            start, end = int(a), int(b) if b else len(data) - 1
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start : end + 1]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if type(self).drop_at is not None and not rng:
            self.wfile.write(body[: type(self).drop_at])
            type(self).drop_at = None
            self.wfile.flush()
            self.close_connection = True
            return
        self.wfile.write(body)


def _transfer(url, want, part, *, retries=0):
    job = hf_transfer.FileJob("w.bin", url, want, part, 0)
    t = hf_transfer.Transfer(
        [job], connections=1, retries=retries, fetcher_factory=lambda: hf_http.Fetcher("http://x", None, 5)
    )
    return job, t, t.run(lambda j: j.close())


def test_download_resumes_a_partial_left_by_an_earlier_call(tmp_path):
    data = os.urandom(300_000)
    _Hub.files = {"w.bin": data}
    _Hub.drop_at = 100_000
    _Hub.ranges = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_port}/o/n/resolve/{'a' * 40}/w.bin"
        want = {"size": len(data), "kind": "sha256", "digest": hashlib.sha256(data).hexdigest()}
        part = str(tmp_path / "p" / "w.bin.incomplete")
        with pytest.raises(hf_hub.HubError, match="resumes"):
            _transfer(url, want, part)
        assert os.path.getsize(part) == 100_000
        job, _, finished = _transfer(url, want, part)
        assert finished and job.verified and job.resumed_from == 100_000
        assert _Hub.ranges == [None, "bytes=100000-299999"]
        with open(part, "rb") as f:
            assert f.read() == data
    finally:
        srv.shutdown()


@pytest.mark.parametrize(
    ("retry_after", "attempt", "expected"),
    [("7", 1, 7.0), (None, 1, 1.0), (None, 3, 4.0), (None, 30, 30.0), ("100000", 1, 300.0), ("soon", 2, 2.0)],
)
def test_retry_delay_honours_retry_after_and_backs_off(retry_after, attempt, expected):
    exc = hf_hub.HubError("x", status=429, retry_after=retry_after)
    assert hf_hub.retry_delay(exc, attempt) == expected


def test_plan_segments_cover_the_file_exactly():
    segs = hf_transfer.plan_segments(10 * 1024 + 5, 1024)
    assert segs[0][:2] == [0, 1024] and segs[-1][:2] == [10 * 1024, 10 * 1024 + 5] and len(segs) == 11
    assert all(a[1] == b[0] for a, b in itertools.pairwise(segs))
    assert hf_transfer.plan_segments(100, 0) == [[0, 100, 0, None]]


def test_marker_matches_needs_the_same_request():
    m = {
        "repo_id": "o/n",
        "revision": "main",
        "commit": "c" * 40,
        "allow_patterns": [],
        "ignore_patterns": [],
        "files": {},
    }
    assert hf_hub.marker_matches(m, "o/n", "model", "main", allow=[], ignore=[])
    assert hf_hub.marker_matches(m, "o/n", "model", "c" * 40, allow=[], ignore=[])
    assert not hf_hub.marker_matches(m, "o/n", "model", "v1.0", allow=[], ignore=[])
    assert not hf_hub.marker_matches(m, "o/n", "model", "main", allow=["*.json"], ignore=[])
    assert json.dumps(m)
