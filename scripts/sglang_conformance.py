#!/usr/bin/env python3
# ruff: noqa: UP031 - %-formatting kept for the report lines
"""make conformance: check the SGLang versions table against every SGLang release on the package index.

Every ``sglang`` release that ``pip index versions sglang`` lists (post releases included; the index is the one this
host's pip configuration names) is downloaded once as a wheel (``pip download sglang==X --no-deps``) into the shared
cache. Its ``sglang/`` sources (not ``models/`` and the paths in ``EXCLUDED``) are parsed with ``ast``: every string and
f-string becomes a template (``{expr:spec}`` for the formatted parts; implicit concatenations are one template), marked
``log`` when it is the message of a logger call (``logger.info/warning/error/...``, ``log_info_on_rank0``, ``print``)
and ``raise`` when it is an exception's message; every call is indexed by its dotted name. Then, for each entry of
``plugins/module_utils/sglang_versions.py``:

* its ``probe`` must be found in exactly the releases of its window [first, last] (None: the first / the newest
  release on the index); a probe is a regex on templates (after the 0.1.17-0.2.13 ``[gpu_id=N] `` tag, as the
  engine reads them), ``in:PATH_REGEX::REGEX`` on the templates of some files, ``call:REGEX`` on
  ``path::dotted.call.name`` of every call (the call through which SGLang prints or causes a third party's text, e.g.
  ``uvicorn.run``), or ``so:REGEX`` on the strings of the compiled Rust server;
* its ``cite`` -- ``file:line`` in the wheel of the window's first release and in the wheel of its last -- must hold
  a match of the probe in those two releases;
* each launch flag in ``FLAGS`` must exist in exactly its window (from ``FLAGS_CHECKED_FROM`` on);

and every logged or raised template of a start-up/failure family (``FAMILIES``, matched whatever its case) must be
matched by some probe or be listed in ``IGNORED`` with its reason. Exit 1 on any mismatch, 2 when a download fails.
The last lines give the table-wide count of entries with both citations.

    python scripts/sglang_conformance.py [--cache DIR] [--oldest X] [--offline] [--suggest]
"""

import argparse
import ast
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import warnings
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
sys.path.insert(0, ROOT)

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_versions as V  # noqa: E402

CACHE = os.environ.get("SGLANG_RELEASES_CACHE", "/var/cache/llmops-sglang-releases")
INDEX_VERSION = 2
FLAGS_CHECKED_FROM = "0.4.4"

# Template families the grammar reads: a logged or raised template starting like this (any case) is a start-up or
# failure line, and an entry must match it.
FAMILIES = re.compile(
    r"^(?:Load weight (?:begin|end)|(?:KV Cache|\{cache_name\}) (?:is allocated|skipped)|Memory pool end"
    r"|Capture\b.*\bgraph\b|Capturing (?:batches|num tokens)|Init (?:parallel|torch distributed|nccl)"
    r"|max_total_num_tokens=|The server is fired up|Not enough memory|The memory capacity is unbalanced"
    r"|Post-capture KV sizing|Loaded weights leave|Piecewise CUDA graph failed|Use sliding window memory pool"
    r"|Mamba Cache is allocated|Fail when using backend|SWA pool|Hybrid \(mamba)",
    re.I,
)
# Sources that are not the CUDA server a deployment runs.
EXCLUDED = re.compile(
    r"/(?:hardware_backend|npu|xpu|hpu|musa|mlx|test|tests|multimodal_gen|lang|bench\w*|eval\w*|debug_utils)/"
    r"|cpu_graph_runner|/models/|/bench_\w+\.py$"
)
# 0.1.17-0.2.13 put the GPU tag inside the message ("[gpu_id={gpu_id}] Load weight begin. ..."); the engine reads the
# message after it, so the probes do too.
_GPU_TAG = re.compile(r"^\[gpu(?:_id)?=\{[^}]*\}\] ")
# Templates of a known family that the grammar deliberately does not read (with the reason).
IGNORED = {
    r"^Capture cuda graph num tokens": "piecewise token list (0.5.x), informational",
    r"^Capturing num tokens": "piecewise tqdm progress, read as progress only",
    r"^Not enough memory": "any 'Not enough memory' text is read by kv_not_enough",
    r"^Capture (?:cpu|CPU) graph": "the CPU graph runner (not a CUDA server)",
}
LOG_FUNCS = {
    "info", "warning", "warn", "error", "exception", "debug", "critical", "log_info_on_rank0", "print",
    "print_info_once", "print_warning_once",
}  # fmt: skip
_VERSION = re.compile(r"^\d+\.\d+\.\d+(\.post\d+)?$")


