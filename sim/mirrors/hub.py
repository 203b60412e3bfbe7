"""Hugging Face hub stand-in: repository store (build side) and the HTTP routes of the hub protocol (serve side).

On disk, one directory per repository:

    hub/<org>/<name>/repo.json     {"id", "gated", "refs": {branch or tag: sha}, "commits": {sha: {"date",
                                    "message", "files": [{"path", "size", "oid", "lfs"?}]}}}
    hub/<org>/<name>/<sha>/...     the files of each commit (unchanged files are hard links)

A directory without repo.json is served as a single commit (branch "main") of the files it holds; its listing is
computed on first use and kept for the life of the server.
"""

import fnmatch
import hashlib
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
from email.utils import formatdate
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote

from common import EPOCH, REPO_ROOT, Stamp, fingerprint, write

LFS_PATTERNS = ["*.safetensors", "*.bin", "*.pt", "*.pth", "*.gguf", "*.h5", "*.msgpack", "*.onnx"]
LFS_MIN_SIZE = 10 * 1024 * 1024
DEFAULT_MODELS = [
    # (repo id, kind for sim/models/make_model.py, gated)
    ("sim-org/GLM-5-NVFP4", "glm5-nvfp4", False),
    ("sim-org/Meta-Llama-3-8B-Instruct", "llama3-8b", True),
]
GATED_MESSAGE = (
    "Access to model {id} is restricted. You must have access to it and be authenticated to access it. Please log in."
)
GATED_403 = (
    "Access to model {id} is restricted and you are not in the authorized list. Visit https://huggingface.co/{id} to "
    "ask for access."
)


# ----------------------------------------------------------------------------------------------------------- hashing


def git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def _lfs_pointer(sha256: str, size: int) -> bytes:
    # Same shape as a Git LFS pointer; the spec line is a neutral stand-in (no client parses it).
    return f"version lfs-pointer-spec-v1\noid sha256:{sha256}\nsize {size}\n".encode()


def file_entry(path: Path, rel: str) -> dict:
    size = path.stat().st_size
    is_lfs = any(fnmatch.fnmatch(rel.rsplit("/", 1)[-1], p) for p in LFS_PATTERNS) or size >= LFS_MIN_SIZE
    if not is_lfs:
        return {"path": rel, "size": size, "oid": git_blob_oid(path.read_bytes())}
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    pointer = _lfs_pointer(h.hexdigest(), size)
    return {
        "path": rel,
        "size": size,
        "oid": git_blob_oid(pointer),
        "lfs": {"oid": h.hexdigest(), "size": size, "pointerSize": len(pointer)},
    }


def scan_files(root: Path, skip=("repo.json",)) -> list:
    entries = []
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and rel not in skip and not rel.startswith(".") and "/." not in rel:
            entries.append(file_entry(p, rel))
    return entries


def commit_sha(files, parent, message, date) -> str:
    blob = json.dumps(
        {"files": [(f["path"], f["oid"]) for f in files], "parent": parent, "message": message, "date": date},
        sort_keys=True,
    )
    return hashlib.sha1(blob.encode()).hexdigest()


# ------------------------------------------------------------------------------------------------------------ build


def tiny_model(dest: Path, seed: str, shard_mib=2):
    """A small but well-formed model directory (used when sim/models/make_model.py is not available)."""
    dest.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    write(
        dest / "config.json",
        json.dumps(
            {
                "architectures": ["LlamaForCausalLM"],
                "model_type": "llama",
                "hidden_size": 256,
                "num_hidden_layers": 2,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "vocab_size": 1024,
                "torch_dtype": "bfloat16",
            },
            indent=2,
        )
        + "\n",
    )
    write(dest / "generation_config.json", '{"do_sample": false, "max_new_tokens": 16}\n')
    write(dest / "tokenizer_config.json", '{"model_max_length": 8192, "tokenizer_class": "PreTrainedTokenizerFast"}\n')
    write(dest / "tokenizer.json", json.dumps({"version": "1.0", "model": {"type": "BPE", "vocab": {}}}) + "\n")
    weight_map = {}
    for i in (1, 2):
        name = f"model-{i:05d}-of-00002.safetensors"
        n = shard_mib * (1 << 20) // 2
        tensor = f"model.layers.{i - 1}.weight"
        header = json.dumps({tensor: {"dtype": "BF16", "shape": [n], "data_offsets": [0, 2 * n]}}).encode()
        header += b" " * (-len(header) % 8)
        write(dest / name, struct.pack("<Q", len(header)) + header + rng.randbytes(2 * n))
        weight_map[tensor] = name
    write(dest / "model.safetensors.index.json", json.dumps({"metadata": {}, "weight_map": weight_map}, indent=2))
    write(dest / "README.md", f"# {seed}\n\nTiny stand-in model for simulated nodes.\n")


