"""The server role refuses to (re)start SGLang on a model snapshot that is unfinished or not the commit the model stage
recorded (roles/server/templates/snapshot_check.j2, used by roles/server/tasks/validate.yml before the unit changes),
rendered with Ansible's own templating; each case is named after the directory it refuses or accepts."""

import base64
import json
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

ROLE = Path(__file__).resolve().parents[2] / "roles" / "server"
CHECK = (ROLE / "templates" / "snapshot_check.j2").read_text()
COMMIT = "e" * 40


def problem(marker=None, partial=False, model_commit=None, raw=None):
    slurp = {"failed": True, "msg": "file not found"}
    if marker is not None or raw is not None:
        slurp = {"content": base64.b64encode((raw or json.dumps(marker)).encode()).decode(), "encoding": "base64"}
    variables = {
        "inventory_hostname": "gpu1",
        "server_model_path": "/opt/models/m",
        "server_snapshot_marker": slurp,
        "server_snapshot_partial": {"stat": {"exists": partial}},
    }
    if model_commit is not None:
        variables["model_commit"] = model_commit
    return (Templar(loader=DataLoader(), variables=variables).template(trust_as_template(CHECK)) or "").strip()


def test_snapshot_with_an_unfinished_download_is_refused():
    msg = problem(marker={"commit": COMMIT}, partial=True, model_commit=COMMIT)
    assert "found an unfinished download (/opt/models/m/.llmops-partial)" in msg and "\n" not in msg


def test_snapshot_without_its_marker_is_refused_when_the_model_stage_recorded_a_commit():
    msg = problem(model_commit=COMMIT)
    assert "found no marker" in msg and COMMIT in msg and "\n" not in msg


def test_marker_without_a_commit_is_refused():
    assert "to name a commit; found none" in problem(marker={"repo_id": "o/m"})


def test_marker_that_is_not_an_object_is_refused():
    assert "to name a commit; found none" in problem(raw="[1, 2]")


def test_snapshot_of_another_commit_is_refused():
    msg = problem(marker={"commit": "f" * 40}, model_commit=COMMIT)
    assert f"Expected the model at commit {COMMIT}" in msg and "found commit " + "f" * 40 in msg


def test_complete_snapshot_of_the_recorded_commit_starts():
    assert problem(marker={"commit": COMMIT}, model_commit=COMMIT) == ""


def test_complete_snapshot_without_a_model_stage_in_this_run_starts():
    assert problem(marker={"commit": COMMIT}) == ""


def test_a_users_own_model_directory_without_our_marker_starts():
    assert problem() == ""


@pytest.mark.parametrize("name", ["Stop when the model snapshot is unfinished"])
def test_the_check_runs_in_validate_before_anything_changes(name):
    tasks = yaml.safe_load((ROLE / "tasks" / "validate.yml").read_text())
    names = [t["name"] for t in tasks]
    i = next(k for k, n in enumerate(names) if n.startswith(name))
    assert tasks[i]["ansible.builtin.fail"]["msg"] == "{{ server_snapshot_problem }}"
    assert "snapshot_check.j2" in tasks[i]["vars"]["server_snapshot_problem"]
    read_only = {"set_fact", "fail", "stat", "getent", "slurp", "assert"}
    modules = {k.rsplit(".", 1)[-1] for t in tasks[: i + 1] for k in t if k.startswith(("ansible.builtin.", "llmops."))}
    assert modules - {"gpu_facts"} <= read_only, modules  # nothing before the check changes the host