def vkey(v):
    return V.vkey(v)


def releases(oldest=None):
    """Every release the host's package index lists (posts included), oldest first."""
    out = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "sglang"], capture_output=True, text=True, check=False
    ).stdout
    m = re.search(r"Available versions: (.*)", out)
    if not m:
        sys.exit("conformance: expected `pip index versions sglang` to list releases, found none; check the network")
    vers = [v.strip() for v in m.group(1).split(",")]
    return sorted((v for v in vers if _VERSION.match(v) and (not oldest or vkey(v) >= vkey(oldest))), key=vkey)


def cached_wheels(cache):
    out = {}
    for p in glob.glob(os.path.join(cache, "sglang-*.whl")):
        out[os.path.basename(p).split("-")[1]] = p
    return out


def download(version, cache):
    tmp = tempfile.mkdtemp(prefix=".tmp-conformance-", dir=cache)
    try:
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "sglang==" + version, "--no-deps", "--only-binary",
             ":all:", "-d", tmp],
            check=True, capture_output=True,
        )  # fmt: skip
        for p in glob.glob(os.path.join(tmp, "sglang-*.whl")):
            os.replace(p, os.path.join(cache, os.path.basename(p)))  # atomic: nobody reads half a wheel
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def render(node):
    """A string or f-string as a template; None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        out = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                out.append(str(v.value))
            elif isinstance(v, ast.FormattedValue):
                try:
                    e = ast.unparse(v.value)
                except Exception:
                    e = "?"
                spec = ":" + (render(v.format_spec) or "") if v.format_spec is not None else ""
                out.append("{" + e + spec + "}")
        return "".join(out)
    return None


def dotted(node):
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def _message_nodes(arg):
    """The string node(s) a message argument is built from: "..." , f"...", "..." % x, "...".format(x)."""
    if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Mod):
        return [arg.left]
    if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Attribute) and arg.func.attr == "format":
        return [arg.func.value]
    return [arg]


def scan(src):
    """(templates [(line, template, kind)], calls [(line, dotted name)]) of one Python source."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = ast.parse(src)
    kinds, calls = {}, []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = dotted(node.func)
            if name:
                calls.append((node.lineno, name))
                if name.rsplit(".", 1)[-1] in LOG_FUNCS:
                    for a in node.args[:2]:
                        for m in _message_nodes(a):
                            kinds[id(m)] = "log"
        elif isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
            for m in _message_nodes(node.exc.args[0]):
                kinds.setdefault(id(m), "raise")
    templates = []
    stack = [tree]
    while stack:  # strings, without descending into an f-string's own parts
        n = stack.pop()
        if isinstance(n, (ast.Constant, ast.JoinedStr)):
            t = render(n)
            if t and len(t) >= 8:
                templates.append((n.lineno, t[:400], kinds.get(id(n), "")))
            continue
        stack.extend(ast.iter_child_nodes(n))
    return templates, calls


def index(wheel, cache):
    """{"t": [[path, line, template, kind]], "c": [[path, line, call]]} of a wheel (cached beside it)."""
    ip = os.path.join(cache, ".templates", "%s.v%d.json" % (os.path.basename(wheel), INDEX_VERSION))
    if os.path.exists(ip):
        with open(ip) as fh:
            return json.load(fh)
    out = {"t": [], "c": []}
    with zipfile.ZipFile(wheel) as z:
        for n in z.namelist():
            if not (n.startswith("sglang/") and n.endswith(".py")) or EXCLUDED.search(n):
                continue
            try:
                templates, calls = scan(z.read(n).decode("utf-8", "replace"))
            except (SyntaxError, ValueError):
                continue
            out["t"] += [[n, line, t, kind] for line, t, kind in templates]
            out["c"] += [[n, line, c] for line, c in calls]
    os.makedirs(os.path.dirname(ip), exist_ok=True)
    with open(ip + ".tmp", "w") as fh:
        json.dump(out, fh)
    os.replace(ip + ".tmp", ip)
    return out


