"""Rendering functions of the llmops.sglang.sglang_progress callback."""

from pathlib import Path

from ansible_collections.llmops.sglang.plugins.callback import sglang_progress as cb
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_log import parse_text
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_server_run import build_result

LOGS = Path(__file__).parent / "fixtures" / "logs"


def module_result(name, status="ready"):
    log = parse_text((LOGS / name).read_bytes())
    t0 = log.milestones["started"]["t"]
    return build_result(log, status, t0)


def test_live_line_during_capture():
    res = {
        "phase": "cuda_graph_capturing",
        "elapsed": 377.4,
        "done": False,
        "capture_progress": {"bs": 57, "index": 57, "total": 58, "done": False},
        "ranks": {"TP0": {"kv_tokens": 425664}, "TP1": {"kv_tokens": 425664}},
        "outcome": "incomplete",
    }
    line = cb.render_live("gpu1", res, attempt=3, retries=80)
    assert line == "[sglang] gpu1: cuda_graph_capturing 377s bs 57/58 KV 425664 tokens x 2 ranks (attempt 3/80)"


def test_live_line_final_and_differing_kv():
    res = {
        "phase": "ready",
        "elapsed": 10,
        "ranks": {"TP0": {"kv_tokens": 5}, "TP1": {"kv_tokens": 6}},
        "outcome": "ready",
    }
    assert cb.render_live("h", res) == "[sglang] h: ready 10s KV TP0=5 TP1=6 -> ready"


def test_bar_segments_add_up():
    seg = {"weights": 61.0, "kv": 24.37, "graphs": 3.12, "other": 0.25, "free": 5.46}
    bar = cb.render_bar(seg, width=40)
    assert len(bar) == 42 and bar.startswith("[WWWW") and bar.endswith(".]")
    assert bar.count("W") == 26 and bar.count("K") == 10 and bar.count("G") == 2 and bar.count(".") == 2


def test_memory_segments_other_from_pre_load():
    seg = cb.memory_segments(
        {"weights_gb": 61.0, "kv_size_gb": 24.37, "cuda_graph_mem_gb": 3.12, "avail_after_graph_gb": 5.46}, 94.2
    )
    assert round(seg["other"], 2) == 0.25


def test_summary_glm5_ready():
    res = module_result("v0_5_9_glm5_ready.log")
    text = cb.render_summary("gpu1", res)
    assert text.splitlines()[0] == "[sglang] gpu1: ready (phase ready, format 0.5.9)"
    # every rank states SGLang's own figures: pool tokens and size, memory left after the pool, graphs, free
    assert text.count("#tokens 425664 | KV size 24.37 GB | avail 8.61 GB | graphs 3.12 GB") == 8
    assert "timeline: started 0s -> weights_loading 13s" in text
    assert "KV 425664 tokens x 8 ranks, max_total_num_tokens=425664" in text
    assert "diagnosis" not in text


def test_summary_failure_has_diagnosis():
    res = module_result("v0_5_9_glm5_capture_oom.log", "failed")
    text = cb.render_summary("gpu1", res)
    assert "oom_cuda_graph" in text.splitlines()[0] and "diagnosis: CUDA out of memory" in text


def test_recognises_results():
    assert cb.is_sglang_result("llmops.sglang.sglang_server", {})
    assert not cb.is_sglang_result("ansible.builtin.command", {"rc": 0})


class _Host:
    def get_name(self):
        return "h1"


class _Task:
    action = "llmops.sglang.sglang_server"


class _Result:
    def __init__(self, res):
        self.result, self.task, self.host = res, _Task(), _Host()


def test_callback_events_write_to_stderr_for_json_stdout(monkeypatch, capsys):
    monkeypatch.setenv("ANSIBLE_STDOUT_CALLBACK", "ansible.posix.json")
    plugin = cb.CallbackModule()
    plugin._to_stderr = True  # what __init__ derives from a json stdout callback
    res = module_result("v0_5_9_glm5_ready.log")
    plugin.v2_runner_retry(_Result(dict(res, done=False, attempts=1, retries=5)))
    plugin.v2_runner_on_ok(_Result(res))
    plugin.v2_playbook_on_stats(None)
    out = capsys.readouterr()
    assert out.out == ""
    assert "(attempt 1/5)" in out.err and "GPU memory" in out.err


def _node_result(node_rank, ranks, outcome="ready"):
    sa = {"tp_size": 16, "nnodes": 2, "node_rank": node_rank, "dist_init_addr": "10.0.0.10:20000"}
    return {"outcome": outcome, "server_args": sa, "ranks": {f"TP{r}": {"kv_tokens": 1} for r in ranks}}


def test_the_summary_shows_every_rank_of_every_node_of_a_multi_node_server():
    finals = {
        "node1": _node_result(1, range(8, 16), "incomplete"),
        "node0": _node_result(0, range(8)),
        "solo": {"outcome": "ready", "server_args": {"tp_size": 8}, "ranks": {"TP0": {}}},
    }
    assert cb.render_groups(finals) == [
        "[sglang] multi-node server at 10.0.0.10:20000: 2 node(s) of 2, 16/16 ranks: TP0-TP7 on node0 (node 0, ready); "
        "TP8-TP15 on node1 (node 1, incomplete)"
    ]


def test_a_node_without_a_result_shows_as_missing_ranks():
    assert cb.render_groups({"node0": _node_result(0, range(8))})[0].startswith(
        "[sglang] multi-node server at 10.0.0.10:20000: 1 node(s) of 2, 8/16 ranks: TP0-TP7 on node0"
    )
