#!/usr/bin/env python3
"""Download benchmark: llmops.sglang.hf_snapshot vs the real huggingface_hub client (`hf download`), side by side.

Run: .venv/bin/python tests/bench/bench_downloads.py   (defaults: about 4 minutes; ~3 GiB under the cache directory)

Both download from the hub stand-in (sim/mirrors/serve.py) on loopback, which paces every connection to
BENCH_DL_RATE_MIB MiB/s and answers every request BENCH_DL_LATENCY_MS later, like a far hub/CDN whose throughput is
per connection. `hf download` runs with HF_HUB_DISABLE_XET=1 (the stand-in has no Xet storage) and --max-workers
equal to our connection count. Each contestant is one process (our module as Ansible runs it: `python -m ...
hf_snapshot ARGS`; `hf download`), timed from start to exit, into a fresh directory.

  (1) many files: BENCH_DL_FILES x BENCH_DL_FILE_MIB MiB        ratio time(ours) / time(hf download)     <= 1.0
  (2) one large file of BENCH_DL_BIG_MIB MiB                     time(single stream) / time(ours)          >= 4
                                                                 time(hf download) / time(ours)            >= 4
  (3) once per fleet, 3 hosts on this machine: host 1 from the hub, hosts 2 and 3 from host 1 at the same time
      (peer_url, the model role's share server over host 1's directory: each file once host 1 verified it), each
      verifying every file against the hub's listing
                                                                 hub bytes / model bytes                   == 1.0
                                                                 wall(3 hosts) / wall(1 host)              <= 1.5

The default sizes are scaled down so that `make bench` stays short; the issue's sizes (64 x 32 MiB, one 2 GiB
file) are `BENCH_DL_FILE_MIB=32 BENCH_DL_BIG_MIB=2048 make bench-downloads` (about 28 minutes here, 8 of them each
for the single stream and `hf download` of the 2 GiB file; up to ~15 GiB of disk while it runs). Sources of sizes
other than the defaults, and the hub built from them, are removed at the end of the run; the default ones stay
cached. Keep connections x rate below what the stand-in serves in total (one Python process; about 50 MiB/s on this
2-core machine), or the figures measure the server's CPU instead of the transfer strategy. The sizes used are
printed with the figures. Exit status 1 when a target is missed.
"""

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
MIRRORS = ROOT / "sim" / "mirrors"
MODULE = "ansible_collections.llmops.sglang.plugins.modules.hf_snapshot"
sys.path.insert(0, str(ROOT / "tests"))
from share_util import start_share, stop_share  # noqa: E402  (the role's share server, as the seed host runs it)

MIB = 1 << 20

DEFAULT_SIZES = (64, 8, 256)  # files, MiB per file, MiB of the large file: kept cached between runs
FILES = int(os.environ.get("BENCH_DL_FILES", str(DEFAULT_SIZES[0])))
FILE_MIB = int(os.environ.get("BENCH_DL_FILE_MIB", str(DEFAULT_SIZES[1])))
BIG_MIB = int(os.environ.get("BENCH_DL_BIG_MIB", str(DEFAULT_SIZES[2])))
RATE = float(os.environ.get("BENCH_DL_RATE_MIB", "4")) * MIB
LATENCY = float(os.environ.get("BENCH_DL_LATENCY_MS", "20")) / 1000.0
CONNECTIONS = int(os.environ.get("BENCH_DL_CONNECTIONS", "8"))
# The three "hosts" of (3) share this machine's 2 cores: a slower hub keeps one host's download bound by the hub (as
# on a real fleet, where each host hashes and copies with its own CPU), not by the CPU the simulated hosts share.
FLEET_RATE = float(os.environ.get("BENCH_DL_FLEET_RATE_MIB", "2")) * MIB
CACHE = Path(os.environ.get("BENCH_DL_CACHE", "/var/cache/llmops-bench-downloads"))
TIMEOUT = 900


def make_file(path, size, seed):
    """Deterministic, incompressible-looking content: one random MiB, each MiB stamped with (seed, index)."""
    block = random.Random(seed).randbytes(MIB)
    with open(path, "wb") as f:
        for i in range(0, size, MIB):
            stamp = hashlib.sha256(f"{seed}:{i}".encode()).digest()
            f.write((stamp + block[32:])[: min(MIB, size - i)])


def sources():
    src = CACHE / "src"
    many, one = src / f"many-{FILES}x{FILE_MIB}", src / f"one-{BIG_MIB}"
    for d, files in (
        (many, [(f"model-{i:05d}.safetensors", FILE_MIB) for i in range(FILES)]),
        (one, [("model.safetensors", BIG_MIB)]),
    ):
        if (d / ".complete").exists():
            continue
        shutil.rmtree(d, ignore_errors=True)
        d.mkdir(parents=True)
        (d / "config.json").write_text('{"model_type": "llama"}\n')
        for name, mib in files:
            make_file(d / name, mib * MIB, f"{d.name}/{name}")
        (d / ".complete").touch()
    return many, one