def binary_hits(wheel, probe, cache):
    """[(path, 0)] of the wheel's compiled Rust extensions whose bytes match ``probe`` (cached per wheel)."""
    ip = os.path.join(cache, ".templates", "%s.so-strings.json" % os.path.basename(wheel))
    if os.path.exists(ip):
        with open(ip) as fh:
            blobs = json.load(fh)
    else:
        blobs = []
        with zipfile.ZipFile(wheel) as z:
            for n in z.namelist():
                if n.startswith("sglang/srt/rust_extensions/") and ".so" in n:
                    text = re.findall(rb"[\x20-\x7e]{8,}", z.read(n))
                    blobs.append([re.sub(r"\.cpython-[^.]+", "", n), b"\n".join(text).decode("ascii")])
        os.makedirs(os.path.dirname(ip), exist_ok=True)
        with open(ip + ".tmp", "w") as fh:
            json.dump(blobs, fh)
        os.replace(ip + ".tmp", ip)
    rx = re.compile(probe)
    return [(n, 0) for n, text in blobs if rx.search(text)]


def runs(versions, present):
    """'0.4.4-0.5.8.post1, 0.5.10' from the releases where present."""
    out, start, prev = [], None, None
    for v in versions:
        if v in present:
            start = start or v
            prev = v
        elif start:
            out.append(start if start == prev else "%s-%s" % (start, prev))
            start = None
    if start:
        out.append(start if start == prev else "%s-%s" % (start, prev))
    return ", ".join(out) or "none"


def in_window(v, first, last):
    return (first is None or vkey(v) >= vkey(first)) and (last is None or vkey(v) <= vkey(last))


def window_ends(e, versions):
    """The first and the last checked release of an entry's window."""
    inside = [v for v in versions if in_window(v, e["first"], e["last"])]
    return (inside[0], inside[-1]) if inside else (None, None)


def hits_of(e, v, index, wheels, cache):
    probe = e["probe"]
    if probe.startswith("so:"):
        return binary_hits(wheels[v], probe[3:], cache)
    if probe.startswith("call:"):  # regex on "path::dotted.call.name"
        rx = re.compile(probe[5:])
        return [(p, n) for p, n, c in index[v]["c"] if not EXCLUDED.search(p) and rx.search(p + "::" + c)]
    path_rx = None
    if probe.startswith("in:"):  # "in:PATH_REGEX::TEMPLATE_REGEX": a template of the files PATH_REGEX names
        path, _, probe = probe[3:].partition("::")
        path_rx = re.compile(path)
    rx = re.compile(probe)
    return [(p, n) for p, n, t, _k in index[v]["t"] if not EXCLUDED.search(p) and (path_rx is None or
            path_rx.search(p)) and (rx.search(t) or rx.search(_GPU_TAG.sub("", t)))]  # fmt: skip


def check(versions, index, *, suggest=False, wheels=None, cache=CACHE, entries=None, flags=None):
    """Every mismatch between the table and the releases, as sentences (empty: conformant)."""
    errors = []
    entries = V.ENTRIES if entries is None else entries
    flags = getattr(V, "FLAGS", ()) if flags is None else flags
    for e in entries:
        if not e.get("probe"):
            errors.append("entry %s: no probe, so no release can confirm it" % e["id"])
            continue
        hits = {v: hits_of(e, v, index, wheels, cache) for v in versions}
        present = {v for v, h in hits.items() if h}
        want = {v for v in versions if in_window(v, e["first"], e["last"])}
        if present != want:
            first = e["first"] or versions[0]
            said = "%s-%s" % (first, e["last"]) if e["last"] else "%s+" % first
            errors.append(
                "entry %s: table says %s, the releases print it in %s" % (e["id"], said, runs(versions, present))
            )
        ends = window_ends(e, versions)
        if suggest:
            obs = sorted(present, key=vkey)
            shown = [(v, "%s:%d" % hits[v][0]) if hits.get(v) else (v, "-") for v in (obs[:1] + obs[-1:])]
            print("%-26s observed %-44s cite %s" % (e["id"], runs(versions, present), shown))
        cite = e.get("cite") or ()
        if len(cite) != 2:
            errors.append("entry %s: expected file:line for its first and last release, found %r" % (e["id"], cite))
            continue
        for release, where in zip(ends, cite, strict=True):
            if release is None:
                continue
            path, _, line = where.rpartition(":")
            if not line.isdigit() or (path, int(line)) not in {tuple(h) for h in hits.get(release, [])}:
                errors.append("entry %s: cite %s does not hold the probe in %s" % (e["id"], where, release))
    checked = [v for v in versions if vkey(v) >= vkey(FLAGS_CHECKED_FROM)]
    for flag, first, last in flags:
        # a literal "--flag" in the parser, or (0.5.20+) the dataclass field the parser derives it from
        rx = re.compile("^(?:%s|%s)$" % (re.escape(flag), re.escape(flag[2:].replace("-", "_"))))
        present = {v for v in checked if any(rx.search(t) for p, n, t, k in index[v]["t"] if "server_args" in p or
                                             "arg_groups" in p)}  # fmt: skip
        want = {v for v in checked if in_window(v, first, last)}
        if present != want:
            errors.append(
                "flag %s: table says %s-%s, the releases accept it in %s" % (flag, first, last, runs(checked, present))
            )
    errors += unmatched(versions, index, entries)
    return errors


