#!/usr/bin/env python3
# ruff: noqa: UP031 - %-formatting for the report table
"""Doctor throughput: bin/sglang-doctor on a generated 1 GiB serving log, side by side with `grep -F -c`.

Three files are generated in a temporary directory (removed afterwards):

* ``serving.log``: one real-format 8-rank start-up (0.5.9 lines, the reference deployment) followed by steady-state
  serving lines (``Decode batch``/``Prefill batch`` scheduler lines and uvicorn access lines) up to ``--size``;
* ``nonewline.log``: ``--size`` bytes without a single newline (a model shard passed by mistake);
* the same with a failure at the end, to show the grammar still sees the last lines.

For each, ``grep -F -c`` and ``bin/sglang-doctor --json`` are timed in the same run; the doctor's peak RSS comes
from the child's rusage. Targets (issue: the doctor reads a 1 GiB log in seconds): doctor >= 100 MB/s and peak RSS
< 100 MB on both files. Prints the figures; exits 1 when a target is missed.

    python tests/bench/bench_doctor.py [--size-mib 1024] [--keep DIR]
"""

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
DOCTOR = os.path.join(ROOT, "bin", "sglang-doctor")
TARGET_MBS = 100.0
TARGET_RSS_MB = 100.0


def startup(ranks=8):
    ts = "[2026-02-18 23:5%d:%02d TP%d] "
    out = ["[2026-02-18 23:50:00] server_args=ServerArgs(model_path='/models/GLM-5-NVFP4', tp_size=8, "
           "mem_fraction_static=0.88, cuda_graph_max_bs=512, port=30000)"]  # fmt: skip
    for r in range(ranks):
        out.append(ts % (1, 0, r) + "Init torch distributed begin.")
        out.append(ts % (1, 5, r) + "Init torch distributed ends. elapsed=4.12 s, mem usage=0.71 GB")
        out.append(ts % (1, 6, r) + "Load weight begin. avail mem=94.20 GB")
    for r in range(ranks):
        out.append(ts % (4, 10, r) + "Load weight end. elapsed=180.20 s, type=GlmMoeDsaForCausalLM, "
                   "dtype=torch.bfloat16, avail mem=33.15 GB, mem usage=61.05 GB.")  # fmt: skip
        out.append(ts % (4, 12, r) + "KV Cache is allocated. #tokens: 425664, KV size: 24.37 GB")
        out.append(ts % (4, 12, r) + "Memory pool end. avail mem=8.61 GB")
        out.append(ts % (4, 13, r) + "Capture cuda graph begin. This can take up to several minutes. avail mem=8.55 GB")
        out.append(ts % (5, 30, r) + "Capture cuda graph end. Time elapsed: 77.10 s. mem usage=2.28 GB. "
                   "avail mem=6.33 GB.")  # fmt: skip
    out.append(
        "[2026-02-18 23:55:31 TP0] max_total_num_tokens=425664, chunked_prefill_size=8192, max_prefill_tokens=16384, "
        "max_running_requests=512, context_len=202752, available_gpu_mem=6.33 GB"
    )
    out.append("[2026-02-18 23:55:32] INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)")
    out.append("[2026-02-18 23:55:40] The server is fired up and ready to roll!")
    return ("\n".join(out) + "\n").encode()


STEADY = (
    b"[2026-02-19 10:11:12 TP0] Decode batch. #running-req: 37, #token: 123456, token usage: 0.29, cuda graph: True, "
    b"gen throughput (token/s): 1234.56, #queue-req: 0\n"
    b"[2026-02-19 10:11:12 TP0] Prefill batch. #new-seq: 1, #new-token: 2048, #cached-token: 512, token usage: 0.29, "
    b"#running-req: 36, #queue-req: 0\n"
    b'[2026-02-19 10:11:12] INFO:     127.0.0.1:51234 - "POST /v1/chat/completions HTTP/1.1" 200 OK\n'
)


def write_serving(path, size):
    block = STEADY * (4 * 1024 * 1024 // len(STEADY))
    with open(path, "wb") as fh:
        fh.write(startup())
        written = fh.tell()
        while written < size:
            n = min(len(block), size - written)
            fh.write(block[:n])
            written += n
        fh.write(b"\n")


def write_nonewline(path, size):
    block = (b"x" * 1023 + b"\xff") * 4096
    with open(path, "wb") as fh:
        written = 0
        while written < size:
            n = min(len(block), size - written)
            fh.write(block[:n])
            written += n


def timed(cmd):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, check=False)
    return time.perf_counter() - t0, p


def doctor(path):
    """(seconds, peak RSS MB, parsed --json) of one doctor run in a fresh child."""
    code = (
        "import resource,subprocess,sys,time,json\n"
        "t=time.perf_counter();p=subprocess.run([sys.executable,%r,%r,'--json'],capture_output=True)\n"
        "d=time.perf_counter()-t;r=resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss/1024\n"
        "print(json.dumps({'s':d,'rss':r,'rc':p.returncode,'out':p.stdout.decode(errors='replace')[-4000:],"
        "'err':p.stderr.decode(errors='replace')[-2000:]}))" % (DOCTOR, path)
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    res = json.loads(p.stdout)
    try:
        res["json"] = json.loads(res["out"])
    except ValueError:
        res["json"] = None
    return res


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--size-mib", type=int, default=1024)
    ap.add_argument("--keep", help="generate the files here and keep them")
    args = ap.parse_args(argv)
    size = args.size_mib << 20
    work = args.keep or tempfile.mkdtemp(prefix="llmops-bench-doctor-")
    os.makedirs(work, exist_ok=True)
    ok = True
    try:
        serving, flat = os.path.join(work, "serving.log"), os.path.join(work, "nonewline.log")
        write_serving(serving, size)
        write_nonewline(flat, size)
        print("doctor throughput, %d MiB files, %s" % (args.size_mib, time.strftime("%Y-%m-%d %H:%M")))
        head = ("file", "grep -F s", "doctor s", "MB/s", "x grep", "RSS MB", "outcome")
        print("%-12s %10s %10s %9s %10s %9s  %s" % head)
        for name, path in (("serving", serving), ("no newline", flat)):
            gs, _ = timed(["grep", "-F", "-c", "Load weight", path])
            res = doctor(path)
            mbs = os.path.getsize(path) / 1e6 / res["s"]
            outcome = (res["json"] or {}).get("outcome")
            print("%-12s %10.2f %10.2f %9.0f %10.1f %9.1f  %s" % (name, gs, res["s"], mbs, res["s"] / gs, res["rss"],
                                                                 outcome))  # fmt: skip
            if mbs < TARGET_MBS or res["rss"] >= TARGET_RSS_MB or res["json"] is None:
                ok = False
            if name == "serving" and outcome != "ready":
                print("  wrong outcome on the serving log: %s" % res["err"][-300:])
                ok = False
        print("targets: >= %.0f MB/s and < %.0f MB peak RSS on both files: %s"
              % (TARGET_MBS, TARGET_RSS_MB, "met" if ok else "MISSED"))  # fmt: skip
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    resource.getrusage(resource.RUSAGE_SELF)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
