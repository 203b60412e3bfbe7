#!/usr/bin/env python3
# ruff: noqa: UP031 - %-formatting kept for the report lines
"""make conformance: check the SGLang versions table against the real releases on PyPI.

For every ``sglang`` release from 0.4.4 (``--oldest``) to the newest that ``pip index versions sglang`` lists, the
wheel is downloaded once (``pip download sglang==X --no-deps``) into the shared cache, its ``sglang/srt`` sources are
parsed with ``ast`` and every string/f-string is rendered as a template (``{expr:spec}`` for the formatted parts).
Then, for each entry of ``plugins/module_utils/sglang_versions.py``:

* the entry's ``probe`` must be found in exactly the releases of its window [first, last] (checked releases only);
* its ``source`` (``file:line``) must hold a matching template in the release ``first`` (or the oldest checked);
* each launch flag in ``FLAGS`` must exist in exactly its window;

and every template of a start-up/failure family the table knows (``FAMILIES``) must be matched by some probe or be
listed in ``IGNORED`` with its reason. Exit 1 on any mismatch, 2 when a download fails.

    python scripts/sglang_conformance.py [--cache DIR] [--oldest 0.4.4] [--offline] [--suggest]
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
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))
sys.path.insert(0, ROOT)

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_versions as V  # noqa: E402

CACHE = os.environ.get("SGLANG_RELEASES_CACHE", "/var/cache/llmops-sglang-releases")
INDEX_VERSION = 1

# Template families the grammar reads: a template starting like this is a start-up/failure line.
FAMILIES = re.compile(
    r"^(?:Load weight (?:begin|end)|(?:KV Cache|\{cache_name\}) (?:is allocated|skipped)|Memory pool end"
    r"|Capture [a-z ]*(?:cuda|CUDA) graph (?:begin|end|failed|bs)|Capture \{capture_name\}|Init parallel"
    r"|Capturing (?:batches|num tokens)|Init torch distributed|max_total_num_tokens="
    r"|The server is fired up|Not enough memory|The memory capacity is unbalanced|Post-capture KV sizing"
    r"|Loaded weights leave|Piecewise CUDA [Gg]raph failed|Use sliding window memory pool|Mamba Cache is allocated"
    r"|Capture prefill CUDA graph failed|Fail when using backend)"
)
# Sources that are not the CUDA server a deployment runs.
EXCLUDED = re.compile(r"/(?:hardware_backend|npu|xpu|hpu|musa|cpu_graph_runner|multimodal_gen|test)/|cpu_graph_runner")
# Templates of a known family that the grammar deliberately does not read (with the reason).
IGNORED = {
    r"^Capture cuda graph num tokens": "piecewise token list (0.5.x), informational",
    r"^Capturing num tokens": "piecewise tqdm progress, read as progress only",
    r"^Load weight end\. (?:(?:elapsed|type)=)?$": "first literal of a split f-string (the full template is checked)",
    r"^Init parallel (?:ends\. elapsed=)?$": "first literal of a split f-string",
    r"^(?:KV Cache|\{cache_name\}) is allocated\. $": "first literal of a split f-string",
    r"^Load weight begin\. avail mem=$": "first literal of a split f-string",
    r"^Memory pool end\. avail mem=$": "first literal of a split f-string",
    r"^Init torch distributed ends\. (?:mem usage|elapsed)=$": "first literal of a split f-string",
    r"^KV Cache is allocated\. (?:#tokens|dtype): $": "first literal of a split f-string",
    r"^Capture [a-z ]*(?:cuda|CUDA) graph (?:begin|end)\. [^{]*$": "first literal of a split f-string",
    r"^Capture [a-z ]*(?:cuda|CUDA) graph failed: $": "first literal of a split f-string",
    r"^Capture \{capture_name\} CUDA graph (?:begin|end)\. $": "first literal of a split f-string",
    r"^Capturing batches \((?:bs|avail_mem)=$": "first literal of a split f-string",
    r"^Not enough memory": "any 'Not enough memory' text is read by kv_not_enough",
    r"^max_total_num_tokens=$": "first literal of a split f-string",
    r"^Use sliding window memory pool": "hybrid pool sizes, read by swa_pool",
    r"^Mamba Cache is allocated": "read by mamba_pool",
}


def vkey(v):
    return V.vkey(v)


def releases(oldest):
    out = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "sglang"], capture_output=True, text=True, check=False
    ).stdout
    m = re.search(r"Available versions: (.*)", out)
    if not m:
        sys.exit("conformance: expected `pip index versions sglang` to list releases, found none; check the network")
    vers = [v.strip() for v in m.group(1).split(",")]
    return sorted(
        (v for v in vers if re.match(r"^\d+\.\d+\.\d+(\.post\d+)?$", v) and vkey(v) >= vkey(oldest)), key=vkey
    )


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


def templates(wheel, cache):
    """[(path, line, template)] of a wheel's sglang/srt sources (cached next to the wheel)."""
    ip = os.path.join(cache, ".templates", "%s.v%d.json" % (os.path.basename(wheel), INDEX_VERSION))
    if os.path.exists(ip):
        with open(ip) as fh:
            return json.load(fh)
    out = []
    with zipfile.ZipFile(wheel) as z:
        for n in z.namelist():
            if not (n.startswith("sglang/srt/") and n.endswith(".py")) or "/models/" in n:
                continue
            src = z.read(n).decode("utf-8", "replace")
            try:
                tree = ast.parse(src)
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                t = render(node)
                if t and len(t) >= 8:
                    out.append([n, node.lineno, t[:400]])
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


