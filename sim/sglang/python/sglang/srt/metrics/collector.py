"""/metrics of the stand-in: SGLang's Prometheus metric names, types, help texts and labels (--enable-metrics).

Checked against the real release, sglang 0.5.9 (wheel from PyPI), sglang/srt/metrics/collector.py:
  SchedulerMetricsCollector (labels model_name, engine_type, tp_rank, pp_rank, moe_ep_rank from
  managers/scheduler_metrics_mixin.py:114-120; gauges set by log_stats, collector.py:975-1031, which
  log_prefill_stats calls on every prefill batch, so the warm-up request already sets them):
    sglang:num_running_reqs :307, num_used_tokens :313, token_usage :319, gen_throughput :349, num_queue_reqs :355,
    cache_hit_rate :373, max_total_num_tokens :380, engine_startup_time :516, engine_load_weights_time :522,
    is_cuda_graph :711
  TokenizerMetricsCollector (label model_name, managers/tokenizer_manager.py:433-435; observed once per finished
  request, collector.py:1315-1357):
    sglang:prompt_tokens_total :1105, generation_tokens_total :1111, num_requests_total :1174 (counters),
    time_to_first_token_seconds :1267, e2e_request_latency_seconds :1281 (histograms, default buckets :1191-1230)
Exposition as prometheus_client writes it (SGLang serves it through MultiProcessCollector, utils/common.py:1571):
a counter's family is named without "_total" and its sample with it; histograms expose _bucket (cumulative, "le"
label), _count and _sum; labels sorted by name. This file models the names; it keeps no real statistics.
"""

from __future__ import annotations

import threading

TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS = (*TTFT_BUCKETS, 600, 1200, 1800, 2400)

SCHEDULER_GAUGES = (
    ("sglang:num_running_reqs", "The number of running requests."),
    ("sglang:num_used_tokens", "The number of used tokens."),
    ("sglang:token_usage", "The token usage."),
    ("sglang:gen_throughput", "The generation throughput (token/s)."),
    ("sglang:num_queue_reqs", "The number of requests in the waiting queue."),
    ("sglang:cache_hit_rate", "The prefix cache hit rate."),
    ("sglang:max_total_num_tokens", "Maximum total number of tokens in the KV cache pool."),
    ("sglang:engine_startup_time", "The time taken for the engine to start up."),
    ("sglang:engine_load_weights_time", "The time taken for the engine to load weights."),
    ("sglang:is_cuda_graph", "Whether the batch is using CUDA graph."),
)


def _float(v: float) -> str:
    """prometheus_client's floatToGoString for the values we emit."""
    if v == float("inf"):
        return "+Inf"
    return repr(float(v))


def _labels(labels: dict) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(labels.items())) + "}"


class _Histogram:
    def __init__(self, buckets):
        self.bounds = (*tuple(float(b) for b in buckets), float("inf"))
        self.counts = [0] * len(self.bounds)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1
                break
        self.sum += value

    def lines(self, name: str, labels: dict) -> list[str]:
        out, acc = [], 0
        for bound, n in zip(self.bounds, self.counts, strict=False):
            acc += n
            out.append(f"{name}_bucket{_labels({**labels, 'le': _float(bound)})} {_float(acc)}")
        out.append(f"{name}_count{_labels(labels)} {_float(acc)}")
        out.append(f"{name}_sum{_labels(labels)} {_float(self.sum)}")
        return out


class TokenizerMetrics:
    """Counters and histograms of finished requests (the HTTP process), updated by observe_one_finished_request."""

    def __init__(self):
        self.lock = threading.Lock()
        self.prompt_tokens = 0
        self.generation_tokens = 0
        self.requests = 0
        self.ttft = _Histogram(TTFT_BUCKETS)
        self.e2e = _Histogram(E2E_BUCKETS)

    def observe_one_finished_request(self, prompt_tokens: int, generation_tokens: int, ttft: float, e2e: float):
        with self.lock:
            self.prompt_tokens += prompt_tokens
            self.generation_tokens += generation_tokens
            self.requests += 1
            self.ttft.observe(ttft)
            self.e2e.observe(e2e)


def metrics_text(server_args, gauges: dict, tokenizer: TokenizerMetrics) -> str:
    """The /metrics body. ``gauges``: scheduler gauge name -> value (missing ones read 0)."""
    sched = {
        "engine_type": "unified",
        "model_name": server_args.served_model_name,
        "moe_ep_rank": "0",
        "pp_rank": "0",
        "tp_rank": "0",
    }
    tok = {"model_name": server_args.served_model_name}
    out = []
    for name, doc in SCHEDULER_GAUGES:
        out += [f"# HELP {name} {doc}", f"# TYPE {name} gauge", f"{name}{_labels(sched)} {_float(gauges.get(name, 0))}"]
    with tokenizer.lock:
        for family, doc, value in (
            ("sglang:prompt_tokens", "Number of prefill tokens processed.", tokenizer.prompt_tokens),
            ("sglang:generation_tokens", "Number of generation tokens processed.", tokenizer.generation_tokens),
            ("sglang:num_requests", "Number of requests processed.", tokenizer.requests),
        ):
            out += [
                f"# HELP {family} {doc}",
                f"# TYPE {family} counter",
                f"{family}_total{_labels(tok)} {_float(value)}",
            ]
        for name, doc, hist in (
            ("sglang:time_to_first_token_seconds", "Histogram of time to first token in seconds.", tokenizer.ttft),
            ("sglang:e2e_request_latency_seconds", "Histogram of End-to-end request latency in seconds", tokenizer.e2e),
        ):
            out += [f"# HELP {name} {doc}", f"# TYPE {name} histogram", *hist.lines(name, tok)]
    return "\n".join(out) + "\n"
