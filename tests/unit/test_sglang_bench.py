"""plugins/module_utils/sglang_bench.py: the client's command line and output against the real releases' client, and
the verdict against the host's baseline (table-driven, fixed figures; nothing is timed)."""

from __future__ import annotations

import ast
import json
import re
import sys
import zipfile
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_bench as B
from ansible_collections.llmops.sglang.plugins.module_utils import sglang_flags

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "sim"))
from real_releases import wheel  # noqa: E402

SETTINGS = {"num_prompts": 32, "input_len": 256, "output_len": 128, "max_concurrency": 8, "seed": 1}


def figures(tput, completed=32, ttft=95.0, itl=17.9):
    return {"completed": completed, "duration": 9.8, "request_throughput": 3.2, "output_throughput": tput,
            "median_ttft_ms": ttft, "p99_ttft_ms": ttft * 2, "median_itl_ms": itl, "p99_itl_ms": itl * 1.4}  # fmt: skip


def judged(tput, state=None, build_set="set-a", commit="c0ffee", pct=15, **kw):
    return B.judge(figures(tput, **kw), state or B.empty_state(), build_set=build_set, model_commit=commit,
                   settings=SETTINGS, max_slowdown_pct=pct, host="gpu1", stamp="2026-12-06T00:00:00Z")  # fmt: skip


