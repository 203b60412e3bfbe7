"""Model revisions side by side (issue 28 item 3), the pointer half: the build_set module with kind model keeps one
directory per commit in llmops_model_revisions_dir and llmops_model_dir a link to the one served - first download,
adoption of a directory from before revisions, switch, rollback, "current", retention by llmops_model_revisions_keep."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "plugins" / "modules" / "build_set.py"
A, B, C, D = ("a" * 40, "b" * 40, "c" * 40, "d" * 40)


def run(tmp_path, **args):
    argfile = tmp_path / "args.json"
    base = {"kind": "model", "root": str(tmp_path / "m.revisions"), "pointer": str(tmp_path / "m"), "keep": 1}
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {**base, **args}}))
    proc = subprocess.run([sys.executable, str(MODULE), str(argfile)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)  # fmt: skip
    return proc.returncode, json.loads(proc.stdout)


def revision(tmp_path, commit, complete=True):
    d = tmp_path / "m.revisions" / commit
    d.mkdir(parents=True)
    (d / "config.json").write_text(json.dumps({"commit": commit}))
    if complete:
        (d / ".llmops-snapshot.json").write_text(json.dumps({"commit": commit, "files": {}}))
    return d


def served(tmp_path) -> str:
    return json.loads((tmp_path / "m" / "config.json").read_text())["commit"]


def test_a_first_download_links_the_model_dir_and_a_later_one_leaves_it_to_the_server(tmp_path):
    revision(tmp_path, A)
    rc, res = run(tmp_path, action="point", name=A)
    assert rc == 0 and res["changed"] and served(tmp_path) == A
    revision(tmp_path, B)
    rc, res = run(tmp_path, action="point", name=B)
    assert rc == 0 and not res["changed"] and served(tmp_path) == A  # the server stage moves it, replica by replica


def test_a_switch_moves_the_link_keeps_one_revision_for_rollback_and_removes_older_ones(tmp_path):
    for c in (A, B, C):
        revision(tmp_path, c)
    assert run(tmp_path, action="point", name=A)[0] == 0
    rc, res = run(tmp_path, action="switch", name=B)
    assert rc == 0 and res["changed"] and res["previous"] == A and served(tmp_path) == B
    rc, res = run(tmp_path, action="switch", name=C)
    assert rc == 0 and res["removed"] == [A] and res["previous"] == B and served(tmp_path) == C
    assert sorted(p.name for p in (tmp_path / "m.revisions").iterdir() if p.is_dir()) == [B, C]
    rc, res = run(tmp_path, action="switch", name="previous")
    assert rc == 0 and served(tmp_path) == B and res["previous"] == C


def test_current_stays_where_the_link_is_and_changes_nothing(tmp_path):
    revision(tmp_path, A)
    revision(tmp_path, B)
    run(tmp_path, action="point", name=A)
    rc, res = run(tmp_path, action="inspect", name="current")
    assert rc == 0 and res["plan"] == {"target": A, "switch": False, "error": None}
    rc, res = run(tmp_path, action="switch", name="current")
    assert rc == 0 and not res["changed"] and served(tmp_path) == A


def test_a_revision_still_downloading_is_never_switched_to_and_never_removed(tmp_path):
    for c in (A, B, C):
        revision(tmp_path, c)
    revision(tmp_path, D, complete=False)
    run(tmp_path, action="point", name=A)
    run(tmp_path, action="switch", name=B)
    run(tmp_path, action="switch", name=C)
    rc, res = run(tmp_path, action="switch", name=D)
    assert rc == 1 and "Expected the model revision " + D + " to be complete" in res["msg"], res
    assert "Run the model stage (--tags model)" in res["msg"] and "\n" not in res["msg"]
    rc, res = run(tmp_path, action="prepare")  # before a download: keep 1 previous, never the unfinished one
    assert rc == 0 and (tmp_path / "m.revisions" / D).is_dir() and served(tmp_path) == C


def test_a_model_directory_from_before_revisions_becomes_the_revision_its_marker_names(tmp_path):
    old = tmp_path / "m"
    old.mkdir()
    (old / "config.json").write_text(json.dumps({"commit": A}))
    (old / ".llmops-snapshot.json").write_text(json.dumps({"commit": A, "files": {}}))
    rc, res = run(tmp_path, action="prepare")
    assert rc == 0 and res["changed"] and res["current"] == A, res
    assert os.path.islink(old) and os.readlink(old) == str(tmp_path / "m.revisions" / A) and served(tmp_path) == A


def test_an_unfinished_model_directory_from_before_revisions_is_refused_in_one_line(tmp_path):
    old = tmp_path / "m"
    (old / ".llmops-partial").mkdir(parents=True)
    rc, res = run(tmp_path, action="prepare")
    assert rc == 1 and res["msg"].startswith(f"Expected {old} (llmops_model_dir) to be absent or a link into"), res
    assert "Nothing was changed." in res["msg"] and "\n" not in res["msg"]
    assert old.is_dir() and not old.is_symlink() and not (tmp_path / "m.revisions").exists()


@pytest.mark.parametrize("bad", ["../x", "a/b", "-rf"])
def test_a_revision_that_is_not_a_path_component_is_refused(tmp_path, bad):
    rc, res = run(tmp_path, action="switch", name=bad)
    assert rc == 1 and "expected a model revision name" in res["msg"], res


def test_the_history_is_kept_beside_the_link_and_nothing_is_written_among_the_revisions(tmp_path):
    """Each host's own history, also where the revisions are a share that only its owner's account may write."""
    for c in (A, B):
        revision(tmp_path, c)
    revisions = tmp_path / "m.revisions"
    before = sorted(p.name for p in revisions.iterdir())
    assert run(tmp_path, action="point", name=A)[0] == 0
    rc, res = run(tmp_path, action="switch", name=B)
    assert rc == 0 and res["previous"] == A and served(tmp_path) == B, res
    assert sorted(p.name for p in revisions.iterdir()) == before  # no history, no temporary file among them
    assert json.loads((tmp_path / ".m.history.json").read_text())["history"] == [B, A]


def test_a_history_kept_among_the_revisions_by_an_earlier_release_is_read_until_the_link_moves(tmp_path):
    for c in (A, B, C):
        revision(tmp_path, c)
    (tmp_path / "m").symlink_to(tmp_path / "m.revisions" / B)
    (tmp_path / "m.revisions" / "history.json").write_text(json.dumps({"history": [B, A]}))
    rc, res = run(tmp_path, action="inspect")
    assert rc == 0 and res["current"] == B and res["previous"] == A, res
    rc, res = run(tmp_path, action="switch", name=C)
    assert rc == 0 and res["previous"] == B and res["removed"] == [A], res
    assert json.loads((tmp_path / ".m.history.json").read_text())["history"] == [C, B]