def check(versions, index, suggest, wheels=None, cache=CACHE):
    errors = []
    probes = {e["id"]: re.compile(e["probe"]) for e in V.ENTRIES if e["probe"] and not e["probe"].startswith("so:")}
    for e in V.ENTRIES:
        if not e["probe"]:
            continue
        if e["probe"].startswith("so:"):  # a string of the compiled Rust server, not a Python template
            hits = {v: binary_hits(wheels[v], e["probe"][3:], cache) for v in versions}
        else:
            rx = probes[e["id"]]
            hits = {v: [(p, n) for p, n, t in index[v] if rx.search(t) and not EXCLUDED.search(p)] for v in versions}
        present = {v for v, h in hits.items() if h}
        want = {v for v in versions if in_window(v, e["first"], e["last"])}
        if present != want:
            errors.append(
                "entry %s: table says %s, the releases print it in %s"
                % (e["id"], V.window_label(*(vkey(x) if x else d for x, d in ((e["first"], V.LOWEST),
                                                                             (e["last"], V.HIGHEST)))),
                   runs(versions, present))
            )  # fmt: skip
        first_checked = e["first"] if e["first"] and vkey(e["first"]) >= vkey(versions[0]) else versions[0]
        if suggest:
            h = hits.get(first_checked) or []
            print("%-26s observed %-40s source %s" % (e["id"], runs(versions, present), "%s:%d" % h[0] if h else "-"))
        if e["source"] and ":" in e["source"] and not e["probe"].startswith("so:"):
            path, line = e["source"].rsplit(":", 1)
            if (path, int(line)) not in hits.get(first_checked, []):
                errors.append("entry %s: source %s does not hold the template in %s" % (e["id"], e["source"],
                                                                                       first_checked))  # fmt: skip
    for flag, first, last in V.FLAGS:
        # a literal "--flag" in the parser, or (0.5.20+) the dataclass field the parser derives it from
        rx = re.compile("^(?:%s|%s)$" % (re.escape(flag), re.escape(flag[2:].replace("-", "_"))))
        present = {v for v in versions if any(rx.search(t) for p, n, t in index[v] if "server_args" in p or
                                              "arg_groups" in p)}  # fmt: skip
        want = {v for v in versions if in_window(v, first, last)}
        if present != want:
            seen = runs(versions, present)
            errors.append("flag %s: table says %s-%s, the releases accept it in %s" % (flag, first, last, seen))
    ignored = [re.compile(k) for k in IGNORED]
    unknown = {}
    for v in versions:
        for p, n, t in index[v]:
            if EXCLUDED.search(p) or not FAMILIES.search(t):
                continue
            if any(rx.search(t) for rx in probes.values()) or any(rx.search(t) for rx in ignored):
                continue
            unknown.setdefault(t[:120], []).append("%s %s:%d" % (v, p, n))
    for t, where in sorted(unknown.items()):
        errors.append("unknown start-up line %r (first in %s, %d releases)" % (t, where[0], len(where)))
    return errors


def main(argv=None):
    ap = argparse.ArgumentParser(prog="sglang-conformance")
    ap.add_argument("--cache", default=CACHE)
    ap.add_argument("--oldest", default=V.OLDEST_CHECKED)
    ap.add_argument("--offline", action="store_true", help="use the cached wheels only")
    ap.add_argument("--suggest", action="store_true", help="print each entry's observed window and source")
    args = ap.parse_args(argv)
    os.makedirs(args.cache, exist_ok=True)
    have = cached_wheels(args.cache)
    if args.offline:
        versions = sorted((v for v in have if vkey(v) >= vkey(args.oldest)), key=vkey)
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
    index = {}
    for v in versions:
        index[v] = templates(have[v], args.cache)
    errors = check(versions, index, args.suggest, have, args.cache)
    print("conformance: %d releases (%s .. %s), %d table entries, %d flags" % (len(versions), versions[0],
                                                                               versions[-1], len(V.ENTRIES),
                                                                               len(V.FLAGS)))  # fmt: skip
    for e in errors:
        print("FAIL " + e)
    print("conformance: %s" % ("passed" if not errors else "%d mismatches" % len(errors)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
