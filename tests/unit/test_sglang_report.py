"""The fleet report: its data from server results and records, its HTML, and that nothing from a log becomes markup."""

from __future__ import annotations

import html.parser
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_report as R
from ansible_collections.llmops.sglang.plugins.module_utils import sglang_report_html as H
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_log import parse_text
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_report_text import render_text
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_server_run import build_result

ROOT = Path(__file__).resolve().parents[2]
LOGS = Path(__file__).parent / "fixtures" / "logs"
CLI = ROOT / "bin" / "sglang-report"
PLAN = {"kv_tokens": 425728, "mem_fraction_static": 0.88, "verdict": "ok"}


def module_result(name, status):
    """sglang_server's result for a real-format log, with the clock stopped where the log ends."""
    log = parse_text((LOGS / name).read_bytes())
    t0 = log.milestones["started"]["t"]
    end = log.failure["t"] if log.failure else max(m["t"] for m in log.milestones.values())
    return build_result(log, status, t0, clock=lambda: end)


class Markup(html.parser.HTMLParser):
    """Every tag and attribute of a page, and its text."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.tags, self.attrs, self.text = [], [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.extend(name for name, _ in attrs)

    def handle_data(self, data):
        self.text.append(data)


def parse(page):
    p = Markup()
    p.feed(page)
    return p


def test_ready_host_has_bars_timeline_and_kv_against_plan():
    entry = R.host_entry("gpu1", result=module_result("v0_5_9_glm5_ready.log", "ready"), plan=PLAN)
    assert entry["outcome"] == "ready" and len(entry["gpus"]) == 8
    tp0 = entry["gpus"][0]
    assert tp0["rank"] == "TP0"
    assert tp0["segments"]["weights"] == 61.0 and tp0["segments"]["kv"] == 24.37
    assert tp0["segments"]["graphs"] == 3.12 and tp0["segments"]["free"] == 5.46
    phases = [p["phase"] for p in entry["timeline"]["phases"]]
    assert phases[:2] == ["started", "weights_loading"] and "cuda_graph_capturing" in phases
    load = entry["timeline"]["phases"][1]
    assert (load["label"], load["end"] - load["start"]) == ("weight load", 362.0)
    assert entry["timeline"]["failed_at"] is None and entry["timeline"]["end"] == 485.0
    assert entry["kv"] == {
        "planned": 425728,
        "actual": 425664,
        "max_total_num_tokens": 425664,
        "planned_mem_fraction_static": 0.88,
        "verdict": "ok",
        "effective_mem_fraction_static": None,
        "delta_pct": -0.02,
    }
    assert entry["diagnosis"] is None and entry["log_excerpt"] == []


def test_failed_host_keeps_diagnosis_and_the_line_that_proves_it():
    res = module_result("v0_5_9_glm5_capture_oom.log", "failed")
    entry = R.host_entry("gpu2", result=res, failed_task={"task": "Stop with SGLang's diagnosis", "msg": "x"})
    assert entry["outcome"] == "oom_cuda_graph"
    assert entry["diagnosis"].startswith("CUDA out of memory while capturing CUDA graphs")
    assert "Capture cuda graph failed: CUDA out of memory" in entry["failure_line"]
    assert entry["log_excerpt"] == res["log_tail"] and len(entry["log_excerpt"]) == 30
    assert entry["timeline"]["failed_at"] == entry["timeline"]["end"] > 377.0
    assert entry["timeline"]["phases"][-1]["phase"] == "cuda_graph_capturing"


def test_memory_segments_fill_the_card_when_its_size_is_known():
    fig = {"weights_gb": 61.0, "kv_size_gb": 24.37, "cuda_graph_mem_gb": 3.12, "avail_after_graph_gb": 5.46}
    seg = R.memory_segments(fig, pre_load=94.2, total=97887 / 1024)
    assert round(sum(seg.values()), 2) == 95.59 and round(seg["other"], 2) == 1.64
    assert round(R.memory_segments(fig, pre_load=94.2)["other"], 2) == 0.25


def test_the_report_shows_the_current_and_the_previous_build_set():
    record = {"build_set": {"current": "v0.5.9-3f2a9c0d4b1e7a55", "previous": "v0.5.8-0123456789abcdef"}}
    entry = R.host_entry("rr1", record=record)
    assert entry["versions"]["build_set"] == "v0.5.9-3f2a9c0d4b1e7a55"
    assert entry["versions"]["build_set_previous"] == "v0.5.8-0123456789abcdef"
    page = H.render(R.build_report([entry]))
    assert (
        '<tr data-key="build_set"><th>build set</th><td title="v0.5.9-3f2a9c0d4b1e7a55">v0.5.9-3f2a9c0d4b1e7a55<'
        in page
    )
    assert 'previous build set (rollback)</th><td title="v0.5.8-0123456789abcdef">' in page
    older = R.host_entry("rr2", record={"driver": "580.95.05"})  # a record from before build sets
    assert older["versions"]["build_set"] is None and older["versions"]["build_set_previous"] is None


def test_record_alone_gives_versions_and_older_records_still_render():
    record = {
        "driver": "580.95.05",
        "cuda": "12.8",
        "torch": "2.9.1+cu128",
        "sglang_commit": "a" * 40,
        "model": {"repo_id": "zai-org/GLM-5", "revision": "main", "commit": "b" * 40},
        "flags": ["--tp-size", "8"],
        "milestones": {"started": 0.0, "weights_loading": 0.2, "ready": 9.0},
        "kv_tokens_per_rank": {"TP0": 425664, "TP1": 425664},
        "kv_size_gb_per_rank": {"TP0": 24.37, "TP1": 24.37},
    }
    entry = R.host_entry("demo1", record=record)
    assert entry["outcome"] == "ready"
    assert entry["versions"]["driver"] == "580.95.05" and entry["versions"]["model_commit"] == "b" * 40
    assert [g["rank"] for g in entry["gpus"]] == ["TP0", "TP1"] and entry["kv"]["actual"] == 425664
    page = H.render(R.build_report([entry]))
    assert 'title="' + "a" * 40 + '">' + "a" * 12 + "<" in page


def test_ranks_sort_by_number():
    res = {"outcome": "ready", "ranks": {f"TP{i}": {"kv_tokens": 1} for i in (10, 2, 1, 0)}, "milestones": {}}
    assert [g["rank"] for g in R.host_entry("h", result=res)["gpus"]] == ["TP0", "TP1", "TP2", "TP10"]


def test_host_that_failed_before_the_server_stage_is_in_the_report():
    entry = R.host_entry("gpu3", failed_task={"task": "Refuse unsupported GPUs", "msg": "no GPU found"})
    data = R.build_report([entry, R.host_entry("gpu4", unreachable={"task": "Gather facts", "msg": "ssh: timeout"})])
    assert [h["outcome"] for h in data["hosts"]] == ["failed", "unreachable"]
    assert data["summary"] == {"hosts": 2, "ready": 0, "failed": 2, "routers": 0}
    page = H.render(data)
    assert "Refuse unsupported GPUs" in page and "SGLang was not launched on this host." in page


HOSTILE = [
    "</pre><script>alert(1)</script>",
    '"><img src=x onerror="fetch(\'http://203.0.113.9/\')">',
    "<iframe src=//203.0.113.9></iframe><style>body{display:none}</style>",
    "<svg onload=alert(1)><a href=javascript:alert(1)>x</a>",
    "NUL\x00 and ESC\x1b[31m in a log line",
]


def hostile_report():
    res = module_result("v0_5_9_glm5_capture_oom.log", "failed")
    res["log_tail"] = res["log_tail"][:5] + HOSTILE
    res["diagnosis"] = HOSTILE[0] + " diagnosis"
    res["failure"] = {"line": HOSTILE[1]}
    res["ranks"] = {HOSTILE[3]: res["ranks"]["TP0"]}
    res["format"] = HOSTILE[2]
    record = {
        "flags": [],
        "milestones": {},
        "driver": HOSTILE[1],
        "url": HOSTILE[3],
        "model": {"repo_id": HOSTILE[0], "commit": HOSTILE[2]},
    }
    entry = R.host_entry(
        'evil"><script>x</script>', record=record, result=res, failed_task={"task": HOSTILE[2], "msg": HOSTILE[0]}
    )
    return R.build_report([entry], playbook=HOSTILE[0])


def test_text_from_logs_and_records_never_becomes_markup():
    page = H.render(hostile_report())
    p = parse(page)
    assert set(p.tags) <= {
        "html", "head", "meta", "title", "style", "body", "h1", "h2", "h3", "p", "span", "b", "br", "table", "tr",
        "th", "td", "section", "div", "pre", "mark", "details", "summary", "svg", "g", "rect", "text", "line",
    }  # fmt: skip
    assert p.tags.count("style") == 1 and "script" not in p.tags and "img" not in p.tags and "iframe" not in p.tags
    assert not [a for a in p.attrs if a.startswith("on") or a in ("src", "href")]
    text = "".join(p.text)
    for line in HOSTILE[:4]:
        assert line in text  # shown as text, verbatim
    assert "NUL\\x00 and ESC\\x1b[31m" in text and "\x00" not in page
    # the evidence line is marked in the excerpt, as text
    assert "<mark>" + H.esc(HOSTILE[1]) + "</mark>" in page


def test_page_forbids_scripts_and_fetches():
    page = H.render(hostile_report())
    assert H.CSP in page and "default-src 'none'" in H.CSP and "script-src" not in H.CSP


def test_cli_renders_a_saved_report_and_records(tmp_path):
    data = R.build_report([R.host_entry("gpu1", result=module_result("v0_5_9_glm5_ready.log", "ready"), plan=PLAN)])
    saved = tmp_path / "report.json"
    saved.write_text(json.dumps(data))
    rec = tmp_path / "gpu9.json"
    rec.write_text(json.dumps({"flags": [], "milestones": {"started": 0, "ready": 3.5}, "model": {}}))
    out = tmp_path / "out"
    res = subprocess.run(
        [sys.executable, str(CLI), "--out", str(out), str(saved), str(rec)],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == str((out / "index.html").resolve())
    written = json.loads((out / "report.json").read_text())
    assert [h["host"] for h in written["hosts"]] == ["gpu1", "gpu9"]
    assert 'data-host="gpu9"' in (out / "index.html").read_text()


@pytest.mark.parametrize(
    "content, message",
    [
        (
            None,
            "sglang-report: expected a saved report or a deployment record; cannot read {p}: No such file or directory",
        ),
        ("{not json", "sglang-report: expected a saved report or a deployment record; {p} is not JSON ("),
        (
            "[1, 2]",
            "sglang-report: expected a saved report or a deployment record; {p} holds a JSON list, not an object",
        ),
        ('{"a": 1}', "sglang-report: expected a saved report or a deployment record; {p} is neither a saved report"),
    ],
)
def test_cli_bad_input_is_one_line_and_writes_nothing(tmp_path, content, message):
    p = tmp_path / "in.json"
    if content is not None:
        p.write_text(content)
    out = tmp_path / "out"
    res = subprocess.run(
        [sys.executable, str(CLI), "--out", str(out), str(p)], check=False, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 2 and res.stdout == ""
    assert len(res.stderr.splitlines()) == 1 and res.stderr.startswith(message.format(p=p))
    assert "Traceback" not in res.stderr and not out.exists()


class _Host:
    def __init__(self, name):
        self.name = name

    def get_name(self):
        return self.name


class _Task:
    def __init__(self, action, name="task"):
        self.action, self.name = action, name

    def get_name(self):
        return self.name


class _Result:
    def __init__(self, host, action, result, name="task"):
        self.host, self.task, self.result = _Host(host), _Task(action, name), result


class _Display:
    verbosity = 0

    def __init__(self):
        self.lines = []

    def display(self, text, *args, **kwargs):
        self.lines.append(text)


def load_callback(display, report_dir):
    """The callback writing its reports under ``report_dir`` (the value a play passes as its report_dir option)."""
    from ansible_collections.llmops.sglang.plugins.callback.sglang_progress import CallbackModule

    cb = CallbackModule(display=display)
    cb._plugin_options["report_dir"] = str(report_dir)  # what set_options() resolves in a play
    cb._to_stderr = False
    return cb


def test_callback_writes_the_report_and_names_its_path(tmp_path):
    display = _Display()
    cb = load_callback(display, tmp_path / "reports")
    record = {"flags": [], "milestones": {}, "driver": "580.95.05", "model": {"commit": "c" * 40}}
    ready = module_result("v0_5_9_glm5_ready.log", "ready")
    failed = module_result("v0_5_9_glm5_capture_oom.log", "failed")
    cb.v2_runner_on_ok(_Result("gpu1", "llmops.sglang.sglang_plan", {"plan": PLAN}))
    cb.v2_runner_on_ok(_Result("gpu1", "llmops.sglang.sglang_server", ready))
    cb.v2_runner_on_ok(_Result("gpu1", "ansible.builtin.set_fact", {"ansible_facts": {"server_deployment": record}}))
    cb.v2_runner_on_ok(_Result("gpu2", "llmops.sglang.sglang_server", failed))
    cb.v2_runner_on_failed(_Result("gpu2", "ansible.builtin.fail", {"msg": "SGLang did not become ready"}, "Stop"))
    cb.v2_runner_on_failed(_Result("gpu3", "llmops.sglang.gpu_facts", {"msg": "no GPU"}, "Find the GPUs"))
    cb.v2_playbook_on_stats(object())
    line = display.lines[-1]
    assert line.startswith("[sglang] report: " + str(tmp_path / "reports")) and line.endswith("/index.html")
    data = json.loads((Path(line.split(": ", 1)[1]).parent / "report.json").read_text())
    assert [(h["host"], h["outcome"]) for h in data["hosts"]] == [
        ("gpu1", "ready"),
        ("gpu2", "oom_cuda_graph"),
        ("gpu3", "failed"),
    ]
    assert data["hosts"][0]["versions"]["driver"] == "580.95.05" and data["hosts"][0]["kv"]["planned"] == 425728
    assert len(display.lines) < 40  # the terminal keeps a summary; the picture is in the file


def test_callback_writes_no_report_when_the_server_stage_did_not_run(tmp_path):
    cb = load_callback(_Display(), tmp_path / "reports")
    cb.v2_runner_on_failed(_Result("gpu3", "llmops.sglang.gpu_facts", {"msg": "no GPU"}))
    cb.v2_playbook_on_stats(object())
    assert not (tmp_path / "reports").exists()


FIXTURES = ROOT / "tests" / "fixtures" / "report"


def test_records_saved_from_a_node_run_give_the_whole_picture():
    (ready,), _ = R.load_input(str(FIXTURES / "ready-deployment.json"))
    assert ready["host"] == "demo1" and ready["outcome"] == "ready" and ready["metrics_check"] == "passed"
    assert len(ready["gpus"]) == 8 and {round(g["total_gb"], 2) for g in ready["gpus"]} == {95.59}  # 97887 MiB
    assert ready["versions"]["driver"] == "580.95.05" and ready["versions"]["torch"] == "2.9.1+cu128"
    assert ready["kv"]["planned"] and ready["kv"]["actual"] == 425664
    (failed,), _ = R.load_input(str(FIXTURES / "failed-deployment.json"))
    assert failed["outcome"] == "oom_cuda_graph" and failed["smoke_test"] == "not run"
    assert failed["diagnosis"].startswith("CUDA out of memory while capturing CUDA graphs")
    assert len(failed["log_excerpt"]) == 30 and failed["timeline"]["failed_at"] is not None
    # ranks that died before allocating their pool show no KV tokens, not a made-up figure
    assert [g["kv_tokens"] for g in failed["gpus"]][-1] is None


def test_the_gpu_health_verdict_is_in_the_report_with_the_checks_that_are_not_ok():
    # as roles/server/tasks/record.yml writes it: the last reading (under load), the sentences of the checks not ok
    why = "GPU 00000000:41:00.0's PCIe link runs at Gen2 x16 under load; expected Gen5 x16. Reseat the card."
    record = {"gpu_health": {"verdict": "warning", "phase": "load", "summary": {"ok": 47, "warning": 1},
                             "problems": [why, "<script>x</script>"]}}  # fmt: skip
    entry = R.host_entry("rr1", record=record)
    assert entry["gpu_health"] == {"verdict": "warning", "phase": "load", "problems": [why, "<script>x</script>"]}
    page = H.render(R.build_report([entry]))
    assert "<b>GPU health</b> warning (under load): 2 check(s) not ok" in page
    assert "<li>GPU 00000000:41:00.0&#x27;s PCIe link runs at Gen2 x16" in page and "<script>" not in page
    text = render_text(R.build_report([entry]))
    assert "GPU health (the last reading of the server stage):\n  rr1  warning (under load): 2 check(s) not ok" in text
    assert "    - " + why in text
    healthy = R.host_entry("rr2", record={"gpu_health": {"verdict": "ok", "phase": "idle", "problems": []}})
    assert R.gpu_health_text(healthy["gpu_health"]) == "ok (idle)"
    # an older record, or a malformed entry, shows no verdict rather than a wrong one
    for value in (None, "ok", {"verdict": "fine"}, {"verdict": "ok", "problems": "none"}):
        got = R.host_entry("rr3", record={"gpu_health": value})["gpu_health"]
        assert got in (None, {"verdict": "ok", "phase": None, "problems": []}), (value, got)


def test_the_benchmark_after_the_start_is_in_the_report_with_its_baseline():
    # as roles/server/tasks/record.yml writes it (llmops.sglang.sglang_bench's verdict and figures)
    figures = {"completed": 32, "output_throughput": 280.0, "median_ttft_ms": 135.7, "median_itl_ms": 25.57}
    record = {"benchmark": {"verdict": "slower", "figures": figures, "reference": {"output_throughput": 400.0},
                            "slowdown_pct": 30.0, "max_slowdown_pct": 15.0}}  # fmt: skip
    entry = R.host_entry("rr1", record=record)
    assert entry["benchmark"]["verdict"] == "slower" and entry["benchmark"]["output_throughput"] == 280.0
    said = "slower: 280.0 tok/s, median TTFT 135.7 ms, ITL 25.57 ms, 30.0 % below the baseline (allowed 15.0 %)"
    assert R.benchmark_text(entry["benchmark"]) == said
    assert "<b>benchmark</b> " + html.escape(said, quote=True) in H.render(R.build_report([entry]))
    text = render_text(R.build_report([entry]))
    assert (
        "Benchmark after the last start (against the host's baseline; a router host's: the fleet's):\n  rr1  " + said
        in text
    )
    first = R.host_entry("rr2", record={"benchmark": {"verdict": "baseline", "figures": figures, "slowdown_pct": None}})
    assert R.benchmark_text(first["benchmark"]) == "baseline: 280.0 tok/s, median TTFT 135.7 ms, ITL 25.57 ms"
    for value in (None, "ok", {"verdict": "fast"}, {"verdict": "not due"}):  # none run, an older or malformed record
        assert R.host_entry("rr3", record={"benchmark": value})["benchmark"] is None