def make_model_source(kind: str, dest: Path):
    script = REPO_ROOT / "sim" / "models" / "make_model.py"
    if script.exists():
        subprocess.run([sys.executable, str(script), kind, str(dest)], check=True, capture_output=True)
        return "make_model.py"
    tiny_model(dest, kind)
    return "tiny (sim/models/make_model.py not found)"


def publish_repo(hub_root: Path, repo_id: str, src: Path, gated=False):
    """Two commits: "v1.0" = the files of src, "main" = the same plus an updated README.md."""
    repo = hub_root / repo_id
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    commits, refs = {}, {}
    parent = None
    stage = repo / ".stage"
    shutil.copytree(src, stage)
    for n, (ref, message) in enumerate([("v1.0", "Initial upload"), ("main", "Update README.md")]):
        if n:
            readme = stage / "README.md"
            old = readme.read_text() if readme.exists() else ""
            readme.write_text(old + f"\nRevision {n + 1}: model card updated.\n")
        date = formatdate(EPOCH + 86400 * n, usegmt=True)
        files = scan_files(stage)
        sha = commit_sha(files, parent, message, date)
        tree = repo / sha
        for f in files:
            target = tree / f["path"]
            target.parent.mkdir(parents=True, exist_ok=True)
            prev = repo / parent / f["path"] if parent else None
            if prev and prev.exists() and prev.stat().st_size == f["size"] and file_entry(prev, f["path"]) == f:
                os.link(prev, target)
            else:
                shutil.copyfile(stage / f["path"], target)
        commits[sha] = {"date": date, "message": message, "parent": parent, "files": files}
        refs[ref] = sha
        parent = sha
    shutil.rmtree(stage)
    meta = {"id": repo_id, "gated": gated, "refs": refs, "commits": commits}
    write(repo / "repo.json", json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return {"refs": refs, "gated": gated, "files": [f["path"] for f in commits[refs["main"]]["files"]]}


def build(out: Path, models=None, force=False):
    """models: [(repo_id, kind_or_dir, gated)]; a kind is passed to sim/models/make_model.py."""
    models = models if models is not None else DEFAULT_MODELS
    hub_root = out / "hub"
    make_model = REPO_ROOT / "sim" / "models"
    inputs = [Path(m[1]) if Path(m[1]).is_dir() else m for m in models]
    stamp = Stamp(out, "hub", fingerprint(Path(__file__), make_model, models, *inputs))
    summary_file = out / "hub-summary.json"
    if not force and stamp.fresh(summary_file):
        return json.loads(summary_file.read_text()) | {"skipped": True}
    summary = {"root": str(hub_root), "repos": {}}
    for repo_id, source, gated in models:
        with tempfile.TemporaryDirectory(dir=out) as tmp:
            if Path(source).is_dir():
                src, origin = Path(source), "directory"
            else:
                src = Path(tmp) / "model"
                origin = make_model_source(source, src)
            info = publish_repo(hub_root, repo_id, src, gated)
        summary["repos"][repo_id] = info | {"source": origin}
    write(summary_file, json.dumps(summary, indent=2) + "\n")
    stamp.done()
    return summary


# ------------------------------------------------------------------------------------------------------------ serve


class HubStore:
    def __init__(self, root: Path):
        self.root = root
        self._cache = {}
        self._lock = threading.Lock()

    def repo(self, repo_id: str):
        d = self.root / repo_id
        if len(repo_id.split("/")) != 2 or ".." in repo_id or not d.is_dir():
            return None
        meta_file = d / "repo.json"
        key = (repo_id, meta_file.stat().st_mtime_ns if meta_file.exists() else None)
        with self._lock:
            if key in self._cache:
                return self._cache[key]
        if meta_file.exists():
            meta = json.loads(meta_file.read_text())
            meta["dir"] = d
            meta["flat"] = False
        else:
            files = scan_files(d)
            date = formatdate(EPOCH, usegmt=True)
            sha = commit_sha(files, None, "Upload", date)
            meta = {
                "id": repo_id,
                "gated": False,
                "refs": {"main": sha},
                "dir": d,
                "flat": True,
                "commits": {sha: {"date": date, "message": "Upload", "parent": None, "files": files}},
            }
        meta["by_path"] = {sha: {f["path"]: f for f in c["files"]} for sha, c in meta["commits"].items()}
        with self._lock:
            self._cache[key] = meta
        return meta

    @staticmethod
    def resolve(meta, rev: str):
        if rev in meta["refs"]:
            return meta["refs"][rev]
        if rev in meta["commits"]:
            return rev
        return None

    @staticmethod
    def file_path(meta, sha, rel):
        return meta["dir"] / rel if meta["flat"] else meta["dir"] / sha / rel


def _token(handler):
    auth = handler.headers.get("Authorization", "")
    return auth[7:].strip() if auth.lower().startswith("bearer ") else None


def _bad_token(handler):
    """The real hub answers 401 to any request that carries a token it does not know."""
    token = _token(handler)
    if token is not None and token not in handler.server.mirror.hub_tokens:
        return 401, {}, "Invalid credentials in Authorization header"
    return None


def _auth_error(handler, meta):
    """None if the request may download from the repo, else (status, headers, message). As on the real hub, a gated
    repository is listed openly; its files need a token (401 without one) whose account accepted the terms (403 for a
    known token that did not: --hub-token-no-access)."""
    bad = _bad_token(handler)
    if bad:
        return bad
    if not meta.get("gated"):
        return None
    token = _token(handler)
    if token is None:
        return 401, {"X-Error-Code": "GatedRepo"}, GATED_MESSAGE.format(id=meta["id"])
    if token in handler.server.mirror.hub_tokens_no_access:
        return 403, {"X-Error-Code": "GatedRepo"}, GATED_403.format(id=meta["id"])
    return None


def _error(handler, status, message, code=None, extra=None):
    headers = {"X-Error-Message": message}
    if code:
        headers["X-Error-Code"] = code
    headers.update(extra or {})
    handler.send_json({"error": message}, status, headers)


def _info(meta, sha):
    commit = meta["commits"][sha]
    return {
        "_id": hashlib.sha1(meta["id"].encode()).hexdigest()[:24],
        "id": meta["id"],
        "modelId": meta["id"],
        "author": meta["id"].split("/")[0],
        "sha": sha,
        "lastModified": "2025-01-01T00:00:00.000Z",
        "createdAt": "2025-01-01T00:00:00.000Z",
        "private": False,
        "gated": "manual" if meta.get("gated") else False,
        "disabled": False,
        "downloads": 0,
        "likes": 0,
        "tags": ["safetensors", "sim"],
        "library_name": "transformers",
        "siblings": [{"rfilename": f["path"]} for f in commit["files"]],
    }


def _tree_entries(meta, sha, prefix, recursive):
    files = meta["commits"][sha]["files"]
    prefix = prefix.strip("/")
    base = prefix + "/" if prefix else ""
    dirs, out = {}, []
    for f in files:
        if not f["path"].startswith(base):
            continue
        rest = f["path"][len(base) :]
        parts = rest.split("/")
        for k in range(1, len(parts)):
            d = base + "/".join(parts[:k])
            if recursive or k == 1:
                dirs.setdefault(d, hashlib.sha1(d.encode()).hexdigest())
        if recursive or len(parts) == 1:
            entry = {"type": "file", "oid": f["oid"], "size": f["size"], "path": f["path"]}
            if "lfs" in f:
                entry["lfs"] = f["lfs"]
            out.append(entry)
    out += [{"type": "directory", "oid": oid, "size": 0, "path": d} for d, oid in dirs.items()]
    return sorted(out, key=lambda e: e["path"])


def handle(handler, path: str, query: str, prefix: str):
    """Serve one hub request; path is relative to the hub root (starts with /), raw (still %-quoted)."""
    mirror = handler.server.mirror
    mirror.hub_pause()  # the latency setting: every hub and storage answer starts this much later
    parts = path.strip("/").split("/")
    method = handler.command
    if parts[:2] == ["api", "whoami-v2"]:
        auth = handler.headers.get("Authorization", "")
        if auth[7:].strip() in mirror.hub_tokens:
            return handler.send_json({"type": "user", "name": "sim-user", "auth": {"accessToken": {"role": "read"}}})
        return _error(handler, 401, "Invalid credentials in Authorization header")
    if parts[:2] == ["api", "models"] and len(parts) >= 4:
        repo_id = unquote(parts[2]) + "/" + unquote(parts[3])
        meta = mirror.hub.repo(repo_id)
        if meta is None:
            return _error(handler, 401, "Repository not found", "RepoNotFound")
        action = parts[4] if len(parts) > 4 else "revision"
        rev = unquote(parts[5]) if len(parts) > 5 else "main"
        sha = HubStore.resolve(meta, rev)
        if sha is None:
            return _error(handler, 404, f"Invalid rev id: {rev}", "RevisionNotFound")
        denied = _bad_token(handler)
        if denied:
            return _error(handler, denied[0], denied[2], extra=denied[1])
        if action == "revision":
            return handler.send_json(_info(meta, sha))
        if action == "tree":
            denied = _bad_token(handler)
            if denied:
                return _error(handler, denied[0], denied[2], extra=denied[1])
            q = parse_qs(query)
            recursive = q.get("recursive", ["false"])[0].lower() in ("1", "true")
            entries = _tree_entries(meta, sha, unquote("/".join(parts[6:])), recursive)
            cursor = int(q.get("cursor", ["0"])[0] or 0)
            size = int(q.get("limit", [str(mirror.hub_page_size)])[0])
            page = entries[cursor : cursor + size]
            headers = {}
            if cursor + size < len(entries):
                q2 = {k: v[0] for k, v in q.items()}
                q2["cursor"] = str(cursor + size)
                host = handler.headers.get("Host", f"{handler.server.server_address[0]}:{handler.server.server_port}")
                qs = "&".join(f"{k}={quote(v)}" for k, v in q2.items())
                headers["Link"] = f'<http://{host}{prefix}{path}?{qs}>; rel="next"'
            return handler.send_json(page, 200, headers)
        return _error(handler, 404, "Not found")
    if len(parts) >= 5 and parts[2] == "resolve":
        repo_id = unquote(parts[0]) + "/" + unquote(parts[1])
        meta = mirror.hub.repo(repo_id)
        if meta is None:
            return _error(handler, 401, "Repository not found", "RepoNotFound")
        denied = _auth_error(handler, meta)
        if denied:
            return _error(handler, denied[0], denied[2], extra=denied[1])
        rev = unquote(parts[3])
        sha = HubStore.resolve(meta, rev)
        if sha is None:
            return _error(handler, 404, f"Invalid rev id: {rev}", "RevisionNotFound")
        rel = unquote("/".join(parts[4:]))
        entry = meta["by_path"][sha].get(rel)
        if entry is None:
            return _error(handler, 404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": sha})
        headers = {"X-Repo-Commit": sha, "ETag": f'"{entry["oid"]}"'}
        if "lfs" in entry:
            # Like the real hub: an LFS file answers 302 to the storage host, with the object's sha256 and size in
            # X-Linked-Etag / X-Linked-Size (huggingface_hub reads them from the HEAD before following Location).
            oid = entry["lfs"]["oid"]
            # The storage host is another origin (the CDN listener's port), so clients drop Authorization for it.
            host = handler.headers.get("Host", handler.server.server_address[0]).rsplit(":", 1)[0]
            headers |= {
                "X-Linked-Etag": f'"{oid}"',
                "X-Linked-Size": str(entry["size"]),
                "Location": f"http://{host}:{mirror.cdn_port}/cdn-lfs/{quote(repo_id)}/{oid}/{quote(rel)}?sha={sha}",
            }
            return handler.send_body(302, b"", headers)
        headers["Content-Type"] = "application/octet-stream"
        return handler.send_file(
            HubStore.file_path(meta, sha, rel), headers, head=(method == "HEAD"), rate=mirror.hub_rate
        )
    if len(parts) >= 5 and parts[0] == "cdn-lfs":
        # The storage host a redirect points to: no Authorization needed (the real one is a signed URL).
        meta = mirror.hub.repo(unquote(parts[1]) + "/" + unquote(parts[2]))
        sha, rel = parse_qs(query).get("sha", [""])[0], unquote("/".join(parts[4:]))
        entry = meta and meta["by_path"].get(sha, {}).get(rel)
        if not entry or entry.get("lfs", {}).get("oid") != parts[3]:
            return handler.send_body(404, b"NoSuchKey\n")
        return handler.send_file(
            HubStore.file_path(meta, sha, rel),
            {"ETag": f'"{parts[3]}"', "Content-Type": "application/octet-stream"},
            head=(method == "HEAD"),
            rate=mirror.hub_rate,
        )
    return _error(handler, 404, "Not found")
