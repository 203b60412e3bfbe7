# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""The benchmark after ready: SGLang's own client's command line, what it writes, and the verdict against the host's
own baseline. This file owns that knowledge; the ``llmops.sglang.sglang_bench`` module runs the client and keeps the
state file.

The client is SGLang's ``python -m sglang.bench_serving`` from the served venv. It is run with
``--dataset-name random-ids``: random token ids, fixed lengths (``--random-range-ratio 1.0``), a fixed seed - the
``random`` dataset downloads the ShareGPT file from the hub first, ``random-ids`` reads nothing but the model's
tokenizer. It appends one JSON object per run to ``--output-file`` (the keys of :data:`FIGURES` are the ones SGLang
writes there; tests/unit/test_sglang_bench.py checks both against the real release's source).

The state file (one per host) keeps, per benchmark key (build set, model commit and the benchmark's own settings),
the first figures that passed (the baseline) and the latest, and which key ran last::

    {"schema": 1, "last": KEY, "runs": {KEY: {"baseline": FIGURES, "latest": FIGURES, "build_set": ..,
                                               "model_commit": .., "settings": {...}}}}

A run is judged against the baseline of its own key, or - the first run of a key, e.g. a roll to a new build set -
against the baseline of the key that ran before it on this host with the same settings. Slower means an output
throughput more than ``max_slowdown_pct`` percent below the reference's. Pure functions, no Ansible imports.
"""

from __future__ import annotations

import hashlib
import json

SCHEMA = 1

#: The figures kept from the client's output line (each is a key of SGLang's result object).
FIGURES = (
    "completed",
    "duration",
    "request_throughput",
    "output_throughput",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_itl_ms",
    "p99_itl_ms",
)

#: The benchmark's settings and their bounds (requests, tokens per request, concurrency, seed).
SETTINGS = {
    "num_prompts": (1, 1000),
    "input_len": (1, 131072),
    "output_len": (1, 16384),
    "max_concurrency": (1, 1024),
    "seed": (0, 2**31 - 1),
}


class BenchError(ValueError):
    """A bad setting or an output line that is not the client's; the message is the one-line error."""


def check_settings(settings):
    """The settings as ints, each within its bounds; BenchError names the first one that is not."""
    out = {}
    for name, (low, high) in SETTINGS.items():
        value = settings.get(name)
        if isinstance(value, bool) or not isinstance(value, (int, str)) or not str(value).isdigit():
            raise BenchError("expected %s as a whole number from %d to %d; found %r; fix the server_bench settings"
                             % (name, low, high, value))  # fmt: skip
        value = int(value)
        if not low <= value <= high:
            raise BenchError("expected %s from %d to %d; found %d; fix the server_bench settings"
                             % (name, low, high, value))  # fmt: skip
        out[name] = value
    return out


#: The inventory variable of each setting, after its prefix (server_bench_prompts, router_bench_concurrency, ...).
VARIABLES = {
    "num_prompts": "prompts",
    "input_len": "input_len",
    "output_len": "output_len",
    "max_concurrency": "concurrency",
    "seed": "seed",
}

#: What each variable is set to when it is wrong (the role defaults' values).
EXAMPLES = {"prompts": 32, "input_len": 256, "output_len": 128, "concurrency": 8, "seed": 1, "timeout": 300}


def problems(values, prefix):
    """One sentence (expected, found, do this) per wrong benchmark variable of a role, before anything changes.

    ``values``: {variable suffix: value} with the suffixes of VARIABLES plus ``timeout`` and ``max_slowdown_pct``, as
    the inventory gave them; ``prefix``: the role's (``server_bench``, ``router_bench``)."""
    out = []
    bounds = {VARIABLES[k]: b for k, b in SETTINGS.items()}
    bounds["timeout"] = (1, 86400)
    for suffix, (low, high) in bounds.items():
        value = values.get(suffix)
        text = str(value).strip() if isinstance(value, (int, str)) and not isinstance(value, bool) else None
        if text is None or not text.isdigit() or not low <= int(text) <= high:
            out.append("Expected %s_%s to be a whole number from %d to %d; found '%s'. Set it to %s%s."
                       % (prefix, suffix, low, high, value, EXAMPLES[suffix],
                          " (the benchmark after a restart must stay short)" if high < 86400 and text and text.isdigit()
                          and int(text) > high else ""))  # fmt: skip
    pct = values.get("max_slowdown_pct")
    try:
        check_slowdown(pct if not isinstance(pct, bool) else None)
    except (BenchError, TypeError, ValueError):
        out.append("Expected %s_max_slowdown_pct to be a percentage above 0 and below 100; found '%s'. Set it to 15."
                   % (prefix, pct))  # fmt: skip
    return out


def client_argv(python, base_url, tokenizer, settings, output_file):
    """The client's command line: no key in it (the client reads OPENAI_API_KEY from its environment)."""
    s = check_settings(settings)
    return [
        python, "-m", "sglang.bench_serving",
        "--backend", "sglang",
        "--base-url", base_url.rstrip("/"),
        "--tokenizer", tokenizer,
        "--dataset-name", "random-ids",
        "--random-input-len", str(s["input_len"]),
        "--random-output-len", str(s["output_len"]),
        "--random-range-ratio", "1.0",
        "--num-prompts", str(s["num_prompts"]),
        "--max-concurrency", str(s["max_concurrency"]),
        "--seed", str(s["seed"]),
        "--output-file", output_file,
        "--disable-tqdm",
    ]  # fmt: skip


def read_output(text):
    """The figures of the last JSON line the client appended; BenchError when there is none or it lacks a figure."""
    lines = [line for line in (text or "").splitlines() if line.strip()]
    if not lines:
        raise BenchError("expected a JSON line in the benchmark's output file; found none; the client ended before it "
                         "finished (its output above says why)")  # fmt: skip
    try:
        row = json.loads(lines[-1])
    except ValueError:
        raise BenchError(
            "expected the benchmark's output file to end with a JSON line; found %r" % lines[-1][:80]
        ) from None
    if not isinstance(row, dict):
        raise BenchError("expected a JSON object in the benchmark's output file; found %s" % type(row).__name__)
    missing = [k for k in FIGURES if not isinstance(row.get(k), (int, float)) or isinstance(row.get(k), bool)]
    if missing:
        raise BenchError("expected the figures %s in the benchmark's output line; found none for %s; the client is "
                         "not SGLang's bench_serving" % (", ".join(FIGURES), ", ".join(missing)))  # fmt: skip
    return {k: round(float(row[k]), 3) if k != "completed" else int(row[k]) for k in FIGURES}


def check_slowdown(max_slowdown_pct):
    """The allowed slowdown as a float above 0 and below 100; BenchError otherwise."""
    if not 0 < float(max_slowdown_pct) < 100:
        raise BenchError("expected max_slowdown_pct above 0 and below 100; found %r; fix server_bench_max_slowdown_pct"
                         % (max_slowdown_pct,))  # fmt: skip
    return float(max_slowdown_pct)


def settings_id(settings):
    """A short, stable name of the benchmark's settings (a baseline is only comparable to the same settings)."""
    s = check_settings(settings)
    return hashlib.sha256(json.dumps(s, sort_keys=True).encode()).hexdigest()[:12]


def key_of(build_set, model_commit, settings):
    return "%s|%s|%s" % (build_set or "-", model_commit or "-", settings_id(settings))


def empty_state():
    return {"schema": SCHEMA, "last": None, "runs": {}}


def load_state(text):
    """The state from the file's text; an unreadable or foreign file starts afresh (it holds figures, no secret)."""
    try:
        state = json.loads(text) if text else None
    except ValueError:
        state = None
    if not isinstance(state, dict) or state.get("schema") != SCHEMA or not isinstance(state.get("runs"), dict):
        return empty_state()
    return state


def reference(state, key):
    """(key, baseline figures) the run of ``key`` is compared with, or (None, None) for a host's first run."""
    runs = state.get("runs") or {}
    own = runs.get(key) or {}
    if isinstance(own.get("baseline"), dict):
        return key, own["baseline"]
    last = state.get("last")
    before = runs.get(last) or {}
    if last and last.split("|")[-1] == key.split("|")[-1] and isinstance(before.get("baseline"), dict):
        return last, before["baseline"]
    return None, None


def due(state, build_set, model_commit, settings):
    """Whether a run that did not restart SGLang benchmarks it: only when this key's latest run did not pass."""
    entry = (state.get("runs") or {}).get(key_of(build_set, model_commit, settings)) or {}
    return (entry.get("latest") or {}).get("verdict") in ("slower", "failed")


def _describe(key):
    build_set, commit, _ = [*key.split("|"), "-", "-", "-"][:3]
    return "build set %s, model commit %s" % (build_set, commit[:12])


def judge(
    figures,
    state,
    *,
    build_set,
    model_commit,
    settings,
    max_slowdown_pct,
    host,
    stamp,
    knob="server_bench_max_slowdown_pct",
):
    """The verdict of one run and the state to write.

    Returns {verdict, message, slowdown_pct, reference, reference_key, key, state}; verdict is ``baseline`` (the
    host's first run of these settings: recorded, nothing to compare), ``ok``, ``slower`` (output throughput more than
    max_slowdown_pct below the reference) or ``failed`` (a request did not complete). A slower or failed run is kept
    as the key's latest, never as a baseline. ``knob``: the variable a slower run's message tells the operator to
    raise (the router's benchmark has its own).
    """
    s = check_settings(settings)
    max_slowdown_pct = check_slowdown(max_slowdown_pct)
    key = key_of(build_set, model_commit, s)
    ref_key, ref = reference(state, key)
    slowdown = None
    if figures["completed"] < s["num_prompts"]:
        verdict = "failed"
        message = ("%s: expected all %d benchmark requests to complete; found %d; SGLang answers with errors "
                   "(its log says why)" % (host, s["num_prompts"], figures["completed"]))  # fmt: skip
    elif ref is None:
        verdict, message = "baseline", None
    else:
        base = float(ref.get("output_throughput") or 0)
        slowdown = round(100.0 * (1 - figures["output_throughput"] / base), 1) if base > 0 else 0.0
        if slowdown > float(max_slowdown_pct):
            verdict = "slower"
            changed = (
                "what changed on the host since"
                if ref_key == key
                else "what changed: it runs %s, before it %s" % (_describe(key), _describe(ref_key))
            )
            message = (
                "%s: expected SGLang to serve within %g %% of its baseline (%s); found an output throughput of %.1f "
                "tok/s, %.1f %% below the baseline's %.1f tok/s (median TTFT %.1f ms against %.1f, median ITL %.2f ms "
                "against %.2f); check the GPUs' health and %s, or raise %s"
                % (host, float(max_slowdown_pct), _describe(ref_key), figures["output_throughput"], slowdown, base,
                   figures["median_ttft_ms"], float(ref.get("median_ttft_ms") or 0), figures["median_itl_ms"],
                   float(ref.get("median_itl_ms") or 0), changed, knob)
            )  # fmt: skip
        else:
            verdict, message = "ok", None
    new = json.loads(json.dumps(state)) if state else empty_state()
    runs = new.setdefault("runs", {})
    entry = runs.setdefault(key, {"build_set": build_set or None, "model_commit": model_commit or None, "settings": s})
    entry["latest"] = dict(figures, at=stamp, verdict=verdict)
    if verdict in ("baseline", "ok") and not isinstance(entry.get("baseline"), dict):
        entry["baseline"] = dict(figures, at=stamp)
    if verdict in ("baseline", "ok"):
        new["last"] = key
    return {
        "verdict": verdict,
        "message": message,
        "slowdown_pct": slowdown,
        "reference": ref,
        "reference_key": ref_key,
        "key": key,
        "state": new,
    }
