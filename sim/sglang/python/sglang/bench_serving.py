"""The stand-in's ``python -m sglang.bench_serving``: SGLang's serving benchmark client, for the stand-in server.

It takes the real client's options that the collection passes (and rejects any other, as argparse does), sends the
requests to ``/generate`` with the real client's key handling (``OPENAI_API_KEY`` as a bearer token, else
``API_KEY``), prints the real client's result block and appends one JSON line to ``--output-file`` with the real
client's keys. The figures are the stand-in's speed model (``meta_info.sim_timing`` of each answer, srt/sim_speed.py)
laid out over ``--max-concurrency`` slots, not the wall clock: on a simulated node they say how the model moved (a
planted slow build set, a degraded link), never how fast anything is.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

WORDS = "the of and to in is was for on that with as by at from his her an were are which this be or has had".split()


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description="Benchmark the online serving throughput.")
    p.add_argument("--backend", type=str, default="sglang", choices=["sglang"])
    p.add_argument("--base-url", type=str, default=None)
    p.add_argument("--host", type=str, default="0.0.0.0")
    p.add_argument("--port", type=int)
    p.add_argument("--dataset-name", type=str, default="sharegpt", choices=["random-ids"])
    p.add_argument("--tokenizer", type=str)
    p.add_argument("--num-prompts", type=int, default=1000)
    p.add_argument("--random-input-len", type=int, default=1024)
    p.add_argument("--random-output-len", type=int, default=1024)
    p.add_argument("--random-range-ratio", type=float, default=0.0)
    p.add_argument("--max-concurrency", type=int, default=None)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--output-file", type=str)
    p.add_argument("--disable-tqdm", action="store_true")
    p.add_argument("--warmup-requests", type=int, default=1)
    return p


def auth_headers() -> dict:
    if os.environ.get("OPENAI_API_KEY"):
        return {"Authorization": f"Bearer {os.environ['OPENAI_API_KEY']}"}
    if os.environ.get("API_KEY"):
        return {"Authorization": os.environ["API_KEY"]}
    return {}


def send(url: str, prompt: str, output_len: int) -> dict | None:
    body = {"text": prompt, "sampling_params": {"max_new_tokens": output_len, "ignore_eos": True}}
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **auth_headers()})  # fmt: skip
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(req, timeout=120) as resp:
            answer = json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        print(f"request failed: {exc}", file=sys.stderr)
        return None
    meta = answer.get("meta_info") or {}
    timing = meta.get("sim_timing") or {}
    n = int(meta.get("completion_tokens") or 0)
    ttft, itl = float(timing.get("ttft_ms", 0)), float(timing.get("itl_ms", 0))
    return {"ttft_ms": ttft, "itl_ms": itl, "output_len": n, "e2e_ms": ttft + max(0, n - 1) * itl}


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    pos = (len(ordered) - 1) * q / 100.0
    low = int(pos)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)


def layout(e2e_ms: list[float], slots: int) -> float:
    """The benchmark's duration in seconds: each request on the earliest free of ``slots``, in order."""
    free = [0.0] * max(1, slots)
    for ms in e2e_ms:
        i = free.index(min(free))
        free[i] += ms
    return max(free) / 1000.0


def main(argv=None) -> int:
    args = parser().parse_args(argv)
    if args.tokenizer and not os.path.isdir(args.tokenizer):
        print(f"OSError: Can't load tokenizer for '{args.tokenizer}'.", file=sys.stderr)
        return 1
    base = args.base_url or f"http://{args.host}:{args.port}"
    url = base.rstrip("/") + "/generate"
    rng = random.Random(args.seed)
    prompts = [" ".join(rng.choice(WORDS) for _ in range(max(1, args.random_input_len - 1)))
               for _ in range(args.num_prompts)]  # fmt: skip
    for _ in range(args.warmup_requests):
        if send(url, prompts[0], min(16, args.random_output_len)) is None:
            print("Initial test run failed - Please make sure benchmark arguments are correctly specified.")
            return 1
    slots = args.max_concurrency or args.num_prompts
    with ThreadPoolExecutor(max_workers=min(slots, 16)) as pool:
        results = list(pool.map(lambda p: send(url, p, args.random_output_len), prompts))
    done = [r for r in results if r is not None]
    duration = layout([r["e2e_ms"] for r in done], slots) or 1e-9
    total_out = sum(r["output_len"] for r in done)
    ttfts, itls = [r["ttft_ms"] for r in done], [r["itl_ms"] for r in done if r["output_len"] > 1]
    result = {
        "backend": args.backend,
        "dataset_name": args.dataset_name,
        "max_concurrency": args.max_concurrency,
        "random_input_len": args.random_input_len,
        "random_output_len": args.random_output_len,
        "random_range_ratio": args.random_range_ratio,
        "duration": duration,
        "completed": len(done),
        "total_input_tokens": len(done) * args.random_input_len,
        "total_output_tokens": total_out,
        "request_throughput": len(done) / duration,
        "output_throughput": total_out / duration,
        "median_ttft_ms": percentile(ttfts, 50),
        "p99_ttft_ms": percentile(ttfts, 99),
        "median_itl_ms": percentile(itls, 50),
        "p95_itl_ms": percentile(itls, 95),
        "p99_itl_ms": percentile(itls, 99),
    }
    print("\n{s:{c}^{n}}".format(s=" Serving Benchmark Result ", n=50, c="="))
    for label, key in (("Successful requests:", "completed"), ("Benchmark duration (s):", "duration"),
                       ("Output token throughput (tok/s):", "output_throughput"),
                       ("Median TTFT (ms):", "median_ttft_ms"), ("Median ITL (ms):", "median_itl_ms")):  # fmt: skip
        value = result[key]
        print("{:<40} {:<10}".format(label, f"{value:.2f}" if isinstance(value, float) else value))
    print("=" * 50)
    out = args.output_file or f"{args.backend}_{args.num_prompts}_{args.random_input_len}.jsonl"
    with open(out, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
