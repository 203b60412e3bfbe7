"""Build sets side by side: naming, retention, the disk check, the pointer switch (module_utils/build_sets.py), and the
build_set module end to end on a temporary root (real symlinks, real renames, check mode)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import build_sets as bs
from ansible_collections.llmops.sglang.plugins.module_utils.build_plan import fingerprint

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "plugins" / "modules" / "build_set.py"
REQUEST = {
    "torch": "2.9.1+cu128",
    "cuda": "12.8",
    "archs": ["120"],
    "sglang": {"version": "v0.5.9", "sm120_fix": "patch"},
}


# --- naming -----------------------------------------------------------------------------------------------------


def test_a_set_is_named_by_its_label_and_the_wheelhouse_fingerprint_of_its_request():
    name = bs.set_name(REQUEST, "v0.5.9")
    assert name == f"v0.5.9-{fingerprint(REQUEST)}"
    assert bs.set_name(dict(reversed(list(REQUEST.items()))), "v0.5.9") == name  # key order does not matter


def test_any_changed_input_names_a_new_set():
    changed = {**REQUEST, "sglang": {"version": "v0.5.9", "sm120_fix": "require"}}
    assert bs.set_name(changed, "v0.5.9") != bs.set_name(REQUEST, "v0.5.9")
    assert bs.set_name({**REQUEST, "torch": "2.9.1+cu129"}, "v0.5.9") != bs.set_name(REQUEST, "v0.5.9")


@pytest.mark.parametrize(
    ("label", "prefix"),
    [
        ("v0.5.9", "v0.5.9-"),
        ("sm120-fix-on-v0.5.8", "sm120_fix_on_v0.5.8-"),
        ("", "set-"),
        ("../../etc", "etc-"),
        ("a" * 60, "a" * 40 + "-"),
    ],
)
def test_the_label_becomes_a_safe_path_component(label, prefix):
    name = bs.set_name(REQUEST, label)
    assert name.startswith(prefix) and "/" not in name and bs.check_name(name) == name


@pytest.mark.parametrize("bad", ["", "../x", "a/b", "-rf", ".", "x" * 101])
def test_a_set_name_that_is_not_a_path_component_is_refused(bad):
    with pytest.raises(ValueError, match="expected a build set name"):
        bs.check_name(bad)


def test_an_empty_request_is_refused():
    with pytest.raises(ValueError, match="non-empty mapping"):
        bs.set_name({}, "v0.5.9")


def test_the_current_set_is_the_pointer_targets_name_only_inside_the_root():
    assert bs.current_of("/opt/sglang/venvs/v0.5.9-ab", "/opt/sglang/venvs") == "v0.5.9-ab"
    assert bs.current_of("/opt/sglang/venvs/v0.5.9-ab/", "/opt/sglang/venvs/") == "v0.5.9-ab"
    assert bs.current_of("/elsewhere/v0.5.9-ab", "/opt/sglang/venvs") is None
    assert bs.current_of(None, "/opt/sglang/venvs") is None


# --- retention --------------------------------------------------------------------------------------------------


def test_retention_keeps_current_the_new_set_and_the_k_newest_previous_ones():
    on_disk = ["a", "b", "c", "d", "new"]
    out = bs.retention(on_disk, complete=["a", "b", "c", "d"], history=["d", "c", "b", "a"], current="d", keep=2,
                       protect=["new"])  # fmt: skip
    assert out["keep"] == ["d", "new", "c", "b"]
    assert out["previous"] == ["c", "b"]
    assert out["remove"] == ["a"]


def test_retention_removes_an_interrupted_set_that_is_no_longer_asked_for_but_never_counts_it_as_kept():
    out = bs.retention(["a", "b", "half"], complete=["a", "b"], history=["b", "half", "a"], current="b", keep=1)
    assert out["keep"] == ["b", "a"] and out["remove"] == ["half"]


def test_retention_with_keep_zero_keeps_only_what_runs_and_what_is_built():
    out = bs.retention(
        ["a", "b", "c"], complete=["a", "b", "c"], history=["b", "a"], current="b", keep=0, protect=["c"]
    )
    assert out["keep"] == ["b", "c"] and out["remove"] == ["a"]


def test_a_switch_keeps_a_set_the_pointer_never_named():
    out = bs.retention(
        ["a", "b", "next"], complete=["a", "b", "next"], history=["a"], current="b", keep=0, unswitched=True
    )
    assert out["keep"] == ["b", "next"] and out["remove"] == ["a"]


def test_retention_never_removes_the_current_set_even_when_it_is_not_in_the_history():
    out = bs.retention(["x", "y"], complete=["x", "y"], history=[], current="x", keep=0)
    assert out["remove"] == ["y"]


@pytest.mark.parametrize("keep", [-1, "2", True, 1.5])
def test_a_keep_that_is_not_a_whole_number_is_refused(keep):
    with pytest.raises(ValueError, match="llmops_build_sets_keep"):
        bs.retention([], [], [], None, keep)


# --- disk check -------------------------------------------------------------------------------------------------


def test_the_disk_check_counts_what_retention_frees():
    assert bs.disk_check(4 * bs.GIB, 9 * bs.GIB, freed_bytes=6 * bs.GIB)["ok"]
    short = bs.disk_check(4 * bs.GIB, 9 * bs.GIB, freed_bytes=1 * bs.GIB, where="/opt/sglang/venvs", name="v0.5.9-ab")
    assert not short["ok"]
    assert short["msg"] == (
        "Expected at least 9.0 GiB free in /opt/sglang/venvs for the build set v0.5.9-ab (the size of the largest set "
        "on this host, or llmops_build_set_min_free_gib); found 5.0 GiB free after removing the sets beyond "
        "llmops_build_sets_keep. Free disk space, or lower llmops_build_sets_keep so that older sets are removed. "
        "Nothing was installed."
    )


def test_exactly_enough_disk_fits():
    assert bs.disk_check(9 * bs.GIB, 9 * bs.GIB)["ok"]
    assert not bs.disk_check(9 * bs.GIB - 1, 9 * bs.GIB)["ok"]


# --- switch decision --------------------------------------------------------------------------------------------


def test_switching_to_the_set_that_runs_changes_nothing():
    assert bs.switch_plan("b", "b", ["b", "a"], ["a", "b"], "link") == {"target": "b", "switch": False, "error": None}


def test_switching_to_a_new_complete_set_moves_the_pointer():
    assert bs.switch_plan("c", "b", ["b", "a"], ["a", "b", "c"], "link")["switch"] is True


def test_a_first_switch_creates_the_pointer_and_an_unkeyed_venv_is_replaced():
    assert bs.switch_plan("c", None, [], ["c"], "absent")["switch"] is True
    assert bs.switch_plan("c", None, [], ["c"], "dir")["switch"] is True


def test_previous_is_the_newest_complete_set_before_current():
    plan = bs.switch_plan("previous", "c", ["c", "half", "b", "a"], ["a", "b", "c"], "link")
    assert plan == {"target": "b", "switch": True, "error": None}
    assert bs.new_history("b", ["c", "b", "a"]) == ["b", "c", "a"]  # a second rollback goes back to c


def test_a_rollback_with_no_previous_set_is_refused_in_one_line():
    plan = bs.switch_plan("previous", "c", ["c"], ["c"], "link")
    assert plan["switch"] is False
    assert plan["error"] == (
        "Expected a previous build set to roll back to; found none besides the current one (c). Nothing was changed."
    )


def test_an_incomplete_set_is_never_switched_to():
    plan = bs.switch_plan("half", "b", ["b"], ["b"], "link")
    assert plan["switch"] is False and "Run the build stage (--tags build)" in plan["error"]


# --- the module on a real directory -----------------------------------------------------------------------------


def run(tmp_path, **args):
    argfile = tmp_path / "args.json"
    base = {"root": str(tmp_path / "venvs"), "pointer": str(tmp_path / "venv"), "min_free_gib": 0.0}
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {**base, **args}}))
    proc = subprocess.run([sys.executable, str(MODULE), str(argfile)], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)  # fmt: skip
    return proc.returncode, json.loads(proc.stdout)


def make_set(tmp_path, name, complete=True, size=0):
    d = tmp_path / "venvs" / name
    (d / "bin").mkdir(parents=True)
    (d / "bin" / "python").write_text(name)
    if size:
        (d / "blob").write_bytes(b"x" * size)
    if complete:
        (d / bs.MARKER).write_text(json.dumps({"name": name}))
    return d


def test_the_module_switches_atomically_keeps_k_and_rolls_back(tmp_path):
    for n in ["s1", "s2", "s3", "s4"]:
        make_set(tmp_path, n)
    pointer = tmp_path / "venv"
    for n in ["s1", "s2", "s3"]:
        rc, res = run(tmp_path, action="switch", name=n, keep=1)
        assert rc == 0 and res["changed"] and res["current"] == n, res
    assert os.readlink(pointer) == str(tmp_path / "venvs" / "s3")
    assert (pointer / "bin" / "python").read_text() == "s3"
    assert res["removed"] == ["s1"] and res["previous"] == "s2"
    # s4 was built but never switched to: a switch keeps it (the next upgrade's set), the build stage's prepare of
    # another set removes it
    assert sorted(p.name for p in (tmp_path / "venvs").iterdir() if p.is_dir()) == ["s2", "s3", "s4"]
    rc, prep = run(tmp_path, action="prepare", name="s5", keep=1)
    assert rc == 0 and prep["removed"] == ["s4"]
    rc, again = run(tmp_path, action="switch", name="s3", keep=1)
    assert rc == 0 and again["changed"] is False
    rc, back = run(tmp_path, action="switch", name="previous", keep=1)
    assert rc == 0 and back["current"] == "s2" and back["previous"] == "s3"
    assert json.loads((tmp_path / "venvs" / bs.HISTORY).read_text())["history"] == ["s2", "s3"]
    assert not list(tmp_path.glob("venv.new-*"))  # no temporary link left behind


def test_check_mode_reports_the_switch_and_changes_nothing(tmp_path):
    make_set(tmp_path, "s1")
    make_set(tmp_path, "s2")
    run(tmp_path, action="switch", name="s1")
    rc, res = run(tmp_path, action="switch", name="s2", _ansible_check_mode=True)
    assert rc == 0 and res["changed"] and res["current"] == "s2"
    assert os.readlink(tmp_path / "venv") == str(tmp_path / "venvs" / "s1")


def test_an_unkeyed_venv_becomes_the_legacy_set_and_stays_the_rollback_target(tmp_path):
    old = tmp_path / "venv"
    (old / "bin").mkdir(parents=True)
    (old / "bin" / "python").write_text("old")
    make_set(tmp_path, "s1")
    rc, res = run(tmp_path, action="switch", name="s1")
    assert rc == 0 and res["current"] == "s1" and res["previous"].startswith("legacy-"), res
    assert (tmp_path / "venvs" / res["previous"] / "bin" / "python").read_text() == "old"
    rc, _back = run(tmp_path, action="switch", name="previous")
    assert rc == 0 and (tmp_path / "venv" / "bin" / "python").read_text() == "old"


def test_the_build_stage_adopts_an_unkeyed_venv_with_its_record_before_installing_beside_it(tmp_path):
    old = tmp_path / "venv"
    (old / "bin").mkdir(parents=True)
    (old / "bin" / "python").write_text("old")
    record = tmp_path / "sglang.json"
    record.write_text('{"version": "0.5.8"}')
    rc, res = run(tmp_path, action="prepare", name="s1", legacy_sglang_record=str(record))
    assert rc == 0 and res["changed"] and res["current"].startswith("legacy-"), res
    assert (old / "bin" / "python").read_text() == "old"  # the same files under the same path, now through the pointer
    assert os.path.islink(old)
    assert json.loads((tmp_path / "venvs" / res["current"] / "llmops-sglang.json").read_text()) == {"version": "0.5.8"}
    make_set(tmp_path, "s1")
    rc, sw = run(tmp_path, action="switch", name="s1")
    assert rc == 0 and sw["previous"] == res["current"]


def test_a_first_install_points_the_pointer_at_the_set_being_built_and_later_ones_do_not(tmp_path):
    rc, res = run(tmp_path, action="point", name="s1")
    assert rc == 0 and res["changed"] and os.readlink(tmp_path / "venv") == str(tmp_path / "venvs" / "s1")
    rc, res = run(tmp_path, action="point", name="s2")  # s1 never completed: nothing runs from it
    assert rc == 0 and res["changed"] and os.readlink(tmp_path / "venv") == str(tmp_path / "venvs" / "s2")
    (tmp_path / "venvs" / "s2" / bs.MARKER).write_text("{}")
    rc, res = run(tmp_path, action="point", name="s3")  # s2 is complete: only the server role moves the pointer
    assert rc == 0 and not res["changed"] and os.readlink(tmp_path / "venv") == str(tmp_path / "venvs" / "s2")


def test_switching_to_an_interrupted_set_fails_and_leaves_the_pointer(tmp_path):
    make_set(tmp_path, "s1")
    make_set(tmp_path, "half", complete=False)
    run(tmp_path, action="switch", name="s1")
    rc, res = run(tmp_path, action="switch", name="half")
    assert rc == 1 and "Expected the build set half to be complete" in res["msg"]
    assert os.readlink(tmp_path / "venv") == str(tmp_path / "venvs" / "s1")


def test_prepare_removes_old_sets_then_refuses_a_set_that_does_not_fit(tmp_path):
    for n in ["s1", "s2", "s3"]:
        make_set(tmp_path, n, size=1 << 20)
        run(tmp_path, action="switch", name=n)
    rc, res = run(tmp_path, action="prepare", name="s4", keep=1)
    assert rc == 0 and res["removed"] == ["s1"] and res["disk"]["ok"], res
    assert res["disk"]["need_bytes"] >= 1 << 20  # the largest set measured
    rc, res = run(tmp_path, action="prepare", name="s5", keep=1, min_free_gib=1e9)
    assert rc == 1 and res["msg"].startswith("Expected at least") and res["msg"].endswith("Nothing was installed.")
    assert (tmp_path / "venvs" / "s2").is_dir()  # a refusal removes nothing


def test_inspect_reports_the_state_and_what_a_switch_would_do(tmp_path):
    make_set(tmp_path, "s1")
    make_set(tmp_path, "s2")
    run(tmp_path, action="switch", name="s1")
    run(tmp_path, action="switch", name="s2")
    rc, res = run(tmp_path, action="inspect", name="previous")
    assert rc == 0 and res["changed"] is False
    assert (res["current"], res["previous"], res["pointer_kind"]) == ("s2", "s1", "link")
    assert res["plan"] == {"target": "s1", "switch": True, "error": None}


# --- what of upgrade.yml's re-run, rollback.yml and --check a unit can prove (the rest needs nodes: make test-daytwo)


def test_a_rerun_of_the_upgrade_with_nothing_changed_changes_no_set(tmp_path):
    """upgrade.yml again with the same request: the build stage's prepare of the set that already runs, its point (only
    on a first install) and the server role's switch to it each report no change and remove nothing."""
    for n in ["s1", "s2"]:
        make_set(tmp_path, n)
        run(tmp_path, action="switch", name=n, keep=1)
    before = sorted(p.name for p in (tmp_path / "venvs").iterdir())
    for action in ["prepare", "point", "inspect", "switch"]:
        rc, res = run(tmp_path, action=action, name="s2", keep=1)
        assert rc == 0 and res["changed"] is False and res.get("removed", []) == [], (action, res)
        assert (res["current"], res["previous"]) == ("s2", "s1"), (action, res)
    assert sorted(p.name for p in (tmp_path / "venvs").iterdir()) == before
    assert os.readlink(tmp_path / "venv") == str(tmp_path / "venvs" / "s2")