def build_hub(many, one):
    out = CACHE / "out"
    proc = subprocess.run(
        [
            sys.executable,
            MIRRORS / "build.py",
            "--out",
            out,
            "--base-url",
            "http://127.0.0.1:8080",
            "--only",
            "hub",
            "--hub-model",
            f"bench/many={many}",
            "--hub-model",
            f"bench/one={one}",
        ],
        capture_output=True,
        text=True,
        check=False,
        timeout=TIMEOUT,
    )
    if proc.returncode:
        sys.exit(f"bench: building the hub stand-in failed:\n{proc.stderr[-2000:]}")
    return out


class Hub:
    def __init__(self, out):
        self.proc = subprocess.Popen(
            [
                sys.executable,
                MIRRORS / "serve.py",
                "--root",
                out,
                "--bind",
                "127.0.0.1",
                "--port",
                "0",
                "--hub-port",
                "0",
                "--hub-rate",
                str(RATE),
                "--hub-latency",
                str(LATENCY),
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.urls = json.loads(self.proc.stdout.readline())

    def control(self, what, method="GET", body=None):
        import urllib.request

        req = urllib.request.Request(
            self.urls["control"] + what, method=method, data=None if body is None else json.dumps(body).encode()
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def served(self):
        """Bytes of file bodies the hub and its storage host sent since the last reset."""
        rows = self.control("requests")
        return sum(r["bytes"] for r in rows if r["listener"] in ("hub", "cdn") and "/api/" not in r["path"])

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(30)


def repo_bytes(out, repo):
    meta = json.loads((out / "hub" / repo / "repo.json").read_text())
    return sum(f["size"] for f in meta["commits"][meta["refs"]["main"]]["files"])


def env():
    e = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "http_", "https_", "HTTP"))}
    return e | {"PYTHONPATH": str(ROOT), "HF_HUB_DISABLE_TELEMETRY": "1", "HF_HUB_DISABLE_PROGRESS_BARS": "1"}


def ours(hub, repo, dest, **kw):
    args = {
        "repo_id": repo,
        "endpoint": hub.urls["hf_root"],
        "dest": str(dest),
        "reserve_gib": 0,
        "connections": CONNECTIONS,
        **kw,
    }
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, f)
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as out:
        proc = subprocess.Popen([sys.executable, "-m", MODULE, f.name], stdout=out, env=env(), cwd=ROOT)
        watchdog = threading.Timer(TIMEOUT, proc.kill)  # bounded like every other step
        watchdog.start()
        _, status, usage = os.wait4(proc.pid, 0)  # the module process's own peak RSS (KiB on Linux)
        watchdog.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)
        seconds = time.monotonic() - t0
        out.seek(0)
        res = json.loads(out.read())
    os.unlink(f.name)
    if proc.returncode or not res.get("done"):
        sys.exit(f"bench: hf_snapshot failed: {res.get('msg')}")
    res["peak_rss_mib"] = usage.ru_maxrss / 1024
    return seconds, res


def hf_download(hub, repo, dest):
    home = dest.parent / (dest.name + "-hf-home")
    e = env() | {"HF_ENDPOINT": hub.urls["hf_root"], "HF_HUB_DISABLE_XET": "1", "HF_HOME": str(home)}
    t0 = time.monotonic()
    p = subprocess.run(
        [
            str(VENV_BIN / "hf"),
            "download",
            repo,
            "--local-dir",
            str(dest),
            "--max-workers",
            str(CONNECTIONS),
            "--format",
            "quiet",
        ],
        capture_output=True,
        text=True,
        env=e,
        timeout=TIMEOUT,
        check=False,
    )
    seconds = time.monotonic() - t0
    if p.returncode:
        sys.exit(f"bench: hf download failed: {p.stderr[-2000:]}")
    return seconds


def timed(hub, fn):
    hub.control("requests", "DELETE")
    value = fn()
    return value, hub.served()


def _start(hub, repo, dest, **kw):
    args = {
        "repo_id": repo,
        "endpoint": hub.urls["hf_root"],
        "dest": str(dest),
        "reserve_gib": 0,
        "connections": CONNECTIONS,
        **kw,
    }
    fn = dest.parent / (dest.name + ".json")
    fn.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    return subprocess.Popen(
        [sys.executable, "-m", MODULE, str(fn)], stdout=subprocess.PIPE, env=env(), cwd=ROOT, text=True
    )


def fleet(hub, work, repo):
    """As the model role does it: host 1 downloads from the hub and shares its directory over plain HTTP while it
    downloads; hosts 2 and 3 copy each file once host 1 has verified it (404 until then), all three at once."""
    hub.control("hub", "POST", {"rate": FLEET_RATE})
    one_host = work / "fleet-solo"
    (solo_s, _), _ = timed(hub, lambda: ours(hub, repo, one_host))
    shutil.rmtree(one_host)
    hub.control("requests", "DELETE")
    seed = work / "host1"
    seed.mkdir()
    # The role's share server with its per-run secret (tests/share_util.py); its per-request log goes to stderr.
    share = start_share(seed, work / "share")
    procs = []
    try:
        t0 = time.monotonic()
        procs.append(_start(hub, repo, seed))
        procs += [
            _start(hub, repo, work / h, peer_url=share.url, peer_token_file=share.token_file, segment_mib=0)
            for h in ("host2", "host3")
        ]
        ends = [None] * len(procs)  # seconds from the start to each host's exit: where the fleet's wall time goes
        deadline = t0 + TIMEOUT
        while None in ends and time.monotonic() < deadline:
            for i, p in enumerate(procs):
                if ends[i] is None and p.poll() is not None:
                    ends[i] = time.monotonic() - t0
            time.sleep(0.05)
        results = [json.loads(p.communicate(timeout=10)[0]) for p in procs]
        wall = time.monotonic() - t0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
        stop_share(share)
    served = hub.served()
    hub.control("hub", "POST", {"rate": RATE})
    verified = all(r.get("done") and not r.get("failed") for r in results)
    return solo_s, wall, served, verified, ends


