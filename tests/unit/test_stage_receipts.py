"""Stage receipts (plugins/module_utils/stage_receipt.py, plugins/modules/stage_receipt.py,
plugins/filter/stage_receipt.py): a stage skips only when every input and every watched item still matches, and
says what differs otherwise. The module runs here as Ansible runs it (python -m with JSON arguments) on files in a
temporary directory; dpkg and systemctl are the real ones where the machine has them."""

from __future__ import annotations

import json
import os
import pwd
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
from ansible_collections.llmops.sglang.plugins.filter import stage_receipt as filters  # noqa: E402
from ansible_collections.llmops.sglang.plugins.module_utils import stage_receipt as receipts  # noqa: E402
from tests.unit import _module_run  # noqa: E402

GPU = {"gpu_count": 8, "driver_version": "580.95.05",
       "gpus": [{"index": 0, "memory_total_mib": 97887, "memory_used_mib": 0, "memory_free_mib": 97887}]}  # fmt: skip


def run_module(args: dict, check_mode: bool = False) -> dict:
    return _module_run.run_module("stage_receipt", args, check_mode)


@pytest.fixture
def host(tmp_path):
    conf = tmp_path / "etc" / "pin.pref"
    conf.parent.mkdir()
    conf.write_text("Package: nvidia-driver\nPin: version 580.95.05-1\n")
    conf.chmod(0o644)
    site = tmp_path / "venv" / "site-packages"
    site.mkdir(parents=True)
    (site / "torch-2.9.1.dist-info").mkdir()
    watch = {"files": [str(conf), str(tmp_path / "never-written")], "trees": [str(site)],
             "users": [pwd.getpwuid(os.getuid()).pw_name], "groups": ["root"]}  # fmt: skip
    inputs = filters.stage_input_digests({"llmops_driver_version": "580.95.05-1", "preflight_gpu": GPU})
    base = {"directory": str(tmp_path / "stages"), "stage": "gpu_stack", "inputs": inputs}
    return {"conf": conf, "site": site, "watch": watch, "inputs": inputs, "base": base, "tmp": tmp_path}


def test_a_stage_without_a_receipt_runs_and_the_record_makes_the_next_check_match(host):
    first = run_module({**host["base"], "state": "check"})
    assert first["converged"] is False
    assert first["differences"] == ["no receipt of the gpu_stack stage on this host yet"]
    recorded = run_module({**host["base"], "state": "record", "watch": host["watch"]})
    assert recorded["changed"] is True
    path = Path(host["base"]["directory"]) / "gpu_stack.json"
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    assert oct(path.parent.stat().st_mode & 0o777) == "0o700"
    again = run_module({**host["base"], "state": "check"})
    assert again["converged"] is True, again
    assert again["msg"] == "the gpu_stack stage matches its receipt: nothing to do"
    # Recording the same state again writes nothing.
    assert run_module({**host["base"], "state": "record", "watch": host["watch"]})["changed"] is False


@pytest.mark.parametrize(
    "drift, expected",
    [
        (lambda h: h["conf"].write_text("Package: nvidia-driver\nPin: version 580.105.08-1\n"), "file {conf}: was"),
        (lambda h: h["conf"].chmod(0o666), "file {conf}: was -rw-r--r--"),
        (lambda h: h["conf"].unlink(), "now absent"),
        (
            lambda h: (h["site"] / "torch-2.9.1.dist-info").rename(h["site"] / "torch-2.8.0.dist-info"),
            "entries of {site}: was",
        ),
        (lambda h: (h["tmp"] / "never-written").write_text("x"), "file {tmp}/never-written: was absent"),
    ],
    ids=["content", "mode", "removed", "reinstalled package", "appeared"],
)
def test_drift_in_any_watched_item_runs_the_stage_and_names_the_item(host, drift, expected):
    run_module({**host["base"], "state": "record", "watch": host["watch"]})
    drift(host)
    found = run_module({**host["base"], "state": "check"})
    assert found["converged"] is False
    text = expected.format(conf=host["conf"], site=host["site"], tmp=host["tmp"])
    assert any(text in d for d in found["differences"]), found["differences"]
    assert found["msg"].startswith("the gpu_stack stage runs: ")


def test_a_changed_setting_or_fact_runs_the_stage_and_names_it(host):
    run_module({**host["base"], "state": "record", "watch": host["watch"]})
    gpu = json.loads(json.dumps(GPU))
    gpu["driver_version"] = "580.105.08"
    changed = filters.stage_input_digests({"llmops_driver_version": "580.105.08-1", "preflight_gpu": gpu})
    found = run_module({**host["base"], "inputs": changed, "state": "check"})
    assert found["differences"] == ["input llmops_driver_version changed", "input preflight_gpu changed"]


