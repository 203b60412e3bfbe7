"""The operator guide's troubleshooting transcripts are bound to the tests that produce them (tests/transcripts.py).

Every transcript block in docs/operator-guide.md names a test file that checks it by name, every name a test checks is
a block of the guide, and no block is empty; the rendering and the comparison are tested here on made-up results.
"""

from __future__ import annotations

import re
from pathlib import Path

import transcripts

ROOT = Path(__file__).resolve().parents[2]
CALL = re.compile(r'check_transcript\(\s*"([a-z0-9-]+)"')


def checked_names() -> dict[str, list[str]]:
    """name -> the test files that check it."""
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        for name in CALL.findall(path.read_text()):
            found.setdefault(name, []).append(str(path.relative_to(ROOT)))
    return found


def test_every_transcript_of_the_guide_is_checked_by_the_test_it_names_and_every_checked_one_is_in_the_guide():
    blocks = transcripts.blocks()
    checked = checked_names()
    # the four failures the guide walks through: a capture OOM, a KV pool too small, a refused driver, a router down
    assert sorted(blocks) == ["capture-oom", "kv-pool-too-small", "refused-driver", "unreachable-router"]
    assert sorted(checked) == sorted(blocks), (sorted(checked), sorted(blocks))
    for name, block in blocks.items():
        assert checked[name] == [block["source"]], (name, checked[name], block["source"])


def test_no_transcript_is_empty():
    for name, block in transcripts.blocks().items():
        lines = block["body"].splitlines()
        assert lines and lines[0].startswith("TASK [") and lines[1].startswith("fatal: ["), (name, lines[:2])


def test_a_rendered_result_wraps_at_spaces_and_compares_equal_to_its_unwrapped_line():
    result = {"changed": False, "failed": True, "_it_status": "failed", "msg": "word " * 60 + "end"}
    text = transcripts.render("llmops.sglang.server : Stop", "sv1", result, [("sv1", "gpu01")])
    lines = text.splitlines()
    assert lines[0] == "TASK [llmops.sglang.server : Stop] ***"
    assert all(len(x) <= transcripts.WIDTH for x in lines), lines
    one = transcripts.callback_line("gpu01", result)
    assert one.startswith('fatal: [gpu01]: FAILED! => {"changed": false, "msg": "word word')  # no internal keys
    assert transcripts.normal(text) == transcripts.normal(lines[0] + "\n" + one)


def test_the_comparison_ignores_numbers_and_digests_but_not_words():
    a = "SGLang did not become ready after 1 attempt(s) at 10.213.0.61, commit 3f9a2b1c0d, 0.95"
    b = "SGLang did not become ready after 2 attempt(s) at 192.0.2.10, commit 0e8d7c6b5a, 0.6"
    assert transcripts.normal(a) == transcripts.normal(b)
    assert transcripts.normal(a) != transcripts.normal(a.replace("did not", "did"))
