"""The repo_packages module as Ansible runs it, against a flat repository served on loopback from Debian 12's real
NVIDIA driver metadata (tests/unit/fixtures/debian12_nvidia_packages.yml): the compressed index, the plain one when
there is no compressed one, a repository with no index, a file: URL, a URL that is not one, check mode."""

from __future__ import annotations

import gzip
import http.server
import threading
from pathlib import Path
from typing import ClassVar

import pytest
import yaml
from _module_run import run_module

ROOT = Path(__file__).resolve().parents[2]
INDEX = yaml.safe_load((ROOT / "tests/unit/fixtures/debian12_nvidia_packages.yml").read_text())["packages"]
V = "535.261.03-1"


class _Repo(http.server.BaseHTTPRequestHandler):
    files: ClassVar[dict] = {}
    asked: ClassVar[list] = []

    def log_message(self, *a):
        pass

    def do_GET(self):
        type(self).asked.append(self.path)
        body = self.files.get(self.path)
        if body is None:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture()
def repo(monkeypatch):
    # apt's proxy (if this machine's apt has one) is not for loopback
    monkeypatch.setenv("no_proxy", "127.0.0.1")
    _Repo.files, _Repo.asked = {}, []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Repo)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.server_port}/cuda/repos/debian12/x86_64/"
    finally:
        srv.shutdown()
        srv.server_close()


def test_the_compressed_index_is_read_and_the_packages_are_checked(repo):
    _Repo.files["/cuda/repos/debian12/x86_64/Packages.gz"] = gzip.compress(INDEX.encode())
    out = run_module("repo_packages", {"url": repo, "packages": ["nvidia-driver=" + V, "nvidia-driver=580.95.05-1",
                                                                  "cuda-toolkit-12-8"]})  # fmt: skip
    assert not out.get("failed"), out
    assert out["changed"] is False and out["unreadable"] == ""
    assert out["index_url"] == repo + "Packages.gz"
    assert out["missing"] == ["nvidia-driver 580.95.05-1 (it has 535.261.03-1)", "cuda-toolkit-12-8 (no such package)"]
    assert "libnvidia-ml1=" + V not in out["found"]  # nvidia-driver does not need it at exactly this version
    assert "nvidia-driver-libs=" + V in out["found"]


def test_the_plain_index_is_read_when_there_is_no_compressed_one(repo):
    _Repo.files["/cuda/repos/debian12/x86_64/Packages"] = INDEX.encode()
    out = run_module("repo_packages", {"url": repo.rstrip("/"), "packages": ["nvidia-smi=" + V]})
    assert out["missing"] == [] and out["unreadable"] == ""
    assert out["index_url"] == repo + "Packages"
    assert "libnvidia-ml1=" + V in out["found"]
    assert _Repo.asked == ["/cuda/repos/debian12/x86_64/Packages.gz", "/cuda/repos/debian12/x86_64/Packages"]


def test_a_repository_without_an_index_is_reported_not_failed(repo):
    out = run_module("repo_packages", {"url": repo, "packages": ["nvidia-smi=" + V]}, check_mode=True)
    assert not out.get("failed"), out
    assert "404" in out["unreadable"] and "\n" not in out["unreadable"]
    assert out["missing"] == [] and out["found"] == []


def test_a_file_url_is_read_too(tmp_path):
    (tmp_path / "Packages").write_text(INDEX)
    out = run_module("repo_packages", {"url": tmp_path.as_uri() + "/", "packages": ["nvidia-smi=580.95.05-1"]},
                     check_mode=True)  # fmt: skip
    assert out["missing"] == ["nvidia-smi 580.95.05-1 (it has 535.261.03-1)"]


@pytest.mark.parametrize("url", ["ftp://mirror.example.internal/cuda/", "mirror.example.internal/cuda/",
                                 "http://mirror.example.internal/cu da/"])  # fmt: skip
def test_a_url_that_is_not_one_is_refused_in_one_line(url):
    out = run_module("repo_packages", {"url": url, "packages": ["nvidia-smi"]})
    assert out["failed"] is True
    assert out["msg"] == f"Expected an http(s) or file URL of an apt repository; found {url!r}."


def test_a_password_in_the_url_is_not_shown(repo):
    _Repo.files["/cuda/repos/debian12/x86_64/Packages"] = INDEX.encode()
    url = repo.replace("http://", "http://mirror-user:s3cret-token@")
    out = run_module("repo_packages", {"url": url, "packages": ["nvidia-smi=580.95.05-1"]})
    assert out["repository"] == repo.replace("http://", "http://***@")
    assert out["index_url"] == out["repository"] + "Packages"
    shown = {k: v for k, v in out.items() if k != "invocation"}
    assert "s3cret-token" not in str(shown)
    assert out["missing"] == ["nvidia-smi 580.95.05-1 (it has 535.261.03-1)"]
