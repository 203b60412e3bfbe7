"""The versions table is well formed, and the engine has a handler for every kind of line it names.

(Whether each window matches the real releases is `make conformance`, which downloads the wheels.)"""

import re

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import sglang_versions as V
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_log import StartupLog


@pytest.mark.parametrize("entry", V.ENTRIES, ids=lambda e: e["id"])
def test_entry_has_a_window_meaning_and_compiling_patterns(entry):
    lo = V.vkey(entry["first"]) if entry["first"] else V.LOWEST
    hi = V.vkey(entry["last"]) if entry["last"] else V.HIGHEST
    assert lo <= hi and entry["meaning"]
    for rx in (entry["line"], entry["probe"].split("::")[-1] if entry["probe"].startswith("in:") else entry["probe"]):
        if rx:
            re.compile(rx.removeprefix("call:").removeprefix("so:"))
    if entry["kind"] not in ("prefix", "failure"):
        assert hasattr(StartupLog, "_on_" + entry["kind"]), entry["kind"]


@pytest.mark.parametrize("entry", V.ENTRIES, ids=lambda e: e["id"])
def test_every_entry_cites_file_and_line_for_the_first_and_the_last_release_of_its_window(entry):
    """make conformance checks that each citation holds the probe in its release; here: each entry has both."""
    assert entry["probe"], "no probe: no release can confirm this entry"
    assert len(entry["cite"]) == 2, entry["cite"]
    for where in entry["cite"]:
        path, _, line = where.rpartition(":")
        assert path.startswith("sglang/") and line.isdigit(), where
        assert int(line) > 0 or path.endswith(".so"), where  # a compiled extension has no lines: ":0"


def test_ids_are_unique_and_every_failure_is_ordered():
    ids = [e["id"] for e in V.ENTRIES]
    assert len(ids) == len(set(ids))
    failures = {e["id"] for e in V.ENTRIES if e["kind"] == "failure"}
    assert failures == set(V.FAILURE_ORDER)


def test_release_numbers_and_labels():
    assert V.vkey("0.4.6.post5") == (0, 4, 6, 5) and V.vkey("0.5.9") < V.vkey("0.5.9.post1") < V.vkey("0.5.10")
    assert V.window_label(V.vkey("0.5.14"), V.HIGHEST) == "0.5.14+"
    assert V.window_label(V.vkey("0.5.9"), V.vkey("0.5.9")) == "0.5.9"
    with pytest.raises(ValueError, match="not a release number"):
        V.vkey("0.5")


def test_prefilter_selects_every_start_and_skips_serving_lines():
    rx = re.compile(rb"\] " + V.line_starts_regex(generic_exceptions=False))
    for e in V.ENTRIES:
        for start in e["starts"]:
            assert rx.search(b"[2026-01-01 00:00:00 TP0] " + start.encode()), start
    assert not rx.search(b"[2026-01-01 00:00:00 TP0] Decode batch. #running-req: 3, #token: 1024, token usage: 0.1")
