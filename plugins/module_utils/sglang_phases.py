# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""SGLang's start-up phases: one table, read by the parser (``sglang_logstate``/``sglang_log``), the wait loop
(``sglang_wait``, the ``sglang_server`` module's ``wait_for`` choices), the ``sglang_progress`` callback and the
report (``sglang_report``, ``sglang_report_html``). Nothing else spells a list of phases
(``tests/unit/test_sglang_phases.py`` fails on a second one).

A row: ``name``; ``scope`` (``rank``: reached per scheduler rank, ``server``: once for the server); ``wait``
(whether a launch may stop waiting at it, ``sglang_server wait_for``); ``label`` (the report's and the callback's
name of the interval that *starts* at this phase; None for the last); ``colour`` (that interval's colour in the
report); ``stall`` (what a log that stops growing in this phase usually means, for the diagnosis; None: no hint);
``reached_by`` (what in the log reaches it). Rows are in the order SGLang reaches them.
"""

from __future__ import annotations

__metaclass__ = type

from collections import namedtuple

Phase = namedtuple("Phase", "name scope wait label colour stall reached_by")

# fmt: off
PHASE_TABLE = (
    Phase("started", "server", False, "launch", "#9c9c9c",
          "the processes did not get past distributed initialisation (NCCL/port)",
          "the first SGLang line (server_args, distributed init)"),
    Phase("weights_loading", "rank", False, "weight load", "#4e79a7",
          "weight loading is slow (disk, network download) or stuck", "Load weight begin"),
    Phase("weights_loaded", "rank", False, "KV cache", "#59a14f", None, "Load weight end"),
    Phase("kv_allocated", "rank", True, "memory pool", "#8cd17d", None,
          "KV Cache is allocated / skipped (every pool: target, SWA, mamba, draft)"),
    Phase("memory_pool_ready", "rank", False, "graph prep", "#f1ce63", None, "Memory pool end"),
    Phase("cuda_graph_capturing", "rank", False, "CUDA graph capture", "#f28e2b",
          "capture hangs; on multi-node set-ups this is usually NCCL (rerun with NCCL_DEBUG=INFO)",
          "Capture ... CUDA graph begin, Capturing batches"),
    Phase("cuda_graph_captured", "rank", True, "HTTP start", "#b07aa1", None,
          "Capture ... CUDA graph end (the last capture of the rank)"),
    Phase("http_up", "server", True, "warm-up", "#76b7b2", None,
          "uvicorn's 'Uvicorn running' / 'Application startup'"),
    Phase("ready", "server", True, None, None, None, "The server is fired up and ready to roll!"),
)
# fmt: on

PHASES = tuple(p.name for p in PHASE_TABLE)
PHASE_INDEX = {p.name: i for i, p in enumerate(PHASE_TABLE)}
SERVER_PHASES = tuple(p.name for p in PHASE_TABLE if p.scope == "server")
WAIT_MILESTONES = tuple(p.name for p in PHASE_TABLE if p.wait)
INTERVAL_LABELS = {p.name: p.label for p in PHASE_TABLE if p.label}
PHASE_COLOURS = {p.name: p.colour for p in PHASE_TABLE if p.colour}
STALL_HINTS = {p.name: p.stall for p in PHASE_TABLE if p.stall}
FIRST, LAST = PHASES[0], PHASES[-1]


def order_key(item):
    """Sort key for (phase, seconds) pairs: by time, then by the table's order (two phases in the same second)."""
    name, t = item
    return (t, PHASE_INDEX.get(name, len(PHASES)))
