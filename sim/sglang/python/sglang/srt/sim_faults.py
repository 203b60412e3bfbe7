"""Fault injection for the SGLang stand-in.

Source: env ``SGLANG_SIM_FAULT`` if set (even empty = no faults), else the file named by ``SGLANG_SIM_FAULT_FILE``
(default ``/etc/sglang-sim/fault``) if it exists. Faults are separated by ``;`` or newlines (``#`` starts a comment).
Each fault is ``KIND[@PHASE] [key=value ...]``:

=================  ==================================================================================================
``crash@PHASE``    the target rank raises ``RuntimeError`` at PHASE (default rank 0)
``hang@PHASE``     the target process stops at PHASE without output and stays alive (default: every rank)
``nccl@PHASE``     ``torch.distributed.DistBackendError: NCCL error in: ...`` (default phase ``started``, i.e. during
                   torch.distributed init; default: every rank)
``delay@PHASE``    sleep ``seconds=N`` (real seconds, not scaled) at PHASE
``hold@PHASE``     wait at PHASE while the file ``file=PATH`` exists (at most ``seconds=N``, default 600): a test holds
                   the server in a phase and removes the file once it has seen what it waits for - an event, not a
                   guess of how long the phase must last on a loaded machine (default: every rank)
``slow_capture``   CUDA-graph capture takes ``seconds=N`` longer (default 60, real seconds)
``oom@cuda_graph_capturing``  the target rank runs out of GPU memory inside the CUDA-graph capture, as a too-high
                   ``--mem-fraction-static`` would (default rank 0)
``nojoin``         multi-node: this node never reaches the head's rendezvous (as if a firewall dropped its packets)
``slow``           the server generates ``percent=N`` percent slower (default 30) in the speed model (sim_speed.py)
=================  ==================================================================================================

Keys: ``rank=N`` (rank index inside the TP x PP group - the global rank with ``--nnodes``: TP8-15 on node 1 of a
TP16 server -, ``all`` for every rank), ``seconds=N``, ``release=X.Y.Z`` (the fault applies only when the ``sglang``
distribution installed in the interpreter's environment has that version, a local or dev suffix aside: the stand-in
run through ``PYTHONPATH`` from a build set holding a real release's wheel plays that release, so a test can make one
build set fail and not the other), ``model=PREFIX`` (the fault applies only when ``--model-path``, links resolved, is a
directory whose name starts with PREFIX: the model role keeps each revision in a directory named by its commit, so a
test can make one model revision fail and not the other).
Phases, in order: started, weights_loading, weights_loaded, kv_allocated, memory_pool_ready, cuda_graph_capturing,
cuda_graph_captured (scheduler processes), http_up, ready (HTTP/parent process; crash@ready kills a scheduler right
after the ready line, hang@ready makes the schedulers stop answering).
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field

PHASES = (
    "started",
    "weights_loading",
    "weights_loaded",
    "kv_allocated",
    "memory_pool_ready",
    "cuda_graph_capturing",
    "cuda_graph_captured",
    "http_up",
    "ready",
)
KINDS = ("crash", "hang", "nccl", "delay", "hold", "slow_capture", "oom", "nojoin", "slow")
DEFAULT_FAULT_FILE = "/etc/sglang-sim/fault"

NCCL_ERROR_TEXT = (
    "NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, unhandled cuda error "
    "(run with NCCL_DEBUG=INFO for details), NCCL version 2.27.5\n"
    "ncclUnhandledCudaError: Call to CUDA function failed.\n"
    "Last error:\n"
    "Cuda failure 'an illegal memory access was encountered'"
)


@dataclass
class Fault:
    kind: str
    phase: str | None = None
    rank: int | None = None  # None = the kind's default
    seconds: float | None = None
    params: dict = field(default_factory=dict)

    def applies(self) -> bool:
        """A ``release=`` fault applies only under the SGLang release installed beside the stand-in."""
        if "release" not in self.params:
            return True
        installed, wanted = installed_release() or "", self.params["release"]
        return installed == wanted or installed.startswith((wanted + "+", wanted + ".dev"))

    def serves(self, model_path: str) -> bool:
        """A ``model=`` fault applies only to a model directory (links resolved) whose name starts with its value."""
        if "model" not in self.params:
            return True
        return os.path.basename(os.path.realpath(model_path)).startswith(self.params["model"])

    def targets(self, rank: int) -> bool:
        if self.rank is None:
            return rank == 0 if self.kind in ("crash", "oom") else True
        return self.rank < 0 or self.rank == rank


def installed_release() -> str | None:
    """The version of the ``sglang`` distribution in this interpreter's environment (None when there is none)."""
    try:
        import importlib.metadata as md

        return md.version("sglang")
    except Exception:  # no distribution: the stand-in runs from a source tree without metadata
        return None