def main():
    CACHE.mkdir(parents=True, exist_ok=True)
    t_prep = time.monotonic()
    many, one = sources()
    out = build_hub(many, one)
    model_bytes = repo_bytes(out, "bench/many")
    prep = time.monotonic() - t_prep
    work = Path(tempfile.mkdtemp(prefix="bench-dl-", dir=CACHE))
    hub = Hub(out)
    try:
        (o1, r1), b_o1 = timed(hub, lambda: ours(hub, "bench/many", work / "ours-many"))
        h1, b_h1 = timed(hub, lambda: hf_download(hub, "bench/many", work / "hf-many"))
        shutil.rmtree(work / "ours-many")
        shutil.rmtree(work / "hf-many")
        (o2, r2), b_o2 = timed(hub, lambda: ours(hub, "bench/one", work / "ours-one"))
        shutil.rmtree(work / "ours-one")
        (s2, _), b_s2 = timed(hub, lambda: ours(hub, "bench/one", work / "single", connections=1, segment_mib=0))
        shutil.rmtree(work / "single")
        h2, b_h2 = timed(hub, lambda: hf_download(hub, "bench/one", work / "hf-one"))
        shutil.rmtree(work / "hf-one")
        solo, wall, served, verified, ends = fleet(hub, work, "bench/many")
    finally:
        hub.stop()
        shutil.rmtree(work, ignore_errors=True)
        if (FILES, FILE_MIB, BIG_MIB) != DEFAULT_SIZES:  # large one-off sources: do not leave gigabytes behind
            for d in (many, one, out):
                shutil.rmtree(d, ignore_errors=True)

    ratio_many = o1 / h1
    single_x, hf_x = s2 / o2, h2 / o2
    hub_x, wall_x = served / model_bytes, wall / solo
    checks = [
        ("(1) time(ours) / time(hf download), many files", ratio_many, "<= 1.0", ratio_many <= 1.0),
        ("(2) time(single stream) / time(ours), one file", single_x, ">= 4", single_x >= 4),
        ("(2) time(hf download) / time(ours), one file", hf_x, ">= 4", hf_x >= 4),
        ("(3) hub bytes / model bytes, 3 hosts", hub_x, "== 1.0", abs(hub_x - 1.0) < 1e-3),
        ("(3) wall(3 hosts) / wall(1 host)", wall_x, "<= 1.5", wall_x <= 1.5 and verified),
    ]
    print(
        f"download benchmark: hub stand-in paced at {RATE / MIB:g} MiB/s per connection, {LATENCY * 1000:g} ms "
        f"per request, {CONNECTIONS} connections (preparation {prep:.0f} s, cached in {CACHE})"
    )
    print(
        f"(1) {FILES} x {FILE_MIB} MiB: ours {o1:.1f} s ({r1['requests']} requests, peak RSS "
        f"{r1['peak_rss_mib']:.0f} MiB, {b_o1 / MIB:.0f} MiB served), "
        f"hf download {h1:.1f} s ({b_h1 / MIB:.0f} MiB served)"
    )
    print(
        f"(2) 1 x {BIG_MIB} MiB: ours {o2:.1f} s ({r2['requests']} requests, peak RSS {r2['peak_rss_mib']:.0f} MiB, "
        f"hashing {r2['hash_seconds']:.2f} s "
        f"overlapped), single stream {s2:.1f} s, hf download {h2:.1f} s ({b_o2 / MIB:.0f} / {b_s2 / MIB:.0f} / "
        f"{b_h2 / MIB:.0f} MiB served)"
    )
    print(
        f"(3) {FILES} x {FILE_MIB} MiB on 3 hosts, hub at {FLEET_RATE / MIB:g} MiB/s per connection: one host "
        f"{solo:.1f} s, fleet {wall:.1f} s (host 1, from the hub, done at {ends[0]:.1f} s; hosts 2 and 3, from host 1, "
        f"at {ends[1]:.1f} s and {ends[2]:.1f} s), hub served {served / MIB:.1f} MiB, every host verified: "
        f"{'yes' if verified else 'NO'}"
    )
    w = max(len(c[0]) for c in checks)
    for name, value, target, ok in checks:
        print(f"  {name:<{w}}  {value:6.2f}  target {target:<7} {'ok' if ok else 'MISSED'}")
    return 0 if all(c[3] for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