def test_gpu_memory_in_use_is_not_a_change_of_the_gpus():
    busy = json.loads(json.dumps(GPU))
    busy["gpus"][0].update(memory_used_mib=90000, memory_free_mib=7887)
    assert receipts.digest(busy) == receipts.digest(GPU)
    other = json.loads(json.dumps(GPU))
    other["gpus"][0]["memory_total_mib"] = 81559
    assert receipts.digest(other) != receipts.digest(GPU)


def test_check_mode_never_writes_a_receipt(host):
    out = run_module({**host["base"], "state": "record", "watch": host["watch"]}, check_mode=True)
    assert out["changed"] is True
    assert not (Path(host["base"]["directory"]) / "gpu_stack.json").exists()


def test_a_receipt_of_another_collection_version_or_an_unreadable_one_runs_the_stage(host):
    run_module({**host["base"], "state": "record", "watch": host["watch"]})
    path = Path(host["base"]["directory"]) / "gpu_stack.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "version": 0}))
    assert run_module({**host["base"], "state": "check"})["differences"] == [
        "the receipt was written by another version of the collection"
    ]
    path.write_text("{half")
    assert run_module({**host["base"], "state": "check"})["converged"] is False


def test_a_bad_watch_list_fails_in_one_line_and_writes_nothing(host):
    out = run_module({**host["base"], "state": "record", "watch": {"file": ["/etc/hostname"]}})
    assert out["failed"] is True
    assert out["msg"].startswith("Expected a watch list of the gpu_stack stage; expected the keys files, trees")
    assert "\n" not in out["msg"]
    assert not (Path(host["base"]["directory"]) / "gpu_stack.json").exists()


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="needs dpkg")
def test_packages_are_matched_by_binary_or_source_name_with_version_and_hold():
    lines = ["libnvidia-gl-580:amd64 580.95.05-1 hi  nvidia-graphics-drivers",
             "nvidia-driver 580.95.05-1 hi  nvidia-graphics-drivers",
             "bash 5.2.15-2+b7 ii  bash"]  # fmt: skip
    one = receipts.packages_state(["*nvidia*"], lines)
    assert one.endswith("(2 packages)")
    unheld = [lines[0], lines[1].replace(" hi ", " ii "), lines[2]]
    assert receipts.packages_state(["*nvidia*"], unheld) != one
    assert receipts.packages_state(["*nvidia*"], lines[:2]) == one
    # The real dpkg database of this machine: its own packages are found, a pattern with none gives 0.
    real = receipts.host_state({"packages": ["bash"]})
    assert next(iter(real.values())).endswith("(1 packages)")


def test_the_settings_of_a_stage_are_its_roles_declared_options_without_run_time_facts():
    names = filters.stage_settings(["nvidia_driver", "nvidia_repo", "cuda_toolkit"])
    assert {"llmops_driver_version", "nvidia_repo_url", "cuda_toolkit_default", "nvidia_driver_hold"} <= set(names)
    # Published at run time by some role: facts, not settings (the playbook names the facts a stage reads).
    assert not {"preflight_gpu", "nvidia_repo_pending", "llmops_defaults_installed_packages",
                "nvidia_driver_receipt_watch"} & set(names)  # fmt: skip
    build = filters.stage_settings(["llmops.sglang.python_env", "sglang", "flash_attn"])
    assert {"sglang_version", "sglang_sm120_fix", "flash_attn_version", "python_env_torch_version"} <= set(build)
    assert "python_env_facts" not in build
    with pytest.raises(ValueError, match=r"Expected a role of llmops\.sglang; found 'nvidia'"):
        filters.stage_settings(["nvidia"])


def test_the_collection_digest_changes_with_the_code_of_the_stage(tmp_path, monkeypatch):
    tree = tmp_path / "collection"
    shutil.copytree(ROOT / "roles" / "cuda_toolkit", tree / "roles" / "cuda_toolkit")
    (tree / "plugins").mkdir()
    (tree / "plugins" / "x.py").write_text("A = 1\n")
    monkeypatch.setattr(filters, "COLLECTION", str(tree))
    monkeypatch.setattr(filters, "_DIGESTS", {})
    before = filters.collection_digest(["cuda_toolkit"])
    (tree / "plugins" / "x.py").write_text("A = 2\n")
    monkeypatch.setattr(filters, "_DIGESTS", {})
    assert filters.collection_digest(["cuda_toolkit"]) != before