class FaultSpecError(ValueError):
    pass


def parse_faults(text: str) -> list[Fault]:
    faults: list[Fault] = []
    for raw in text.replace("\n", ";").split(";"):
        item = raw.split("#", 1)[0].strip()
        if not item:
            continue
        head, *rest = item.split()
        kind, _, phase = head.partition("@")
        kind = kind.strip().lower()
        if kind not in KINDS:
            raise FaultSpecError(f"unknown fault kind {kind!r} in {item!r}")
        phase = phase.strip() or None
        if phase is None and kind == "nccl":
            phase = "started"
        if kind in ("crash", "hang", "delay", "hold", "oom") and phase is None:
            raise FaultSpecError(f"fault {item!r} needs @PHASE")
        if kind == "oom" and phase != "cuda_graph_capturing":
            raise FaultSpecError(f"fault {item!r}: oom is simulated at cuda_graph_capturing only")
        if phase is not None and phase not in PHASES:
            raise FaultSpecError(f"unknown phase {phase!r} in {item!r}; phases: {', '.join(PHASES)}")
        fault = Fault(kind=kind, phase=phase)
        for kv in rest:
            key, _, value = kv.partition("=")
            if key == "rank":
                fault.rank = -1 if value == "all" else int(value)
            elif key == "seconds":
                fault.seconds = float(value)
            else:
                fault.params[key] = value
        if kind == "hold" and not fault.params.get("file"):
            raise FaultSpecError(f"fault {item!r} needs file=PATH (the server waits while it exists)")
        faults.append(fault)
    return faults


def load_faults(env: dict | None = None) -> list[Fault]:
    env = os.environ if env is None else env
    if "SGLANG_SIM_FAULT" in env:
        return parse_faults(env["SGLANG_SIM_FAULT"])
    path = env.get("SGLANG_SIM_FAULT_FILE") or DEFAULT_FAULT_FILE
    try:
        with open(path, encoding="utf-8") as fh:
            return parse_faults(fh.read())
    except OSError:
        return []


class FaultInjector:
    def __init__(self, faults: list[Fault], rank: int = 0):
        self.faults = faults
        self.rank = rank

    def find(self, kind: str, phase: str | None = None) -> Fault | None:
        for f in self.faults:
            if f.kind == kind and (phase is None or f.phase == phase) and f.targets(self.rank) and f.applies():
                return f
        return None

    def slow_capture_seconds(self) -> float:
        f = self.find("slow_capture")
        if f is None:
            return 0.0
        return 60.0 if f.seconds is None else f.seconds

    def at(self, phase: str) -> None:
        """Apply delay / hang / crash faults of this phase (NCCL faults are raised by the caller's code path)."""
        f = self.find("delay", phase)
        if f is not None:
            time.sleep(f.seconds or 0)
        f = self.find("hold", phase)
        if f is not None:
            hold_while(f.params["file"], f.seconds)
        if self.find("hang", phase) is not None:
            hang_forever()
        if self.find("crash", phase) is not None:
            raise RuntimeError(f"Simulated failure injected at phase '{phase}' (SGLANG_SIM_FAULT)")


def hold_while(path: str, limit: float | None = None) -> None:
    """Wait while ``path`` exists, at most ``limit`` seconds (default 600, so a test that never lets go ends)."""
    end = time.monotonic() + (600.0 if limit is None else limit)
    while os.path.exists(path) and time.monotonic() < end:
        time.sleep(0.02)


def hang_forever() -> None:
    while True:
        time.sleep(3600)
