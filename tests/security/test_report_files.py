"""Issue 25 item 7: reports are private (0700/0600), written whole and never through a planted symlink
(module_utils/private_files.py); control and bidi characters from a record are neutralised in HTML and in the
callback's terminal lines; a malformed record is a one-line error with exit 2 and no report (bin/sglang-report)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.llmops.sglang.plugins.module_utils import private_files, sglang_report
from ansible_collections.llmops.sglang.plugins.module_utils.sglang_report_html import esc, neutral

ROOT = Path(__file__).resolve().parents[2]
REPORT = ROOT / "bin" / "sglang-report"
RECORD = {"host": "gpu1", "milestones": {}, "flags": {}}


def _mode(path):
    return stat.S_IMODE(os.lstat(path).st_mode)


def _run(*args, cwd):
    return subprocess.run(
        [sys.executable, str(REPORT), *map(str, args)], cwd=cwd, capture_output=True, text=True, check=False
    )


def test_a_report_is_a_0700_directory_of_0600_files(tmp_path):
    out = tmp_path / "r"
    sglang_report.write_report({"hosts": []}, "<html></html>", str(out))
    assert _mode(out) == 0o700
    assert {p.name: _mode(p) for p in out.iterdir()} == {"report.json": 0o600, "index.html": 0o600}


def test_an_existing_world_readable_output_directory_is_made_private(tmp_path):
    out = tmp_path / "r"
    out.mkdir(mode=0o755)
    os.chmod(out, 0o755)
    sglang_report.write_report({}, "x", str(out))
    assert _mode(out) == 0o700


def test_a_symlink_planted_at_a_report_file_is_replaced_not_followed(tmp_path):
    out = tmp_path / "r"
    out.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (out / "index.html").symlink_to(victim)
    sglang_report.write_report({}, "<p>report</p>", str(out))
    assert victim.read_text() == "keep"
    assert not (out / "index.html").is_symlink() and (out / "index.html").read_text() == "<p>report</p>"


def test_a_symlink_planted_at_the_temporary_name_is_not_followed(tmp_path):
    out = tmp_path / "r"
    out.mkdir(mode=0o700)
    victim = tmp_path / "victim"
    victim.write_text("keep")
    # our own leftover name: it is unlinked (never opened) before the O_EXCL|O_NOFOLLOW create
    (out / f".report.json.{os.getpid()}.tmp").symlink_to(victim)
    sglang_report.write_report({}, "x", str(out))
    assert victim.read_text() == "keep"


def test_a_symlink_planted_in_place_of_the_report_directory_is_refused(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "r").symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(OSError):
        sglang_report.write_report({}, "x", str(tmp_path / "r"))
    assert list(elsewhere.iterdir()) == []


def test_a_failed_write_leaves_no_half_written_report(tmp_path):
    out = tmp_path / "r"
    # the second file fails while being written (a lone surrogate cannot be encoded): the first is not renamed into
    # place either, and both temporary files are gone
    with pytest.raises(UnicodeEncodeError):
        private_files.write_private_files(str(out), {"report.json": "{}", "index.html": "\ud800"})
    assert list(out.iterdir()) == []


@pytest.mark.parametrize(
    "char",
    [
        "\u202a",
        "\u202b",
        "\u202c",
        "\u202d",
        "\u202e",
        "\u2066",
        "\u2067",
        "\u2068",
        "\u2069",
        "\u200f",
        "\x1b",
        "\x9b",
    ],
    ids=["LRE", "RLE", "PDF", "LRO", "RLO", "LRI", "RLI", "FSI", "PDI", "RLM", "ESC", "CSI_C1"],
)
def test_a_bidi_or_terminal_control_character_is_shown_escaped_in_html_and_text(char):
    assert char not in esc("model" + char + "txt.exe")
    assert char not in neutral("line" + char)


def test_a_bidi_override_in_a_record_never_reaches_the_written_page(tmp_path):
    rec = tmp_path / "gpu1.json"
    rec.write_text(json.dumps(dict(RECORD, host="gpu1\u202eexe.txt")))
    run = _run(rec, "--out", tmp_path / "out", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    page = (tmp_path / "out" / "index.html").read_text()
    assert "\u202e" not in page and "\\u202e" in page


MALFORMED = {
    "milestones_is_a_number": {"milestones": 5, "flags": []},
    "flags_is_a_string": {"milestones": [], "flags": "x", "host": "h"},
    "saved_report_host_is_a_number": {"schema": sglang_report.SCHEMA, "hosts": [5]},
    "model_is_a_number": {"milestones": {"a": "b"}, "model": 3},
}


@pytest.mark.parametrize("doc", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_record_is_one_line_exit_2_and_no_report(tmp_path, doc):
    rec = tmp_path / "bad.json"
    rec.write_text(json.dumps(doc))
    run = _run(rec, "--out", tmp_path / "out", cwd=tmp_path)
    assert run.returncode == 2
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1
    assert "bad.json" in run.stderr
    assert not (tmp_path / "out").exists()


def test_the_deployment_record_on_the_host_is_written_by_its_one_writer_with_the_replicas_keys_scrubbed():
    # the writer's 0600, no-symlink, no-key behaviour: tests/unit/test_deployment_record.py (the module, run)
    tasks = yaml.safe_load((ROOT / "roles" / "server" / "tasks" / "record.yml").read_text())
    write = next(t for t in tasks if t.get("name") == "Write the deployment record on the host")
    args = write["llmops.sglang.deployment_record"]
    assert args["path"].endswith("/deployment.json") and "llmops_server_api_key" in args["secrets"]


RECORD = {
    "driver": "580.95.05",
    "model": {"repo_id": "zai-org/GLM-5", "revision": "main", "commit": "b" * 40},
    "flags": ["--tp-size", "8"],
    "milestones": {"started": 0.0, "weights_loading": 0.2, "ready": 9.0},
    "kv_tokens_per_rank": {"TP0": 425664},
    "kv_size_gb_per_rank": {"TP0": 24.37},
}
# Records that passed the shape check and then ended in a traceback while the page was drawn or written (an
# OverflowError for a number that is not finite, a UnicodeEncodeError for a lone surrogate), written as raw JSON text.
UNDRAWABLE = {
    "a literal 1e999 (infinite once parsed)": json.dumps(RECORD).replace("425664", "1e999"),
    "Infinity": json.dumps(RECORD).replace("425664", "Infinity"),
    "NaN in a milestone": json.dumps(RECORD).replace("9.0", "NaN"),
    "-Infinity in a size": json.dumps(RECORD).replace("24.37", "-Infinity"),
    "a lone surrogate (an escape, so the file itself is UTF-8)": json.dumps(RECORD).replace('"main"', '"ma\\udcffin"'),
}


@pytest.mark.parametrize("text", UNDRAWABLE.values(), ids=UNDRAWABLE.keys())
def test_a_record_that_cannot_be_drawn_is_one_line_exit_2_and_no_report(tmp_path, text):
    rec = tmp_path / "bad.json"
    rec.write_text(text)
    run = _run(rec, "--out", tmp_path / "out", cwd=tmp_path)
    assert run.returncode == 2, run.stdout + run.stderr
    assert "Traceback" not in run.stderr and len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert "bad.json" in run.stderr
    assert not (tmp_path / "out").exists()


def test_the_callback_leaves_out_a_record_it_cannot_draw():
    assert sglang_report.unrepresentable(RECORD) is None
    bad = json.loads(UNDRAWABLE["NaN in a milestone"])
    assert sglang_report.unrepresentable(bad, "its deployment record") == (
        "a number that is not finite (nan) at its deployment record.milestones.ready"
    )