def test_rollback_goes_back_and_run_again_goes_forward_and_a_named_set_is_reached(tmp_path):
    """rollback.yml's three forms at the pointer (fleet_switch.yml's server_build_set): previous, previous again (the
    header: running it again goes forward again), and -e rollback_to=NAME; in check mode none moves the pointer."""
    for n in ["s1", "s2", "s3"]:
        make_set(tmp_path, n)
        run(tmp_path, action="switch", name=n, keep=2)
    rc, res = run(tmp_path, action="switch", name="previous", keep=2, _ansible_check_mode=True)
    assert rc == 0 and res["changed"] and res["current"] == "s2"
    assert os.readlink(tmp_path / "venv") == str(tmp_path / "venvs" / "s3")
    rc, back = run(tmp_path, action="switch", name="previous", keep=2)
    assert rc == 0 and (back["current"], back["previous"]) == ("s2", "s3"), back
    rc, forward = run(tmp_path, action="switch", name="previous", keep=2)
    assert rc == 0 and (forward["current"], forward["previous"]) == ("s3", "s2"), forward
    rc, named = run(tmp_path, action="switch", name="s1", keep=2)
    assert rc == 0 and named["current"] == "s1" and (tmp_path / "venv" / "bin" / "python").read_text() == "s1"


@pytest.mark.parametrize("playbook", ["upgrade.yml", "rollback.yml", "fleet_switch.yml", "model_revision.yml"])
def test_the_day_two_playbooks_pass_the_syntax_check_with_the_sim_inventory(playbook):
    env = {**os.environ, "ANSIBLE_COLLECTIONS_PATH": str(ROOT), "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}
    binary = str(Path(sys.executable).with_name("ansible-playbook"))
    cmd = [binary, "-i", str(ROOT / "inventories" / "sim"), "--syntax-check", str(ROOT / "playbooks" / playbook)]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


def test_retention_removes_only_the_collections_own_directories():
    out = bs.retention(
        ["models", "s1", "s2", "s3"], ["s1", "s2", "s3"], ["s2", "s1"], "s3", 0, owned=["s1", "s2", "s3"]
    )
    assert out["remove"] == ["s1", "s2"]  # not models: it holds neither marker
    assert bs.retention(["models", "s3"], ["s3"], [], "s3", 0)["remove"] == ["models"]  # without owned: every name


def test_a_root_that_is_a_shared_directory_loses_nothing_the_collection_did_not_make(tmp_path):
    """llmops_build_sets_dir set to a directory that holds other things (the inputs refuse /opt itself): only
    directories holding the set marker or a virtualenv's pyvenv.cfg are ever removed."""
    for n in ["s1", "s2"]:
        make_set(tmp_path, n)
        run(tmp_path, action="switch", name=n, keep=0)
    foreign = tmp_path / "venvs" / "models"
    (foreign / "GLM-5").mkdir(parents=True)
    interrupted = tmp_path / "venvs" / "s0"
    interrupted.mkdir()
    (interrupted / "pyvenv.cfg").write_text("home = /usr/bin\n")  # a set whose build was interrupted: ours
    rc, res = run(tmp_path, action="prepare", name="s3", keep=0)
    assert rc == 0 and res["removed"] == ["s0"], res  # s1 went with the switch to s2 (keep 0)
    assert (foreign / "GLM-5").is_dir()
