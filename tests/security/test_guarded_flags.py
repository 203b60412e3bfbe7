"""Issue 25 item 6: guarded SGLang flags in server_extra_args are matched the way SGLang's argparse matches them.

SGLang's parser has allow_abbrev=True (read from every cached real wheel by sim/mirrors/sglang_cli.py), so
``--api-ke KEY`` sets --api-key. plugins/module_utils/sglang_flags.py guarded_flag/guarded_args refuse every prefix of
a guarded flag; the real-release cases below build each release's own parser (sim_release_options.parser) and prove
that every prefix the release resolves to a guarded option is refused, and that no real option is refused by mistake."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_flags as F

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "sim" / "mirrors"))
sys.path.insert(0, str(ROOT / "sim" / "sglang" / "python"))
import sglang_cli  # noqa: E402
import sglang_releases  # noqa: E402
from sglang.srt import sim_release_options  # noqa: E402

OWN = F.own_flags("main")


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--api-ke", "K"], "--api-key"),
        (["--api-ke=K"], "--api-key"),
        (["--api-k", "K"], "--api-key"),
        (["--api-key=K"], "--api-key"),
        (["--admin-api", "K"], "--admin-api-key"),
        (["--admin=K"], "--admin-api-key"),
    ],
    ids=["abbrev_api_ke", "abbrev_api_ke_equals", "abbrev_api_k", "exact_equals", "admin_abbrev", "admin_shortest"],
)
def test_a_secret_flag_in_any_prefix_is_refused_as_secret(argv, flag):
    hits = F.guarded_args(argv, OWN)
    assert hits and hits[0]["flag"] == flag and hits[0]["secret"] is True


@pytest.mark.parametrize(
    "arg, flag",
    [
        ("--hos", "--host"),
        ("--po=1", "--port"),
        ("--tp-s", "--tp-size"),
        ("--model-pa", "--model-path"),
        ("--dist-init", "--dist-init-addr"),
        ("--served-model", "--served-model-name"),
        ("--mem-fraction", "--mem-fraction-static"),
        ("--enable-metric", "--enable-metrics"),
    ],
)
def test_a_prefix_of_a_flag_the_role_sets_is_refused(arg, flag):
    assert F.guarded_flag(arg, list(OWN)) == flag


@pytest.mark.parametrize(
    "arg", ["--context-length", "--enable-metrics-for-all-schedulers", "--log-level", "-", "--", "api-key", "-api-key"]
)
def test_other_arguments_are_not_mistaken_for_guarded_flags(arg):
    assert F.guarded_args([arg], OWN) == []


def _edges():
    """The oldest and newest release checked and the edges of the server-flag windows (where spellings change)."""
    out = {F.OLDEST_CHECKED, F.NEWEST_CHECKED}
    for windows in F.SERVER_FLAGS.values():
        out |= {v for first, last, _flag, _evidence in windows for v in (first, last) if v}
    return out


@pytest.fixture(scope="module")
def specs():
    wheels = {v: p for v, p in sglang_releases.cached_wheels().items() if v in _edges()}
    if not wheels:  # the real wheels are fetched into the shared cache by tests/unit/test_sglang_flags_real_releases
        pytest.skip("no real SGLang wheel in the release cache (sim/mirrors/sglang_releases.py cached_wheels)")
    return {v: sglang_cli.options(p) for v, p in sorted(wheels.items(), key=lambda kv: F.release_key(kv[0]))}


def _dest(parser, arg):
    """The option string argparse resolves ``arg`` to in this parser, or None (unknown or ambiguous)."""
    try:
        ns, _ = parser.parse_known_args([arg, "x"] if "=" not in arg else [arg])
    except sim_release_options._Error:
        return None
    set_ = [k for k, v in vars(ns).items() if v not in (None, False)]
    return set_[0] if len(set_) == 1 else None


def test_every_prefix_a_real_release_resolves_to_a_secret_or_own_flag_is_refused(specs):
    checked = 0
    for version, spec in specs.items():
        assert spec["allow_abbrev"] is True, version
        parser = sim_release_options.parser(spec)
        dest_of = {}
        for opt in spec["options"]:
            for name in opt["names"]:
                dest_of[name] = _dest(parser, name)
        own = F.own_flags(version)
        unsafe = F.unsafe_flags(keyed=True)
        guarded = [f for f in list(own) + list(F.SECRET_FLAGS) + list(unsafe) if f in dest_of]
        for flag in guarded:
            for cut in range(3, len(flag) + 1):
                prefix = flag[:cut]
                resolved = _dest(parser, prefix)
                if resolved is not None and resolved == dest_of[flag]:
                    assert F.guarded_args([prefix, "K"], own, unsafe), (version, prefix)
                    checked += 1
    print(f"prefixes checked: {checked} over {len(specs)} releases")
    assert checked > 100


def test_every_unsafe_flag_is_an_option_of_every_release_checked(specs):
    for version, spec in specs.items():
        names = set(sglang_cli.option_names(spec))
        missing = sorted(set(F.unsafe_flags(keyed=True)) - names)
        assert not missing, f"{version} has no {missing}: the refusal would name a flag the release does not read"


def test_no_real_option_of_any_release_is_refused_by_mistake(specs):
    for version, spec in specs.items():
        own = F.own_flags(version)
        guarded = set(own) | set(F.SECRET_FLAGS)
        for name in sglang_cli.option_names(spec):
            if name not in guarded:
                assert F.guarded_args([name], own) == [], (version, name)


@pytest.mark.parametrize(
    "args",
    [["--api-ke", "sk-SECRET-1"], ["--api-ke=sk-SECRET-1"], ["--admin-api-k", "sk-SECRET-1"]],
    ids=["role_refuses_api_ke", "role_refuses_api_ke_equals", "role_refuses_admin_prefix"],
)
def test_the_server_role_refuses_an_abbreviated_key_flag_without_showing_the_key(server_problems, args):
    problems = server_problems(server_extra_args=args)
    assert len(problems) == 1 and "SGLang reads" in problems[0] and "sk-SECRET-1" not in problems[0]


def test_the_server_role_refuses_an_abbreviated_own_flag(server_problems):
    assert server_problems(server_extra_args=["--hos", "0.0.0.0"]) == [
        "Expected --host to come from llmops_server_host, not server_extra_args; found --hos (SGLang reads it as "
        "--host) in server_extra_args. Set llmops_server_host and remove it from server_extra_args."
    ]


KEY = "Ks4" + "s" * 37  # a key as the controller generates it (40 letters and digits)


@pytest.mark.parametrize(
    "args, flag, why",
    [
        (["--enable-custom-logit-processor"], "--enable-custom-logit-processor", "a request becomes code"),
        (["--enable-custom-logit"], "--enable-custom-logit-processor", "a request becomes code"),
        (["--nccl-port=29999"], "--nccl-port", "listener plan"),
        (["--nccl-p", "29999"], "--nccl-port", "listener plan"),
    ],
    ids=["custom_logit_processor", "custom_logit_prefix", "nccl_port_equals", "nccl_port_prefix"],
)
@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
def test_the_server_role_refuses_a_flag_that_is_never_safe_with_the_reason(server_problems, args, flag, why, keyed):
    keys = {"llmops_server_api_key": KEY} if keyed else {}
    problems = server_problems(server_extra_args=args, **keys)
    assert (
        len(problems) == 1
        and problems[0].startswith(f"Expected no {flag} in server_extra_args (")
        and why in problems[0]
    )


def test_the_server_role_refuses_more_tokenizer_workers_only_on_a_keyed_server(server_problems):
    args = ["--tokenizer-worker-num", "4"]
    assert server_problems(server_extra_args=args) == []  # no key to lose
    problems = server_problems(server_extra_args=args, llmops_server_api_key=KEY)
    assert len(problems) == 1 and "SGLang checks no key with more than one tokenizer worker" in problems[0], problems
    problems = server_problems(server_extra_args=args, llmops_server_admin_api_key=KEY)  # refused for its pair too
    assert any(p.startswith("Expected no --tokenizer-worker-num in server_extra_args") for p in problems), problems
