"""scripts/sglang_conformance.py's checks on a small made-up index (the real run is `make conformance`, over every
release on the package index): a window that does not match, a missing or wrong citation, and a start-up line no entry
matches -- whatever its case -- are each a failure."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import sglang_conformance as C  # noqa: E402

VERSIONS = ["0.5.19", "0.5.20"]
UNO = "Capture UNO tree draft CUDA graph begin. num_tokens_per_req={self.forward_width}, avail mem={before_mem:.2f} GB"
INDEX = {
    "0.5.19": {"t": [["sglang/srt/a.py", 10, "Memory pool end. avail mem={x:.2f} GB", "log"]], "c": []},
    "0.5.20": {
        "t": [
            ["sglang/srt/a.py", 12, "Memory pool end. avail mem={x:.2f} GB", "log"],
            ["sglang/srt/speculative/uno_worker_v2.py", 169, UNO, "log"],
        ],
        "c": [["sglang/srt/entrypoints/http_server.py", 7, "uvicorn.run"]],
    },
}
POOL_END = {
    "id": "pool_end",
    "first": None,
    "last": None,
    "probe": r"^Memory pool end\. avail mem=\{",
    "cite": ("sglang/srt/a.py:10", "sglang/srt/a.py:12"),
}


def check(*entries):
    return C.check(VERSIONS, INDEX, entries=list(entries), flags=())


def test_a_capitalised_start_up_line_no_entry_matches_fails_the_run():
    errors = check(POOL_END)
    assert len(errors) == 1 and "unmatched start-up line 'Capture UNO tree draft CUDA graph begin" in errors[0]
    uno = {"id": "uno", "first": "0.5.20", "last": None, "probe": r"^Capture UNO tree draft CUDA graph (begin|end)",
           "cite": ("sglang/srt/speculative/uno_worker_v2.py:169",) * 2}  # fmt: skip
    assert check(POOL_END, uno) == []


def test_a_window_that_does_not_match_the_releases_fails():
    late = dict(POOL_END, first="0.5.20", cite=("sglang/srt/a.py:12", "sglang/srt/a.py:12"))
    assert any("entry pool_end: table says 0.5.20+, the releases print it in 0.5.19-0.5.20" in e for e in check(late))


def test_an_entry_without_both_citations_or_with_a_wrong_one_fails():
    assert any("expected file:line for its first and last release" in e for e in check(dict(POOL_END, cite=())))
    wrong = dict(POOL_END, cite=("sglang/srt/a.py:10", "sglang/srt/a.py:99"))
    assert any("cite sglang/srt/a.py:99 does not hold the probe in 0.5.20" in e for e in check(wrong))


def test_a_call_probe_cites_the_call_through_which_sglang_prints_a_third_partys_text():
    uvicorn = {"id": "uvicorn", "first": "0.5.20", "last": None, "probe": r"call:::uvicorn\.run$",
               "cite": ("sglang/srt/entrypoints/http_server.py:7",) * 2}  # fmt: skip
    errors = check(POOL_END, uvicorn)
    assert not [e for e in errors if "uvicorn" in e]


def test_the_count_of_cited_entries_covers_the_whole_table():
    both, total = C.cited()
    assert both == total > 70
