"""Helpers shared by the mirror generators: fixed timestamps, input fingerprints, subprocess calls."""

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO_ROOT = HERE.parent.parent

# 2025-01-01T00:00:00Z unless the caller pins another SOURCE_DATE_EPOCH.
EPOCH = int(os.environ.get("SOURCE_DATE_EPOCH", "1735689600"))
# Bump when the generators change in a way their inputs do not capture.
GENERATOR_VERSION = "1"


def run(cmd, cwd=None, env=None, stdin=None):
    """Run a command; raise with its output on failure; return stdout."""
    full_env = dict(os.environ)
    full_env["SOURCE_DATE_EPOCH"] = str(EPOCH)
    full_env["LC_ALL"] = "C.UTF-8"
    full_env["TZ"] = "UTC"
    if env:
        full_env.update(env)
    proc = subprocess.run(
        [str(c) for c in cmd], cwd=cwd, env=full_env, input=stdin, capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return proc.stdout


def fingerprint(*parts):
    """sha256 over strings, bytes, files and directory trees (sorted, with relative paths)."""
    h = hashlib.sha256(GENERATOR_VERSION.encode())
    for part in parts:
        if isinstance(part, Path):
            if part.is_dir():
                for p in sorted(part.rglob("*")):
                    if "__pycache__" in p.parts or p.name.endswith(".pyc"):
                        continue
                    if p.is_file():
                        h.update(str(p.relative_to(part)).encode() + b"\0")
                        h.update(p.read_bytes())
            elif part.is_file():
                h.update(part.read_bytes())
            else:
                h.update(b"<missing>" + str(part).encode())
        elif isinstance(part, bytes):
            h.update(part)
        else:
            h.update(json.dumps(part, sort_keys=True, default=str).encode())
        h.update(b"\1")
    return h.hexdigest()


class Stamp:
    """Skip a generator step when the fingerprint of its inputs matches the one written after its last success."""

    def __init__(self, out: Path, name: str, digest: str):
        self.path = out / ".stamps" / f"{name}.sha256"
        self.digest = digest

    def fresh(self, *outputs: Path) -> bool:
        if not self.path.exists() or self.path.read_text().strip() != self.digest:
            return False
        return all(o.exists() for o in outputs)

    def done(self):
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(self.digest + "\n")


def reset_dir(path: Path):
    if path.exists():
        shutil.rmtree(path)
    path.mkdir(parents=True)


def clamp_mtimes(root: Path, epoch: int = EPOCH):
    """Give every file and directory under root the fixed timestamp (for dpkg-deb, zip and tar)."""
    for p in sorted(root.rglob("*"), reverse=True):
        os.utime(p, (epoch, epoch), follow_symlinks=False)
    os.utime(root, (epoch, epoch))


def write(path: Path, text, mode=0o644):
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    path.chmod(mode)
    return path