@pytest.mark.parametrize(
    "stage, run_tags, skip_tags, enabled, applies",
    [
        ("build", ("all",), (), True, True),
        ("build", ("build",), (), True, False),
        ("gpu_stack", ("all",), ("cuda",), True, False),
        ("gpu_stack", ("all",), ("always",), True, False),
        ("gpu_stack", ("all",), ("molecule-notest", "notest"), True, True),
        ("gpu_stack", ("all",), (), False, False),
        ("", ("all",), (), True, False),
    ],
    ids=[
        "whole stage",
        "--tags",
        "--skip-tags of the stage",
        "--skip-tags always",
        "--skip-tags of no stage task",
        "switched off",
        "not a stage's play",
    ],
)
def test_receipts_apply_only_to_a_whole_stage(stage, run_tags, skip_tags, enabled, applies):
    """roles/llmops_defaults/vars/main.yml's switch, rendered by Ansible's templating as the play holds it (ansible-core
    gives the tags as tuples)."""
    import yaml
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    expr = yaml.safe_load((ROOT / "roles/llmops_defaults/vars/main.yml").read_text())[
        "llmops_defaults_stage_receipts_apply"
    ]
    stage_tags = {"gpu_stack": ["driver", "cuda"], "build": ["build"]}.get(stage, [])
    variables = {"llmops_stage_receipts": enabled, "llmops_stage": stage, "ansible_run_tags": run_tags,
                 "ansible_skip_tags": skip_tags, "llmops_stage_tags": stage_tags}  # fmt: skip
    out = Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expr))
    assert out is applies


def _render(expr, variables):
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expr))


@pytest.mark.parametrize(
    "verdicts, settled",
    [
        ({"a": True, "b": True}, "server"),
        ({"a": True, "b": False}, ""),
        ({"a": True, "b": None}, ""),  # a host whose check did not run (no registered verdict)
    ],
    ids=["every host matches", "one host differs", "one host unchecked"],
)
def test_a_stage_is_settled_only_when_its_receipt_matches_on_every_host_of_the_play(verdicts, settled):
    """roles/llmops_defaults/tasks/stage_check.yml's verdict, rendered as Ansible renders it."""
    import yaml

    tasks = yaml.safe_load((ROOT / "roles/llmops_defaults/tasks/stage_check.yml").read_text())
    fact = next(t for t in tasks if "llmops_defaults_settled_stage" in t.get("ansible.builtin.set_fact", {}))
    expr = fact["ansible.builtin.set_fact"]["llmops_defaults_settled_stage"]
    hostvars = {h: {} if v is None else {"llmops_defaults_stage_receipt": {"converged": v}}
                for h, v in verdicts.items()}  # fmt: skip
    out = _render(expr, {"llmops_stage": "server", "ansible_play_hosts": list(verdicts), "hostvars": hostvars})
    assert out == settled


@pytest.mark.parametrize(
    "settled_stage, force, build_set, revision, settled",
    [
        ("server", False, "", "", True),
        ("build", False, "", "", False),  # the verdict of another stage's play
        ("", False, "", "", False),
        ("server", True, "", "", False),  # server_force_restart (playbooks/rolling_restart.yml)
        ("server", False, "previous", "", False),  # relative to the running set: every run moves it
        ("server", False, "", "previous", False),
        ("server", False, "v0.5.9-5144393b9d39216c", "current", True),
    ],
)
def test_the_server_role_takes_the_settled_path_only_on_its_own_stages_verdict(
    settled_stage, force, build_set, revision, settled
):
    import yaml

    expr = yaml.safe_load((ROOT / "roles/server/vars/main.yml").read_text())["server_settled"]
    variables = {"llmops_stage": "server", "llmops_defaults_settled_stage": settled_stage,
                 "server_force_restart": force, "server_build_set": build_set,
                 "server_model_revision": revision}  # fmt: skip
    assert _render(expr, variables) is settled
    # another playbook's play that includes the role later in the same run (fleet_switch.yml): never settled
    assert _render(expr, {**variables, "llmops_stage": ""}) is False


def test_the_server_stages_inputs_leave_out_the_rolls_name_and_the_other_replicas():
    import yaml

    play = next(p for p in yaml.safe_load((ROOT / "playbooks/server.yml").read_text()) if "roles" in p)
    v = play["vars"]
    names = set(filters.stage_settings(v["llmops_stage_roles"])) - set(v["llmops_stage_ignore"])
    # a setting that changes what the stage leaves is an input; the roll's name changes with every run
    assert {"server_extra_args", "server_mem_fraction_static", "llmops_server_api_key", "llmops_firewall"} <= names
    assert not {"llmops_roll_id", "llmops_fleet", "server_before_restart"} & names
    assert v["llmops_stage_end_play"] is False
    facts = {"preflight_gpu", "model_commit", "fleet_firewall_plan", "server_receipt_topology"}
    assert facts == set(v["llmops_stage_facts"])
    # every name the playbook ignores is a setting of the stage's roles (a typo would ignore nothing)
    assert set(v["llmops_stage_ignore"]) <= set(filters.stage_settings(v["llmops_stage_roles"]))