def unmatched(versions, index, entries):
    """Logged or raised templates of a known family (any case) that no entry's probe and no IGNORED rule matches."""
    probes = [re.compile(e["probe"].rpartition("::")[2] if e["probe"].startswith("in:") else e["probe"])
              for e in entries if e.get("probe") and not e["probe"].startswith(("call:", "so:"))]  # fmt: skip
    ignored = [re.compile(k) for k in IGNORED]
    found = {}
    for v in versions:
        for p, n, t, kind in index[v]["t"]:
            if kind not in ("log", "raise") or EXCLUDED.search(p) or not FAMILIES.search(t):
                continue
            msg = _GPU_TAG.sub("", t)
            if any(rx.search(msg) for rx in probes) or any(rx.search(msg) for rx in ignored):
                continue
            found.setdefault(t[:120], []).append("%s %s:%d" % (v, p, n))
    return [
        "unmatched start-up line %r (first in %s, %d releases)" % (t, where[0], len(where))
        for t, where in sorted(found.items())
    ]


def cited(entries=None):
    """(entries with a file:line for both ends of their window, all entries)."""
    entries = V.ENTRIES if entries is None else entries
    ok = [e for e in entries if len(e.get("cite") or ()) == 2 and all(re.search(r"\S:\d+$", c) for c in e["cite"])]
    return len(ok), len(entries)


def main(argv=None):
    ap = argparse.ArgumentParser(prog="sglang-conformance")
    ap.add_argument("--cache", default=CACHE)
    ap.add_argument("--oldest", default=None, help="check from this release on (default: the first on the index)")
    ap.add_argument("--offline", action="store_true", help="use the cached wheels only")
    ap.add_argument("--suggest", action="store_true", help="print each entry's observed window and citations")
    args = ap.parse_args(argv)
    os.makedirs(args.cache, exist_ok=True)
    have = cached_wheels(args.cache)
    if args.offline:
        versions = sorted((v for v in have if not args.oldest or vkey(v) >= vkey(args.oldest)), key=vkey)
    else:
        versions = releases(args.oldest)
        for v in versions:
            if v not in have:
                print("conformance: downloading sglang %s" % v, flush=True)
                try:
                    download(v, args.cache)
                except subprocess.CalledProcessError as exc:
                    print("conformance: pip download sglang==%s failed: %s" % (v, exc.stderr.decode()[-300:]))
                    return 2
        have = cached_wheels(args.cache)
    idx = {}
    for v in versions:
        idx[v] = index(have[v], args.cache)
    errors = check(versions, idx, suggest=args.suggest, wheels=have, cache=args.cache)
    print("conformance: %d releases (%s .. %s, post releases included), %d table entries, %d flags"
          % (len(versions), versions[0], versions[-1], len(V.ENTRIES), len(getattr(V, "FLAGS", ()))))  # fmt: skip
    for e in errors:
        print("FAIL " + e)
    both, total = cited()
    print("conformance: %d of %d entries cite file:line for the first and the last release of their window"
          % (both, total))  # fmt: skip
    print("conformance: %s" % ("passed" if not errors else "%d mismatches" % len(errors)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
