"""The stand-in's log lines are the real releases' f-strings, not the product grammar's idea of them.

Every ``logger.info``/``logger.warning`` (and ``log_info_on_rank0``) template of the stand-in's runner, pool and graph
code must appear, as a template, in the sglang wheel of a release whose format family it claims: 0.5.9 for the
default family, 0.5.14 for the 0.5.14 family. Templates are compared after the same normalisation on both sides:
implicit concatenations joined, every ``{expression}`` replaced by ``{}`` with its conversion and format spec kept.

The wheels come from the release cache (``SGLANG_RELEASES``, default /var/cache/llmops-sglang-releases) or are fetched
into it (real_releases.wheel); the test fails, never skips, when they cannot be had. It never reads the product's
grammar or memory code.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import warnings
import zipfile
from pathlib import Path

import pytest
from real_releases import wheel as release_wheel

ROOT = Path(__file__).resolve().parents[2]
STANDIN = ROOT / "sim" / "sglang" / "python" / "sglang" / "srt"
STANDIN_FILES = [
    "model_executor/model_runner.py",
    "model_executor/cuda_graph_runner.py",
    "mem_cache/memory_pool.py",
]
LOG_CALLS = {"info", "warning", "error", "log_info_on_rank0"}
# family -> the release whose wheel states its lines
FAMILY_RELEASE = {"main": "0.5.9", "0.5.14": "0.5.14"}


def _template(node) -> str | None:
    """An f-string or string literal as a template: {expr!c:spec} -> {!c:spec}."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if not isinstance(node, ast.JoinedStr):
        return None
    out = []
    for part in node.values:
        if isinstance(part, ast.Constant):
            out.append(str(part.value))
        else:
            conv = "" if part.conversion == -1 else "!" + chr(part.conversion)
            spec = ""
            if part.format_spec is not None:
                spec = ":" + (_template(part.format_spec) or "")
            out.append("{" + conv + spec + "}")
    return "".join(out)


def templates(source: str) -> set[str]:
    """Templates of every log call in a Python source (the message argument, string or f-string)."""
    found = set()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        tree = ast.parse(source)
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
        if name not in LOG_CALLS:
            continue
        for arg in node.args:
            t = _template(arg)
            if t is not None:
                found.add(t)
    return found


# A file can hold a log call only if one of the names is followed by "(": the others are not parsed (two thirds of the
# wheel's files; parsing them all took most of this module's time). On 0.5.9 and 0.5.14 the templates found are the
# same with and without this filter.
MAY_LOG = re.compile(r"\b(?:" + "|".join(sorted(LOG_CALLS)) + r")\s*\(")


# The templates of a wheel, kept beside the simulation's other caches (never in git): keyed by the wheel's bytes and
# this file's own bytes, so a change to either parses the wheel again.
TEMPLATE_CACHE = Path(os.environ.get("SIM_CACHE", "/var/cache/llmops-sim")) / "standin-release-templates"


def wheel_templates(version: str) -> set[str]:
    wheels = [release_wheel(version)]
    key = hashlib.sha256(wheels[0].read_bytes() + Path(__file__).read_bytes()).hexdigest()
    cached = TEMPLATE_CACHE / f"{wheels[0].name}.{key[:16]}.json"
    if cached.is_file():
        return set(json.loads(cached.read_text()))
    found: set[str] = set()
    with zipfile.ZipFile(wheels[0]) as zf:
        for info in zf.infolist():
            if info.filename.startswith("sglang/srt/") and info.filename.endswith(".py"):
                source = zf.read(info).decode("utf-8")
                if not MAY_LOG.search(source):
                    continue
                try:
                    found |= templates(source)
                except SyntaxError:
                    continue
    try:
        TEMPLATE_CACHE.mkdir(parents=True, exist_ok=True)
        tmp = cached.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(sorted(found)))
        tmp.replace(cached)
    except OSError:
        pass  # a read-only cache only costs the parse next time
    return found


def standin_templates() -> dict[str, set[str]]:
    return {f: templates((STANDIN / f).read_text()) for f in STANDIN_FILES}


@pytest.fixture(scope="module")
def real():
    return {family: wheel_templates(version) for family, version in FAMILY_RELEASE.items()}


def test_every_standin_runner_line_is_a_real_release_line(real):
    known = set().union(*real.values())
    missing = {
        f: sorted(t for t in ts if t not in known and not t.startswith("[sim]"))
        for f, ts in standin_templates().items()
    }
    missing = {f: ts for f, ts in missing.items() if ts}
    releases = ", ".join(FAMILY_RELEASE.values())
    listing = "\n".join(f"{f}: {t!r}" for f, ts in missing.items() for t in ts)
    assert not missing, f"stand-in lines no real release ({releases}) prints:\n{listing}"


@pytest.mark.parametrize(
    ("family", "line"),
    [
        ("main", "Load weight end. elapsed={:.2f} s, type={}, dtype={}, avail mem={:.2f} GB, mem usage={:.2f} GB."),
        ("main", "Capture draft cuda graph begin. This can take up to several minutes. avail mem={:.2f} GB"),
        ("0.5.14", "Capture {} CUDA graph begin. backend={}, num_tokens={}, avail mem={:.2f} GB"),
        (
            "0.5.14",
            "Capture draft decode CUDA graph begin. backend={}, num_tokens_per_bs={}, bs={}, avail mem={:.2f} GB",
        ),
    ],
)
def test_the_release_states_the_lines_the_stand_in_relies_on(real, family, line):
    # a guard against a normalisation that matches everything: these must be found in their own release only
    assert line in real[family]
