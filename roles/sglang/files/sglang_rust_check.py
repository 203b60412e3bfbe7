# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
# Managed by llmops.sglang (roles/sglang). What a source build of an SGLang checkout's compiled (Rust/PyO3)
# extensions needs, read from the checkout and the build host; prints one JSON object, changes nothing.
#
#   python3 sglang_rust_check.py CHECKOUT INDEX_URL TIMEOUT
#
# From the checkout (upstream's build files): the Rust workspace rust/Cargo.toml, its toolchain channel
# (rust/rust-toolchain.toml), whether a crate builds protobuf code (tonic-build/prost-build in a Cargo.toml) without
# vendoring protoc (protoc-bin-vendored), and whether python/setup.py honours SGLANG_BUILD_RUST_EXTS. From the host:
# cargo and rustc (PATH, then ~/.cargo/bin), their versions, a C compiler, protoc, and whether the crates index
# (INDEX_URL, crates.io's sparse index by default) answers within TIMEOUT seconds.
import json
import os
import re
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path


def version_of(cmd):
    try:
        out = subprocess.run([cmd, "--version"], capture_output=True, text=True, timeout=30, check=False).stdout
    except OSError:
        return None
    m = re.search(r"(\d+\.\d+(?:\.\d+)?)", out)
    return m.group(1) if m else None


def tool(name):
    found = shutil.which(name)
    if found:
        return found
    home = Path(os.path.expanduser("~")) / ".cargo" / "bin" / name
    return str(home) if home.is_file() else None


def reachable(url, timeout):
    try:
        with urllib.request.urlopen(urllib.request.Request(url.rstrip("/") + "/config.json"), timeout=timeout) as r:
            return r.status < 400, None
    except Exception as exc:  # any failure is the finding, reported in one line
        return False, " ".join((f"{type(exc).__name__}: {exc}").split())


def main():
    checkout, index_url, timeout = Path(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    rust = checkout / "rust"
    manifests = sorted(rust.glob("**/Cargo.toml")) if rust.is_dir() else []
    texts = [m.read_text(errors="replace") for m in manifests]
    channel = None
    toolchain = rust / "rust-toolchain.toml"
    if toolchain.is_file():
        m = re.search(r'^\s*channel\s*=\s*"([^"]+)"', toolchain.read_text(), re.M)
        channel = m.group(1) if m else None
    protobuf = any(re.search(r"\b(tonic-build|prost-build)\b", t) for t in texts)
    vendored = any("protoc-bin-vendored" in t for t in texts)
    setup_py = checkout / "python" / "setup.py"
    pyproject = checkout / "python" / "pyproject.toml"
    declared = any(
        p.is_file() and re.search(r"setuptools[-_]rust", p.read_text(errors="replace")) for p in (setup_py, pyproject)
    )
    cargo, rustc = tool("cargo"), tool("rustc")
    ok, why = reachable(index_url, timeout) if index_url else (True, None)
    print(
        json.dumps(
            {
                "workspace": (rust / "Cargo.toml").is_file(),
                "crates": len(manifests),
                "declared": bool(declared),
                "switch": setup_py.is_file() and "SGLANG_BUILD_RUST_EXTS" in setup_py.read_text(errors="replace"),
                "channel": channel,
                "cargo": cargo and version_of(cargo),
                "rustc": rustc and version_of(rustc),
                "cc": bool(tool("cc") or tool("gcc")),
                "protoc_needed": protobuf and not vendored,
                "protoc": bool(tool("protoc")),
                "index_url": index_url,
                "index_reachable": ok,
                "index_error": why,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
