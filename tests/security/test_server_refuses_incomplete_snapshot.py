"""The server role refuses to (re)start SGLang on a model snapshot that is unfinished or not the commit the model stage
recorded: the check task of roles/server/tasks/validate.yml (before the unit changes), its vars rendered with Ansible's
own templating exactly as the task holds them; each case is named after the directory it refuses or accepts."""

import base64
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from events import GUARD

ROLE = Path(__file__).resolve().parents[2] / "roles" / "server"
TASKS = yaml.safe_load((ROLE / "tasks" / "validate.yml").read_text())
CHECK = next(t for t in TASKS if t["name"].startswith("Stop when the model snapshot is unfinished"))
COMMIT = "e" * 40


def problem(marker=None, partial=False, model_commit=None, raw=None):
    slurp = {"failed": True, "msg": "file not found"}
    if marker is not None or raw is not None:
        slurp = {"content": base64.b64encode((raw or json.dumps(marker)).encode()).decode(), "encoding": "base64"}
    variables = {
        "inventory_hostname": "gpu1",
        "llmops_model_dir": "/opt/models/m",
        "server_snapshot_marker": slurp,
        "server_snapshot_partial": {"stat": {"exists": partial}},
    }
    if model_commit is not None:
        variables["model_commit"] = model_commit
    variables.update({k: trust_as_template(v) for k, v in CHECK["vars"].items()})
    templar = Templar(loader=DataLoader(), variables=variables)
    out = templar.template(trust_as_template(CHECK["vars"]["server_snapshot_problem"]))
    refused = templar.evaluate_conditional(trust_as_template(CHECK["when"]))
    assert refused == (out != "ok")
    return "" if out == "ok" else out


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


def test_the_check_runs_in_validate_before_anything_changes():
    i = TASKS.index(CHECK)
    assert CHECK["ansible.builtin.fail"]["msg"] == "{{ server_snapshot_problem }}"
    read_only = {"set_fact", "fail", "stat", "getent", "slurp", "assert", "path_probe"}  # path_probe: stat and read
    before = TASKS[: i + 1]
    # The GPUs are found by preflight's discovery (gpu_facts, once per run; roles/preflight/tasks/discover.yml), the
    # only include before the check.
    includes = [t["ansible.builtin.include_role"] for t in before if "ansible.builtin.include_role" in t]
    assert includes == [{"name": "llmops.sglang.preflight", "tasks_from": "discover"}]
    modules = {k.rsplit(".", 1)[-1] for t in before for k in t if k.startswith(("ansible.builtin.", "llmops."))}
    # build_set only reads which build set and which model revision to run (action inspect) before the check
    assert [
        (t["llmops.sglang.build_set"].get("kind", "build"), t["llmops.sglang.build_set"]["action"])
        for t in before
        if "llmops.sglang.build_set" in t
    ] == [("build", "inspect"), ("model", "inspect")]
    read_only |= {"build_set"}
    # the one file included before the check settles the topology with set_fact alone (also read by settled.yml)
    included = [t["ansible.builtin.include_tasks"] for t in before if "ansible.builtin.include_tasks" in t]
    assert included == ["topology.yml"]
    topology = yaml.safe_load((ROLE / "tasks" / "topology.yml").read_text())
    assert topology and all(set(t) - {"name"} == {"ansible.builtin.set_fact"} for t in topology), topology
    assert modules - {"gpu_facts", "include_role", "include_tasks"} <= read_only, modules  # nothing changes the host
    # ... and the discovery the server includes installs nothing: its one package step is preflight's own
    # (guarded by preflight_discover_installs, which only preflight's gpus.yml sets, true unless installing from an
    # offline bundle).
    discover = yaml.safe_load((ROLE.parent / "preflight" / "tasks" / "discover.yml").read_text())
    flat = [t for task in discover for t in [task, *task.get("block", []), *task.get("always", [])]]
    installs = [t for t in flat if {"ansible.builtin.apt", "ansible.builtin.package"} & set(t)]
    assert installs and all("preflight_discover_installs | default(false) | bool" in t["when"] for t in installs)
    gpus = yaml.safe_load((ROLE.parent / "preflight" / "tasks" / "gpus.yml").read_text())
    key = "preflight_discover_installs"
    sets = [t["vars"][key] for t in gpus if key in t.get("vars", {})]
    # installs only without an offline bundle (whose host has no route to apt's sources)
    assert sets == ["{{ llmops_bundle_dir | length == 0 }}"], sets
    assert "preflight_discover_installs" not in "".join(
        p.read_text() for p in ROLE.parent.glob("*/tasks/*.yml") if p.parent.parent.name != "preflight"
    )


@pytest.mark.parametrize(
    ("case", "refused"),
    [("complete", False), ("own-model", False), ("unfinished", True), ("other-commit", True)],
)
def test_the_check_tasks_run_by_ansible_refuse_only_what_they_should(tmp_path, case, refused):
    """The tasks from the read of the model directory (one path_probe) to the check, as ansible-playbook runs them
    (connection local): an empty result must not read as a refusal (ansible-core 2.19 turns an empty template result
    into None, and None | trim is the string 'None')."""
    i = TASKS.index(CHECK)
    start = next(j for j, t in enumerate(TASKS) if "server_run_probe" == t.get("register"))
    play = tmp_path / "play.yml"
    play.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": TASKS[start : i + 1]}]))
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    # server_model_dir_to_run: roles/server/vars/main.yml's value on a host without revisions (llmops_model_dir);
    # the account and SGLang's Python, checked between the read and this check, are there.
    extra = {
        "llmops_model_dir": str(model),
        "server_model_dir_to_run": str(model),
        "server_python_to_run": sys.executable,
        "server_sglang_record_file": str(tmp_path / "sglang.json"),
        "server_set_target": "",
        "llmops_service_user": "svc",
        "server_host_probe": {"users": {"svc": {"exists": True}}},
        "ansible_python_interpreter": sys.executable,
    }
    if case != "own-model":
        (model / ".llmops-snapshot.json").write_text(json.dumps({"commit": COMMIT}))
        extra["model_commit"] = "f" * 40 if case == "other-commit" else COMMIT
    if case == "unfinished":
        (model / ".llmops-partial").mkdir()
    bin_dir = Path(sys.executable).parent
    r = subprocess.run(
        [str(bin_dir / "ansible-playbook"), "-i", "localhost,", "-c", "local", "-e", json.dumps(extra), str(play)],
        capture_output=True,
        text=True,
        check=False,
        timeout=GUARD,
    )
    assert (r.returncode != 0) == refused, r.stdout[-3000:]
    if refused:
        assert "nothing was changed. Expected" in r.stdout and "Traceback" not in r.stdout + r.stderr
