"""Minimal wheels and PEP 503 indexes made in a test: a wheel that carries only its metadata (name, version,
requirements, one tag) and a file:// simple index of a set of wheels, for pip's own resolver to read without a
network. Fixed zip time stamps, so the same wheel is the same bytes."""

from __future__ import annotations

import re
import zipfile
from pathlib import Path


def make_wheel(directory: Path, name: str, version: str, requires=(), tag="py3-none-any") -> Path:
    dist = re.sub(r"[-.]+", "_", name)
    directory.mkdir(parents=True, exist_ok=True)
    wheel = directory / f"{dist}-{version}-{tag}.whl"
    info = f"{dist}-{version}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires
    )
    root_is_purelib = "true" if tag.endswith("-none-any") else "false"
    files = {
        f"{dist}/__init__.py": f"__version__ = {version!r}\n",
        f"{info}/METADATA": metadata,
        f"{info}/WHEEL": f"Wheel-Version: 1.0\nRoot-Is-Purelib: {root_is_purelib}\nTag: {tag}\n",
    }
    files[f"{info}/RECORD"] = "".join(f"{n},,\n" for n in [*files, f"{info}/RECORD"])
    with zipfile.ZipFile(wheel, "w") as z:
        for n, text in files.items():
            z.writestr(zipfile.ZipInfo(n, (2025, 1, 1, 0, 0, 0)), text)
    return wheel


def make_index(root: Path, wheels, subdir="simple") -> str:
    """A simple index (root/SUBDIR/PROJECT/index.html) of ``wheels``; returns its file:// URL."""
    by_project = {}
    for w in wheels:
        project = re.sub(r"[-_.]+", "-", Path(w).name.split("-")[0]).lower()
        by_project.setdefault(project, []).append(Path(w))
    for project, files in by_project.items():
        d = root / subdir / project
        d.mkdir(parents=True, exist_ok=True)
        links = "".join(f'<a href="{f.resolve().as_uri()}">{f.name}</a>\n' for f in sorted(files))
        (d / "index.html").write_text(f"<html><body>\n{links}</body></html>\n")
    return (root / subdir).resolve().as_uri() + "/"
