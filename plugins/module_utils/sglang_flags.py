# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""SGLang's command line and source layout, release by release: the one place that says which flag a release
spells how, where its SM120 extend-attention fix lives, and which compiled extensions its build makes.

Every window is (first, last, value, evidence): ``first``/``last`` are releases (None = open), and the evidence is
the ``file:line`` of the first and of the last release checked, inside that release's PyPI wheel (``sglang/...``;
the source tree has the same file under ``python/``), or the upstream pull request where the wheels cannot show it.
``tests/unit/test_sglang_flags_real_releases.py`` reads the wheels again (``sim/mirrors/sglang_cli.py`` for the
options) and fails when a window here disagrees with any release from 0.5.6 to the newest in the release cache.
The last release checked is ``NEWEST_CHECKED``; ``main`` (and any version above it) gets the newest window.

API (all take a release ``0.5.9``, ``v0.5.9``, ``0.5.10.post1``, a setuptools-scm version such as
``0.5.24.dev3+g1234abc`` -- the commit after the release it counts from -- or ``main``):

- ``sm120_fix(version)``: ``{"path", "carried", ...}`` -- the file of the tree (``python/...``) that holds the fix
  and whether the release has it (PR #14311, first released in 0.5.9). A build still checks the file's content.
- ``rust_extensions(version)``: the compiled extensions the release's wheel carries and what a source build needs.
- ``server_flag(version, option)`` / ``server_argv(version, values)``: the flags for the options the collection
  passes to ``sglang.launch_server``.
"""

from __future__ import annotations

__metaclass__ = type

import re

NEWEST_CHECKED = "0.5.23"
OLDEST_CHECKED = "0.5.6"
HIGHEST = (999, 0, 0, 0)

_REL = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?$")
_DEV = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?\.dev\d+(?:\+.*)?$")


class FlagError(ValueError):
    pass


def release_key(version):
    """Sort key of the release a version is built from: '0.5.9' -> (0, 5, 9, 0); 'main' -> the newest window.

    A setuptools-scm development version counts from the release before it: guess-next-dev turns
    ``v0.5.23-3-gabc`` into ``0.5.24.dev3+gabc`` and ``v0.5.10.post1-2-g...`` into ``0.5.10.post2.dev2+g...``, so the
    key is just below the named version (its tree is the earlier release's plus some commits)."""
    v = str(version).strip()
    if v == "main":
        return HIGHEST
    m = _REL.match(v)
    if m:
        return tuple(int(x or 0) for x in m.groups())
    m = _DEV.match(v)
    if m:
        key = tuple(int(x or 0) for x in m.groups())
        if key[3]:
            return (*key[:3], key[3] - 1, 999)
        if key[2]:
            return (*key[:2], key[2] - 1, 999)
        return (key[0], key[1] - 1, 999, 999) if key[1] else (key[0] - 1, 999, 999, 999)
    raise FlagError(
        "expected an SGLang release such as 0.5.9, v0.5.10.post1, a development version such as 0.5.24.dev3+gabc1234, "
        "or main; found %r" % (version,)
    )


def _key(release):
    return tuple(int(x or 0) for x in _REL.match(release).groups())


def _pick(windows, version, what):
    """The value of the newest window that starts at or before ``version``: windows are contiguous, so a commit
    between two releases has the layout of the release it counts from."""
    k = release_key(version)
    found = None
    for first, _last, value, _evidence in windows:
        if first is None or k >= _key(first):
            found = (value,)
    if found is None:
        raise FlagError("%s: no SGLang window covers %s" % (what, version))
    return found[0]


# -- the SM120 extend-attention fix (PR #14311) -----------------------------------------------------------------------
FIX_PR = "https://github.com/sgl-project/sglang/pull/14311"
FIX_FIRST = "0.5.9"
OLD_FIX_FILE = "python/sglang/srt/layers/attention/triton_ops/extend_attention.py"
NEW_FIX_FILE = "python/sglang/kernels/ops/attention/extend_attention.py"
# The line that proves the fix: the compute-capability-12 branch of _get_block_sizes_for_extend_attention.
FIX_MARKER = r"^[ \t]*(?:el)?if\b[^#\n]*CUDA_CAPABILITY\[0\]\s*==\s*12\b"

FIX_FILE_WINDOWS = (
    (
        None,
        "0.5.15.post1",
        OLD_FIX_FILE,
        "0.5.6 sglang/srt/layers/attention/triton_ops/extend_attention.py (def _get_block_sizes_for_extend_attention); "
        "0.5.15.post1 same file:78",
    ),
    ("0.5.16", None, NEW_FIX_FILE, "0.5.16 sglang/kernels/ops/attention/extend_attention.py:79; 0.5.23 same file:95"),
)
FIX_CARRIED_WINDOWS = (
    (
        None,
        "0.5.8.post1",
        False,
        "0.5.6 ... 0.5.8.post1 sglang/srt/layers/attention/triton_ops/extend_attention.py: no CUDA_CAPABILITY[0] == 12 "
        "branch",
    ),
    (
        FIX_FIRST,
        None,
        True,
        "0.5.9 sglang/srt/layers/attention/triton_ops/extend_attention.py:67; "
        "0.5.23 sglang/kernels/ops/attention/extend_attention.py:95",
    ),
)


def sm120_fix(version):
    """Where the SM120 fix lives in the tree of ``version`` and whether that release carries it.

    ``path`` is relative to the repository root (``python/...``), ``installed_path`` to site-packages. ``carried``
    is what the release shipped: a fork or a commit between releases may differ, so a build reads the file."""
    path = _pick(FIX_FILE_WINDOWS, version, "SM120 fix file")
    return {
        "path": path,
        "installed_path": path[len("python/") :],
        "carried": _pick(FIX_CARRIED_WINDOWS, version, "SM120 fix"),
        "first_release": FIX_FIRST,
        "pr": FIX_PR,
        "marker_regex": FIX_MARKER,
    }


# -- compiled (Rust/PyO3) extensions ----------------------------------------------------------------------------------
# The modules each release's wheel carries (its RECORD: the first and last release checked, line of the .so entry).
_GRPC_OLD = "sglang.srt.grpc._core"
_RX = "sglang.srt.rust_extensions."
RUST_EXTENSION_WINDOWS = (
    (None, "0.5.10.post1", (), "0.5.6 ... 0.5.10.post1: py3-none-any wheels, no .so in RECORD"),
    ("0.5.11", "0.5.15.post1", (_GRPC_OLD,), "0.5.11 sglang-0.5.11.dist-info/RECORD:1118; 0.5.15.post1 RECORD:1458"),
    ("0.5.16", "0.5.16", (_GRPC_OLD, "sglang.srt.multimodal._core"), "0.5.16 RECORD:1968,3268"),
    (
        "0.5.17",
        "0.5.17",
        (_GRPC_OLD, "sglang.srt.multimodal._core", "sglang.srt.server._core"),
        "0.5.17 RECORD:2091,3438,3555",
    ),
    ("0.5.18", "0.5.18", (_RX + "_grpc", _RX + "_multimodal", _RX + "_server"), "0.5.18 RECORD:3737-3739"),
    (
        "0.5.19",
        "0.5.21",
        ("sglang.srt.mem_cache.rust_tree_core.mem_cache", _RX + "_grpc", _RX + "_multimodal", _RX + "_server"),
        "0.5.19 RECORD:3494,4040-4042; 0.5.21 RECORD:4006,4605-4607",
    ),
    (
        "0.5.22",
        None,
        (
            "sglang.srt.mem_cache.rust_tree_core.mem_cache",
            _RX + "_bench",
            _RX + "_grpc",
            _RX + "_multimodal",
            _RX + "_server",
        ),
        "0.5.22 RECORD:4303,4918-4921; 0.5.23 RECORD:4718,5368-5371",
    ),
)
# What a source build of those extensions needs, from upstream's build files (none of them is in a wheel; from 0.5.11
# there is no sdist): python/pyproject.toml's build requirements name setuptools-rust, which runs cargo on the crates
# of the repository's rust/ workspace (PR #23278: "the setuptools-rust extension declared in python/pyproject.toml
# means sglang's wheel build requires rustc/cargo on PATH"); the gRPC crate compiles proto/ with tonic-build, which
# needs protoc unless the crate vendors it (protoc-bin-vendored); cargo --locked fetches the crates from crates.io.
# SGLANG_BUILD_RUST_EXTS=none skips them all (PR #30927, merged 2026-07-12, so first in 0.5.16 -- the first release
# built after it, 2026-07-25; python/setup.py, which reads it, is not in the wheels, so this one is dated, not read).
RUST_SKIP_SWITCH_WINDOWS = (
    (None, "0.5.15.post1", None, "PR #30927 merged 2026-07-12; 0.5.15.post1 was cut from release/v0.5.15"),
    ("0.5.16", None, "SGLANG_BUILD_RUST_EXTS", "https://github.com/sgl-project/sglang/pull/30927"),
)
RUST_SOURCE_NEEDS = (
    "the repository's rust/ workspace (and proto/), which neither the wheels nor the sdists carry",
    "cargo and rustc at least the rust/rust-toolchain.toml channel",
    "a C compiler (cc) for the crates' native parts",
    "protoc when the gRPC crate does not vendor it (protoc-bin-vendored)",
    "crates.io, or a cargo source replacement, for cargo --locked",
)


def rust_extensions(version):
    """The compiled extensions ``version``'s wheel carries and the switch that skips them in a source build."""
    modules = _pick(RUST_EXTENSION_WINDOWS, version, "Rust extensions")
    return {
        "modules": list(modules),
        "skip_switch": _pick(RUST_SKIP_SWITCH_WINDOWS, version, "Rust extension switch") if modules else None,
        "source_needs": list(RUST_SOURCE_NEEDS) if modules else [],
    }


# -- server flags -----------------------------------------------------------------------------------------------------
# The options the collection passes to sglang.launch_server (roles/server), each with its spelling per release. The
# evidence is where the first and the last release checked register it (sim/mirrors/sglang_cli.py reads the same).
_SA = "sglang/srt/server_args.py"
_F = "sglang/srt/arg_groups/fields/"


def _always(flag, first_line, last_file_line):
    return ((None, None, flag, "0.5.6 %s; 0.5.8 %s:%s; 0.5.23 %s%s" % (_SA, _SA, first_line, _F, last_file_line)),)


SERVER_FLAGS = {
    "model_path": _always("--model-path", 2595, "model.py:51"),
    "served_model_name": _always("--served-model-name", 3310, "serving.py:168"),
    "tp_size": _always("--tp-size", 3003, "parallel.py:45"),
    "mem_fraction_static": _always("--mem-fraction-static", 2840, "schedule.py:27"),
    "host": _always("--host", 2702, "serving.py:65"),
    "port": _always("--port", 2708, "serving.py:66"),
    "max_running_requests": _always("--max-running-requests", 2846, "schedule.py:31"),
    "kv_cache_dtype": _always("--kv-cache-dtype", 2781, "model.py:197"),
    "attention_backend": _always("--attention-backend", 3510, "exec_.py:207"),
    "enable_metrics": _always("--enable-metrics", 3171, "observability.py:70"),
    "nnodes": _always("--nnodes", 3418, "parallel.py:43"),
    "node_rank": _always("--node-rank", 3421, "parallel.py:44"),
    "dist_init_addr": _always("--dist-init-addr", 3412, "parallel.py:32"),
    "dist_timeout": _always("--dist-timeout", 3069, "parallel.py:29"),
    "api_key": _always("--api-key", 3295, "serving.py:160"),
    # The admin key (decide_request_auth, sglang/srt/utils/auth.py:74 in 0.5.8 ... 0.5.23) came in 0.5.8; before it
    # SGLang's admin routes take the API key.
    "admin_api_key": (
        (None, "0.5.7", None, "0.5.6, 0.5.7 %s: no admin key" % _SA),
        ("0.5.8", None, "--admin-api-key", "0.5.8 %s:3301; 0.5.23 %sserving.py:164" % (_SA, _F)),
    ),
    # Renamed per phase in 0.5.14 (the old name stayed as a deprecated alias, 0.5.14 server_args.py:6358), gone in
    # 0.5.20: there `--cuda-graph-max-bs` is an ambiguous prefix of -decode/-prefill and argparse refuses it.
    "cuda_graph_max_bs": (
        (
            None,
            "0.5.13.post1",
            "--cuda-graph-max-bs",
            "0.5.6 %s; 0.5.8 %s:4146; 0.5.13.post1 %s:6506" % (_SA, _SA, _SA),
        ),
        ("0.5.14", None, "--cuda-graph-max-bs-decode", "0.5.14 %s:1939; 0.5.23 %sexec_.py:629" % (_SA, _F)),
    ),
}
# Spellings the server role also recognises in server_extra_args as one of its own options (SGLang's aliases, and
# `--tp`/`--model`, which argparse's prefix matching resolves to --tp-size / --model-path in every release checked).
SERVER_FLAG_ALIASES = {
    "model_path": ("--model",),
    "tp_size": ("--tp", "--tensor-parallel-size"),
    "dist_init_addr": ("--nccl-init-addr",),
    "cuda_graph_max_bs": ("--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"),
}
# Order of the options on the command line the server role writes; switches (no value) listed in SWITCHES.
ARGV_ORDER = (
    "model_path",
    "served_model_name",
    "tp_size",
    "mem_fraction_static",
    "host",
    "port",
    "max_running_requests",
    "cuda_graph_max_bs",
    "kv_cache_dtype",
    "attention_backend",
    "enable_metrics",
    "nnodes",
    "node_rank",
    "dist_init_addr",
    "dist_timeout",
)
SWITCHES = ("enable_metrics",)


def server_flag(version, option):
    """The flag ``option`` (e.g. ``cuda_graph_max_bs``) is spelled with in ``version``."""
    if option not in SERVER_FLAGS:
        raise FlagError("unknown server option %r; known: %s" % (option, ", ".join(sorted(SERVER_FLAGS))))
    return _pick(SERVER_FLAGS[option], version, option)


def server_flags(version):
    """{option: flag} for every option the collection passes, in ``version``'s spelling."""
    return {name: server_flag(version, name) for name in SERVER_FLAGS}


def server_argv(version, values):
    """The argv for ``values`` ({option: value}); None, '' and False leave an option out, True is a switch."""
    unknown = sorted(set(values) - set(SERVER_FLAGS))
    if unknown:
        raise FlagError("unknown server options %s; known: %s" % (", ".join(unknown), ", ".join(ARGV_ORDER)))
    argv = []
    for name in ARGV_ORDER:
        value = values.get(name)
        if value is None or value is False or value == "":
            continue
        flag = server_flag(version, name)
        if name in SWITCHES:
            argv.append(flag)
        else:
            argv += [flag, str(value)]
    return argv


def own_flags(version):
    """{flag: option} of every spelling that sets one of the collection's options in ``version``."""
    out = {}
    for name in SERVER_FLAGS:
        flag = server_flag(version, name)
        if flag:
            out[flag] = name
        for alias in SERVER_FLAG_ALIASES.get(name, ()):
            out.setdefault(alias, name)
    return out


def layout(version):
    """Everything above for one version, as the build and server roles read it (filter sglang_release_layout)."""
    key = release_key(version)
    return {
        "version": str(version),
        "newest_checked": NEWEST_CHECKED,
        "beyond_checked": key > _key(NEWEST_CHECKED),
        "sm120_fix": sm120_fix(version),
        "rust_extensions": rust_extensions(version),
        "server_flags": server_flags(version),
    }


# -- guarded flags in server_extra_args -------------------------------------------------------------------------------
# SGLang's parser is argparse with allow_abbrev=True in every release checked (sim/mirrors/sglang_cli.py reads it from
# each wheel): `--api-ke KEY` and `--api-ke=KEY` set --api-key when no other option starts with `--api-ke`; an
# ambiguous prefix is argparse's error. So a guarded flag is refused in every prefix of it, whatever else the release
# registers (an ambiguous prefix would fail at launch anyway). Secrets are never allowed on the command line.
SECRET_FLAGS = ("--api-key", "--admin-api-key")
# Flags server_extra_args may not set whatever their value, with why (the input check's refusal). Each is an option
# of every release checked (tests/security/test_guarded_flags.py).
UNSAFE_FLAGS = {
    "--enable-custom-logit-processor": "it lets every caller send a serialized logit processor that the server "
    "deserializes and runs, so a request becomes code on the GPU host",
    "--nccl-port": "it moves the torch distributed store, a listener without a key, to a port the collection's "
    "listener plan and firewall table do not know (docs/security.md)",
}
# ... and on a server with a key: what turns SGLang's key check off.
KEYED_UNSAFE_FLAGS = {
    "--tokenizer-worker-num": "SGLang checks no key with more than one tokenizer worker: 0.5.9 http_server.py adds "
    "its key middleware only when tokenizer_worker_num is 1, so the server would answer anyone",
}


def unsafe_flags(keyed):
    """{flag: why} of the flags server_extra_args may not set on a server with (``keyed``) or without a key."""
    return {**UNSAFE_FLAGS, **(KEYED_UNSAFE_FLAGS if keyed else {})}


def guarded_flag(arg, guarded):
    """The flag of ``guarded`` that ``arg`` sets under argparse's prefix matching, or None.

    ``arg`` is one argv word; ``--name=value`` is read as ``--name``. An exact option string of the release wins over
    a prefix in argparse, but no option of 0.5.6 ... 0.5.23 is a prefix of a guarded flag
    (tests/security/test_guarded_flags.py checks every cached wheel), so no exception list is needed."""
    if not isinstance(arg, str) or not arg.startswith("--") or arg == "--":
        return None
    name = arg.split("=", 1)[0]
    if name in guarded:
        return name
    hits = sorted(flag for flag in guarded if flag.startswith(name))
    return hits[0] if hits else None


def guarded_args(args, own, unsafe=None):
    """[{arg, flag, secret, unsafe}] for each word of ``args`` that sets a secret flag, one of ``own`` (flag -> option)
    or one of ``unsafe`` (flag -> why, unsafe_flags()); ``unsafe`` is the reason, '' for the others."""
    unsafe = unsafe or {}
    out = []
    for arg in args if isinstance(args, (list, tuple)) else ():
        flag = guarded_flag(arg, SECRET_FLAGS)
        secret = flag is not None
        flag = flag or guarded_flag(arg, list(own))
        why = ""
        if not flag:
            flag = guarded_flag(arg, list(unsafe))
            why = unsafe.get(flag, "")
        if flag:
            out.append({"arg": arg.split("=", 1)[0], "flag": flag, "secret": secret, "unsafe": why})
    return out
