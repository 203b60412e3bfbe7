# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The Hugging Face hub's download protocol, standard library only (used by the ``hf_snapshot`` module).

Pure helpers (file filtering, hashing, the completion marker, the env-file token reader) plus a small HTTP client for
the three routes ``snapshot_download`` uses (see docs/serving.md):

    GET  {endpoint}/api/{models|datasets}/{repo}/revision/{rev}          -> {"sha": commit, ...}
    GET  {endpoint}/api/{models|datasets}/{repo}/tree/{sha}?recursive=true&expand=false   (Link: rel="next" pages)
    GET  {endpoint}/{repo}/resolve/{sha}/{path}   (datasets: /datasets/{repo}/...)   Range: bytes=N-  -> 206

Xet: the client never advertises Xet support and ignores ``X-Xet-Hash``; it always does a plain GET of ``/resolve``,
which the hub answers (directly or through a redirect to a storage bridge) with the file's bytes.
"""

from __future__ import absolute_import, annotations, division, print_function

__metaclass__ = type

import fnmatch
import hashlib
import json
import os
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from email.utils import parsedate_to_datetime

MARKER = ".llmops-snapshot.json"
PARTIAL_DIR = ".llmops-partial"
CHUNK = 1 << 20
USER_AGENT = "llmops.sglang-hf_snapshot/1"


RETRY_STATUSES = (408, 429, 500, 502, 503, 504)
BACKOFF_BASE = 1.0
BACKOFF_MAX = 30.0
RETRY_AFTER_MAX = 300.0


class HubError(Exception):
    def __init__(self, msg, status=None, code=None, retry_after=None):
        super().__init__(msg)
        self.status = status
        self.code = code
        self.retry_after = retry_after

    def retryable(self):
        """429, 5xx and network errors (no status) are worth another try; other answers are final."""
        return self.status is None or self.status in RETRY_STATUSES


def retry_delay(exc, attempt):
    """Seconds to wait before try ``attempt`` (1-based): the server's Retry-After (seconds or an HTTP date) when it
    sent one (at most RETRY_AFTER_MAX), else exponential backoff 1, 2, 4 ... BACKOFF_MAX."""
    value = getattr(exc, "retry_after", None)
    if value:
        value = value.strip()
        if value.isdigit():
            return min(float(value), RETRY_AFTER_MAX)
        try:
            return min(max(0.0, parsedate_to_datetime(value).timestamp() - time.time()), RETRY_AFTER_MAX)
        except (TypeError, ValueError, IndexError, OverflowError):
            pass
    return min(BACKOFF_BASE * (2 ** max(0, attempt - 1)), BACKOFF_MAX)


def access_hint(exc):
    """What to do about a 401/403 from the hub (listing or download), or ''."""
    if exc.status in (401, 403) and exc.code == "GatedRepo":
        return (
            " The repository is gated: accept its terms on the hub with the account of the token, and set the token"
            " (model_hf_token)."
        )
    if exc.status == 401:
        return " Check the repository id and the token."
    if exc.status == 403:
        return " The token has no read access to this repository."
    return ""


# ---------------------------------------------------------------------------------------------------------------------
# Pure helpers
# ---------------------------------------------------------------------------------------------------------------------
def _norm_patterns(patterns):
    out = []
    for p in patterns or []:
        out.append(p + "*" if p.endswith("/") else p)
    return out


def filter_paths(paths, allow_patterns=None, ignore_patterns=None):
    """huggingface_hub's filter_repo_objects: keep a path if it matches an allow pattern (all when none) and no
    ignore pattern. A pattern ending in '/' matches everything below that folder."""
    allow = _norm_patterns(allow_patterns)
    ignore = _norm_patterns(ignore_patterns)
    out = []
    for p in paths:
        if allow and not any(fnmatch.fnmatch(p, a) for a in allow):
            continue
        if ignore and any(fnmatch.fnmatch(p, i) for i in ignore):
            continue
        out.append(p)
    return out


def expected_digest(entry):
    """('sha256', hex) for LFS files (the LFS oid), ('git-sha1', hex) otherwise (the git blob oid)."""
    lfs = entry.get("lfs")
    if lfs and lfs.get("oid"):
        oid = lfs["oid"]
        return "sha256", oid.split(":", 1)[1] if oid.startswith("sha256:") else oid
    return "git-sha1", entry["oid"]


def new_hasher(kind, size):
    if kind == "sha256":
        return hashlib.sha256()
    h = hashlib.sha1()
    h.update(b"blob %d\0" % size)
    return h


def hash_file(path, kind, size, hasher=None, limit=None):
    """Hash ``path`` (first ``limit`` bytes) into ``hasher`` (a new one of ``kind`` when None); returns the hasher."""
    h = hasher or new_hasher(kind, size)
    left = limit
    with open(path, "rb") as f:
        while left is None or left > 0:
            b = f.read(CHUNK if left is None else min(CHUNK, left))
            if not b:
                break
            h.update(b)
            if left is not None:
                left -= len(b)
    return h


def safe_relpath(path):
    """Reject listing paths that would escape the destination."""
    if not path or path.startswith("/") or "\\" in path or any(part in ("", ".", "..") for part in path.split("/")):
        raise HubError("the hub listed an unsafe path %r" % path)
    if path.split("/")[0] in (MARKER, PARTIAL_DIR):
        raise HubError("the hub listed a path that collides with this module's own files: %r" % path)
    return path


def read_env_value(path, name):
    """Value of ``name`` in a systemd EnvironmentFile (KEY=VALUE, optional double or single quotes); None if absent."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
    except OSError:
        return None
    for raw in lines:
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        key, sep, value = line.partition("=")
        if not sep or key.strip() != name:
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            return re.sub(r"\\(.)", r"\1", value[1:-1])
        if len(value) >= 2 and value[0] == value[-1] == "'":
            return value[1:-1]
        return value
    return None