def _client_source(version):
    """Every argparse flag, the keys of the result object (the dict literal holding output_throughput) and the text of
    the release's serving benchmark (sglang/bench_serving.py, and sglang/benchmark/ where it moved in later
    releases)."""
    with zipfile.ZipFile(wheel(version)) as z:
        names = [
            n for n in z.namelist()
            if n == "sglang/bench_serving.py" or (n.startswith("sglang/benchmark/") and n.endswith(".py"))
        ]  # fmt: skip
        texts = [z.read(n).decode() for n in names]
    flags, keys = set(), set()
    for text in texts:
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "add_argument":
                flags |= {a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)}
            if isinstance(node, ast.Dict):
                found = {k.value for k in node.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
                if "output_throughput" in found:
                    keys |= found
    return flags, keys, "\n".join(texts)


# the oldest and newest releases checked, the default, and either side of the move to sglang.benchmark.serving
@pytest.mark.parametrize(
    "version", [sglang_flags.OLDEST_CHECKED, "0.5.9", "0.5.14", "0.5.15.post1", sglang_flags.NEWEST_CHECKED]
)
def test_the_command_line_and_the_figures_are_the_real_clients(version, tmp_path):
    flags, keys, text = _client_source(version)
    argv = B.client_argv("/venv/bin/python", "http://127.0.0.1:30000/", "/models/m", SETTINGS, "/tmp/x.jsonl")
    assert argv[1:3] == ["-m", "sglang.bench_serving"]
    used = [a for a in argv if a.startswith("--")]
    assert used and set(used) <= flags, sorted(set(used) - flags)
    assert '"random-ids"' in text  # the dataset that downloads nothing
    assert set(B.FIGURES) <= keys, sorted(set(B.FIGURES) - keys)
    assert 'os.environ.get("OPENAI_API_KEY")' in text  # the key comes from the environment, never argv


def test_the_command_line_is_bounded_and_carries_no_key():
    argv = B.client_argv("/venv/bin/python", "http://127.0.0.1:30000/", "/models/m", SETTINGS, "/tmp/x.jsonl")
    assert argv[argv.index("--base-url") + 1] == "http://127.0.0.1:30000"
    assert argv[argv.index("--num-prompts") + 1] == "32"
    assert argv[argv.index("--random-range-ratio") + 1] == "1.0"
    assert argv[argv.index("--dataset-name") + 1] == "random-ids"
    assert not any("key" in a.lower() for a in argv)


@pytest.mark.parametrize(
    "name, value",
    [("num_prompts", 0), ("num_prompts", 1001), ("input_len", "many"), ("max_concurrency", True), ("seed", -1),
     ("output_len", None)],
)  # fmt: skip
def test_a_bad_setting_is_one_line_naming_it(name, value):
    with pytest.raises(B.BenchError) as e:
        B.check_settings(dict(SETTINGS, **{name: value}))
    assert name in str(e.value) and "\n" not in str(e.value) and "server_bench" in str(e.value)


@pytest.mark.parametrize(
    "text, says",
    [("", "found none"), ("not json\n", "end with a JSON line"), ("[1]\n", "JSON object"),
     (json.dumps({"completed": 3}) + "\n", "not SGLang's bench_serving")],
)  # fmt: skip
def test_an_output_that_is_not_the_clients_is_refused(text, says):
    with pytest.raises(B.BenchError) as e:
        B.read_output(text)
    assert says in str(e.value)


def test_the_last_line_of_the_output_is_read():
    first, last = dict(figures(100.0), extra=1), dict(figures(400.0), server_info={"x": 1})
    got = B.read_output(json.dumps(first) + "\n" + json.dumps(last) + "\n")
    assert got["output_throughput"] == 400.0 and set(got) == set(B.FIGURES)


def test_the_first_run_is_the_baseline_and_a_later_one_is_judged_against_it():
    first = judged(400.0)
    assert first["verdict"] == "baseline" and first["reference"] is None
    state = first["state"]
    assert state["runs"][first["key"]]["baseline"]["output_throughput"] == 400.0
    assert state["last"] == first["key"]
    again = judged(380.0, state)  # 5 % slower: passes, the baseline stays the first run's
    assert again["verdict"] == "ok" and again["slowdown_pct"] == 5.0
    assert again["state"]["runs"][first["key"]]["baseline"]["output_throughput"] == 400.0
    assert again["state"]["runs"][first["key"]]["latest"]["output_throughput"] == 380.0


@pytest.mark.parametrize(
    "tput, pct, verdict",
    [(400.0, 15, "ok"), (340.0, 15, "ok"), (339.0, 15, "slower"), (280.0, 15, "slower"), (280.0, 35, "ok"),
     (520.0, 15, "ok")],
)  # fmt: skip
def test_slower_is_more_than_the_allowed_percent_of_output_throughput(tput, pct, verdict):
    state = judged(400.0)["state"]
    assert judged(tput, state, pct=pct)["verdict"] == verdict


def test_a_slower_run_names_its_figures_and_is_never_a_baseline():
    state = judged(400.0)["state"]
    new = judged(280.0, state, build_set="set-b")  # a roll to a new build set, 30 % slower
    assert new["verdict"] == "slower" and new["reference_key"].startswith("set-a|")
    msg = new["message"]
    for part in ("gpu1", "within 15 %", "280.0 tok/s", "30.0 % below", "400.0 tok/s",
                 "it runs build set set-b, model commit c0ffee, before it build set set-a",
                 "server_bench_max_slowdown_pct"):  # fmt: skip
        assert part in msg, (part, msg)
    assert "\n" not in msg
    entry = new["state"]["runs"][new["key"]]
    assert "baseline" not in entry and entry["latest"]["verdict"] == "slower"
    assert new["state"]["last"] == state["last"]  # the rollback is judged against what ran before
    assert B.due(new["state"], "set-b", "c0ffee", SETTINGS)
    assert not B.due(new["state"], "set-a", "c0ffee", SETTINGS)


def test_a_slower_run_of_what_ran_before_is_judged_against_its_own_baseline():
    state = judged(400.0)["state"]
    again = judged(300.0, state)
    assert again["verdict"] == "slower" and again["reference_key"] == again["key"]
    assert "(build set set-a, model commit c0ffee)" in again["message"]
    assert "what changed on the host since" in again["message"] and "it runs" not in again["message"]


def test_a_new_build_set_that_keeps_pace_becomes_its_own_baseline():
    state = judged(400.0)["state"]
    new = judged(390.0, state, build_set="set-b")
    assert new["verdict"] == "ok" and new["state"]["last"] == new["key"]
    assert new["state"]["runs"][new["key"]]["baseline"]["output_throughput"] == 390.0


def test_other_settings_start_a_new_baseline():
    state = judged(400.0)["state"]
    other = B.judge(figures(100.0), state, build_set="set-a", model_commit="c0ffee", settings=dict(SETTINGS, seed=2),
                    max_slowdown_pct=15, host="gpu1", stamp="s")  # fmt: skip
    assert other["verdict"] == "baseline"


def test_a_request_that_did_not_complete_fails_the_run():
    state = judged(400.0)["state"]
    bad = judged(410.0, state, completed=30)
    assert bad["verdict"] == "failed" and "all 32" in bad["message"] and "found 30" in bad["message"]
    assert "baseline" in bad["state"]["runs"][bad["key"]]  # the earlier baseline is kept, not replaced


@pytest.mark.parametrize("text", ["", "{", "[]", json.dumps({"schema": 99, "runs": {}})])
def test_an_unreadable_state_starts_afresh(text):
    assert B.load_state(text) == B.empty_state()


@pytest.mark.parametrize("pct", [0, 100, -5])
def test_the_allowed_slowdown_is_a_percentage(pct):
    with pytest.raises(B.BenchError):
        judged(400.0, pct=pct)


@pytest.mark.parametrize("version", [sglang_flags.OLDEST_CHECKED, "0.5.9"])
def test_the_client_needs_nothing_the_wheel_does_not_install(version):
    """Every third-party module the one-file client imports at its top is a base requirement of the same wheel, so the
    served venv runs it without an extra (releases from 0.5.15 on split the client into sglang/benchmark/)."""
    with zipfile.ZipFile(wheel(version)) as z:
        tree = ast.parse(z.read("sglang/bench_serving.py").decode())
        metadata = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        lines = z.read(metadata).decode().splitlines()
    imported = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            imported |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            imported.add(node.module.split(".")[0])
    third_party = {m for m in imported if m not in sys.stdlib_module_names and m != "sglang"}
    base = {
        re.split(r"[<>=!~ ;\[(]", line.split(":", 1)[1].strip())[0].lower().replace("_", "-")
        for line in lines
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    }
    dist = {"PIL": "pillow"}
    assert third_party and {dist.get(m, m).lower() for m in third_party} <= base, sorted(third_party)


def test_the_variables_of_each_role_are_checked_with_the_modules_bounds():
    good = {"prompts": 32, "input_len": 256, "output_len": 128, "concurrency": 8, "seed": 1, "timeout": 300,
            "max_slowdown_pct": 15}  # fmt: skip
    assert B.problems(good, "server_bench") == [] and B.problems({**good, "prompts": "32"}, "x") == []
    rows = {
        ("prompts", 0): "Expected router_bench_prompts to be a whole number from 1 to 1000; found '0'. Set it to 32.",
        ("prompts", 5000): "Expected router_bench_prompts to be a whole number from 1 to 1000; found '5000'. Set it to "
        "32 (the benchmark after a restart must stay short).",
        ("concurrency", True): "Expected router_bench_concurrency to be a whole number from 1 to 1024; found 'True'.",
        ("seed", -1): "Expected router_bench_seed to be a whole number from 0 to 2147483647; found '-1'. Set it to 1.",
        ("timeout", "soon"): "Expected router_bench_timeout to be a whole number from 1 to 86400; found 'soon'.",
        ("max_slowdown_pct", 0): "Expected router_bench_max_slowdown_pct to be a percentage above 0 and below 100; "
        "found '0'. Set it to 15.",
        ("max_slowdown_pct", "fifteen"): "Expected router_bench_max_slowdown_pct to be a percentage above 0",
        ("max_slowdown_pct", None): "Expected router_bench_max_slowdown_pct to be a percentage above 0",
    }
    for (name, value), says in rows.items():
        found = B.problems({**good, name: value}, "router_bench")
        assert len(found) == 1 and found[0].startswith(says), (name, value, found)
    # the module refuses what the roles' checks refuse: the bounds are SETTINGS's
    for setting, suffix in B.VARIABLES.items():
        high = B.SETTINGS[setting][1]
        assert B.problems({**good, suffix: high}, "r") == [] and len(B.problems({**good, suffix: high + 1}, "r")) == 1
        with pytest.raises(B.BenchError):
            B.check_settings({**{k: 1 for k in B.SETTINGS}, setting: high + 1})
