"""scripts/run-figures.py: the table in docs/testing.md is generated from the records, and lint notices a hand edit."""

import importlib.util
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))  # run-figures.py imports its neighbour generated_table, as when it runs
spec = importlib.util.spec_from_file_location("run_figures", ROOT / "scripts" / "run-figures.py")
run_figures = importlib.util.module_from_spec(spec)
spec.loader.exec_module(run_figures)


def test_the_committed_table_is_the_records():
    records = json.loads(run_figures.RECORDS.read_text())
    doc = run_figures.DOC.read_text()
    assert run_figures.rendered(doc, records) == doc
    assert len(records) == doc.count("\n| 20"), "one row per record"


def test_a_new_run_becomes_the_first_row_and_a_hand_edit_is_caught(tmp_path, monkeypatch):
    (tmp_path / "build" / "test-streams").mkdir(parents=True)
    (tmp_path / "build" / "accounted-make-test.json").write_text(
        json.dumps({"exit": 0, "wall_s": 1500.4, "cpu_s": 2400.6, "cold_converges": 4, "snapshot_reuses": 3})
    )
    (tmp_path / "build" / "test-streams" / "others.parts").write_text("pytest 0 700\nmolecule 0 500\n")
    records = tmp_path / "runs.json"
    records.write_text("[]\n")
    doc = tmp_path / "testing.md"
    doc.write_text(f"# t\n{run_figures.START}\nold\n{run_figures.END}\ntail\n")
    monkeypatch.setattr(run_figures, "ROOT", tmp_path)
    monkeypatch.setattr(run_figures, "RECORDS", records)
    monkeypatch.setattr(run_figures, "DOC", doc)
    monkeypatch.setattr(run_figures.subprocess, "run", lambda *a, **k: type("P", (), {"stdout": "abc1234\n"})())
    assert run_figures.main(["add", "--where", "fresh clone"]) == 0
    row = [line for line in doc.read_text().splitlines() if line.startswith("| 20")]
    assert len(row) == 1
    assert "| fresh clone | green | 1500 s (25.0 min) | 2401 | 4 |" in row[0]
    assert row[0].endswith("| 700 + 500 |  |")
    assert doc.read_text().endswith(f"{run_figures.END}\ntail\n")
    assert json.loads(records.read_text())[0]["commit"] == "abc1234"
    assert run_figures.main(["--check"]) == 0
    doc.write_text(doc.read_text().replace("1500 s", "900 s"))
    assert run_figures.main(["--check"]) == 1