def load_marker(dest):
    try:
        with open(os.path.join(dest, MARKER), encoding="utf-8") as f:
            data = json.load(f)
        return data if isinstance(data, dict) and "commit" in data and "files" in data else None
    except (OSError, ValueError):
        return None


def marker_matches(marker, repo_id, repo_type, revision, *, allow, ignore):
    if not marker:
        return False
    return (
        marker.get("repo_id") == repo_id
        and marker.get("repo_type", "model") == repo_type
        and revision in (marker.get("revision"), marker.get("commit"))
        and list(marker.get("allow_patterns") or []) == list(allow or [])
        and list(marker.get("ignore_patterns") or []) == list(ignore or [])
    )


COMMIT_RE = re.compile(r"^[0-9a-f]{40}\Z")


def find_snapshot(root, repo_id, repo_type, revision, *, allow, ignore):
    """In a root of one directory per commit (ROOT/COMMIT), the directory of a complete snapshot for ``revision``.

    A 40-hex revision names its own directory. For a branch or tag, the newest marker (its mtime) whose repository,
    revision and patterns match - the last snapshot downloaded for it; None when no marker matches.
    """
    if COMMIT_RE.match(revision or ""):
        names = [revision]
    else:
        try:
            names = [n for n in os.listdir(root) if COMMIT_RE.match(n)]
        except OSError:
            return None
    found = []
    for name in names:
        dest = os.path.join(root, name)
        marker = load_marker(dest)
        if (
            marker_matches(marker, repo_id, repo_type, revision, allow=allow, ignore=ignore)
            and marker["commit"] == name
        ):
            found.append((os.stat(os.path.join(dest, MARKER)).st_mtime_ns, dest))
    return max(found)[1] if found else None


def check_local(dest, marker, rehash=False):
    """Problems of a marked snapshot on disk (missing files, wrong sizes, wrong hashes): a list of strings."""
    problems = []
    for rel, info in sorted(marker["files"].items()):
        path = os.path.join(dest, rel)
        try:
            size = os.path.getsize(path)
        except OSError:
            problems.append("%s is missing" % rel)
            continue
        if size != info["size"]:
            problems.append("%s has %d bytes, expected %d" % (rel, size, info["size"]))
            continue
        if rehash:
            got = hash_file(path, info["kind"], size).hexdigest()
            if got != info["digest"]:
                problems.append("%s has %s %s, expected %s" % (rel, info["kind"], got, info["digest"]))
    return problems


def free_bytes(path):
    p = os.path.abspath(path)
    while not os.path.exists(p):
        p = os.path.dirname(p)
    st = os.statvfs(p)
    return st.f_bavail * st.f_frsize


def human(n):
    n = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return ("%d %s" % (n, unit)) if unit == "B" else ("%.2f %s" % (n, unit))
        n /= 1024.0
    return "%.2f TiB" % n


