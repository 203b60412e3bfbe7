"""Write valid, reproducible wheels by hand (zip with fixed timestamps, sorted entries, correct RECORD)."""

import base64
import hashlib
import zipfile
from pathlib import Path

ZIP_DATE = (2025, 1, 1, 0, 0, 0)


def record_hash(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_wheel(out_dir: Path, name: str, version: str, files: dict, *, summary: str, requires=(), tag="py3-none-any"):
    """files: {relative path: bytes|str}. Returns the wheel path."""
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    metadata = [
        "Metadata-Version: 2.1",
        f"Name: {name}",
        f"Version: {version}",
        f"Summary: {summary}",
        "Requires-Python: >=3.9",
    ]
    metadata += [f"Requires-Dist: {r}" for r in requires]
    entries = {k: (v.encode() if isinstance(v, str) else v) for k, v in files.items()}
    entries[f"{info}/METADATA"] = ("\n".join(metadata) + "\n").encode()
    purelib = "true" if tag.endswith("-any") else "false"
    entries[f"{info}/WHEEL"] = (
        f"Wheel-Version: 1.0\nGenerator: llmops-sim-mirrors\nRoot-Is-Purelib: {purelib}\nTag: {tag}\n"
    ).encode()
    record = "".join(f"{p},{record_hash(d)},{len(d)}\n" for p, d in sorted(entries.items()))
    record += f"{info}/RECORD,,\n"
    entries[f"{info}/RECORD"] = record.encode()
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{dist}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for p in sorted(entries, key=lambda p: (p.startswith(info), p)):
            zi = zipfile.ZipInfo(p, ZIP_DATE)
            zi.external_attr = 0o644 << 16
            zi.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(zi, entries[p])
    return path
