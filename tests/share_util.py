"""The model role's share server (roles/model/files/model_share.py) started as the seed host runs it, for tests: its
per-run secret and allow-list in a 0600 config file (the role hands it over with systemd's LoadCredential=), never in
argv; a 0600 token file for the receivers (hf_snapshot's peer_token_file)."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

from events import stop_process

SHARE = Path(__file__).resolve().parents[1] / "roles" / "model" / "files" / "model_share.py"


def write_private(path: Path, text: str) -> Path:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def start_share(directory, workdir, *, allow=("127.0.0.1",), token=None, argv_prefix=(), **config):
    """The share on 127.0.0.1, any free port. Returns the process with .port, .url, .token, .token_file, .config."""
    workdir = Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    token = token or secrets.token_urlsafe(32)
    cfg = write_private(workdir / "share.json", json.dumps({"token": token, "allow": list(allow), **config}))
    env = {**os.environ, "LLMOPS_SHARE_CONFIG": str(cfg)}
    argv = [sys.executable, *argv_prefix, str(SHARE), str(directory), "127.0.0.1", "0"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    line = proc.stdout.readline()
    if " port " not in line:
        proc.kill()
        _, err = proc.communicate(timeout=10)
        raise AssertionError(f"the share did not start: {line!r} {err[-2000:]}")
    proc.port = int(line.split(" port ")[1])
    proc.url = f"http://127.0.0.1:{proc.port}"
    proc.token = token
    proc.token_file = str(write_private(workdir / "share.token", token + "\n"))
    proc.config = cfg
    return proc


def stop_share(proc):
    stop_process(proc)
    for stream in (proc.stdout, proc.stderr):
        if stream:
            stream.close()


def mark_verified(directory, commit, names):
    """Record ``names`` as verified for ``commit`` the way hf_snapshot does during a download (verified.json)."""
    directory = Path(directory)
    partial = directory / ".llmops-partial"
    partial.mkdir(exist_ok=True)
    files = {}
    for rel in names:
        st = (directory / rel).stat()
        files[rel] = {"digest": "0" * 64, "stamp": {"size": st.st_size, "mtime_ns": st.st_mtime_ns}}
    (partial / "verified.json").write_text(json.dumps({"commit": commit, "files": files}))