# ---------------------------------------------------------------------------------------------------------------------
# HTTP
# ---------------------------------------------------------------------------------------------------------------------
class _SameHostAuthRedirect(urllib.request.HTTPRedirectHandler):
    """Follow redirects, but send the Authorization header only to the scheme and host that were asked (never to a
    CDN, never over plain HTTP after https)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: PLR0917 (urllib's signature)
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None and urllib.parse.urlsplit(newurl)[:2] != urllib.parse.urlsplit(req.full_url)[:2]:
            for k in list(new.headers):
                if k.lower() == "authorization":
                    del new.headers[k]
        return new


class HubClient:
    def __init__(self, endpoint, token=None, timeout=60, validate_certs=True, repo_type="model", *, retries=3):
        self.endpoint = endpoint.rstrip("/")
        self.retries = retries
        self.sleep = time.sleep
        self.ssl_context = None
        self.token = token or None
        self.timeout = timeout
        self.repo_type = repo_type
        handlers = [_SameHostAuthRedirect()]
        if not validate_certs:
            import ssl

            ctx = ssl.create_default_context()
            ctx.check_hostname = False
            ctx.verify_mode = ssl.CERT_NONE
            self.ssl_context = ctx
            handlers.append(urllib.request.HTTPSHandler(context=ctx))
        self.opener = urllib.request.build_opener(*handlers)
        self.requests = 0

    def _headers(self, extra=None):
        h = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        h.update(extra or {})
        return h

    def open(self, url, headers=None):
        """GET with retries (429/5xx/network, honouring Retry-After) up to self.retries."""
        attempt = 0
        while True:
            try:
                return self._open_once(url, headers)
            except HubError as exc:
                attempt += 1
                if not exc.retryable() or attempt > self.retries:
                    raise
                self.sleep(retry_delay(exc, attempt))

    def _open_once(self, url, headers=None):
        self.requests += 1
        req = urllib.request.Request(url, headers=self._headers(headers), method="GET")
        try:
            return self.opener.open(req, timeout=self.timeout)
        except urllib.error.HTTPError as exc:
            code = exc.headers.get("X-Error-Code") if exc.headers else None
            message = exc.headers.get("X-Error-Message") if exc.headers else None
            raise HubError(
                "%s answered HTTP %d%s%s"
                % (url, exc.code, " (%s)" % code if code else "", ": %s" % message if message else ""),
                status=exc.code,
                code=code,
                retry_after=exc.headers.get("Retry-After") if exc.headers else None,
            ) from None
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise HubError("cannot reach %s: %s" % (url, getattr(exc, "reason", exc))) from None

    def _api(self):
        return "%s/api/%s" % (self.endpoint, "datasets" if self.repo_type == "dataset" else "models")

    def _json(self, url):
        with self.open(url) as resp:
            body = resp.read()
            link = resp.headers.get("Link")
        try:
            return json.loads(body), link
        except ValueError:
            raise HubError(
                "%s did not answer JSON (is %s a Hugging Face hub endpoint?)" % (url, self.endpoint)
            ) from None

    def resolve(self, repo_id, revision):
        """The 40-hex commit of ``revision``."""
        if re.fullmatch(r"[0-9a-f]{40}", revision):
            return revision
        url = "%s/%s/revision/%s" % (self._api(), repo_id, urllib.parse.quote(revision, safe=""))
        data, _ = self._json(url)
        sha = data.get("sha") if isinstance(data, dict) else None
        if not sha:
            raise HubError("%s did not return a commit sha for %s@%s" % (url, repo_id, revision))
        # The commit names the snapshot's directory: anything but 40 lowercase hex digits (an absolute path, "..")
        # would write outside the model directory.
        if not isinstance(sha, str) or not COMMIT_RE.match(sha):
            raise HubError(
                "expected a 40-hex commit from %s for %s@%s, found %r; check the endpoint (a Hugging Face hub API)"
                % (url, repo_id, revision, str(sha)[:80])
            )
        return sha

    def tree(self, repo_id, commit):
        """Every file entry of the commit (follows Link rel=next pagination)."""
        url = "%s/%s/tree/%s?recursive=true&expand=false" % (self._api(), repo_id, commit)
        entries = []
        pages = 0
        while url:
            data, link = self._json(url)
            if not isinstance(data, list):
                raise HubError("%s did not return a file list" % url)
            entries.extend(e for e in data if e.get("type") == "file")
            url = None
            pages += 1
            if link and pages < 10000:
                m = re.search(r'<([^>]+)>\s*;\s*rel="?next"?', link)
                url = m.group(1) if m else None
        return entries

    def file_url(self, repo_id, commit, path):
        prefix = "datasets/" if self.repo_type == "dataset" else ""
        return "%s/%s%s/resolve/%s/%s" % (self.endpoint, prefix, repo_id, commit, urllib.parse.quote(path))
