"""Issue 25 item 7: the Hugging Face token only where downloads run. The model role writes HF_TOKEN to its own 0600
file (model_token_file) that only hf_snapshot reads, and removes it from the server's EnvironmentFile, which the
long-running SGLang unit loads (roles/server/templates/sglang.service.j2
EnvironmentFile=llmops_env_file, owned by roles/llmops_defaults).

Static checks of the role's tasks and defaults (a node test of the files on a host is not part of this change)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MODEL_TASKS = yaml.safe_load((ROOT / "roles" / "model" / "tasks" / "main.yml").read_text())
MODEL_DEFAULTS = yaml.safe_load((ROOT / "roles" / "model" / "defaults" / "main.yml").read_text())
SHARED_DEFAULTS = yaml.safe_load((ROOT / "roles" / "llmops_defaults" / "defaults" / "main.yml").read_text())
SERVER_UNIT = (ROOT / "roles" / "server" / "templates" / "sglang.service.j2").read_text()


def _walk(tasks):
    for t in tasks:
        yield t
        for key in ("block", "rescue", "always"):
            yield from _walk(t.get(key, []))


def _lineinfiles():
    return [t["ansible.builtin.lineinfile"] for t in _walk(MODEL_TASKS) if "ansible.builtin.lineinfile" in t]


def test_the_token_file_is_not_the_servers_environment_file_by_default():
    assert MODEL_DEFAULTS["model_token_file"] != SHARED_DEFAULTS["llmops_env_file"]
    # the file the model role cleans is the one the server's unit loads
    assert "EnvironmentFile=-{{ llmops_env_file }}" in SERVER_UNIT


def test_the_token_is_written_only_to_the_token_file_0600():
    writes = [t for t in _lineinfiles() if "line" in t and "HF_TOKEN" in t["line"]]
    assert len(writes) == 1
    assert writes[0]["path"] == "{{ model_token_file }}" and writes[0]["mode"] == "0600"


def test_a_token_left_in_the_servers_environment_by_an_earlier_release_is_removed():
    removals = [t for t in _lineinfiles() if t.get("state") == "absent" and t.get("regexp") == "^HF_TOKEN="]
    assert [t["path"] for t in removals] == ["{{ llmops_env_file }}"]


def test_the_download_reads_the_token_from_the_token_file():
    snaps = [t["llmops.sglang.hf_snapshot"] for t in _walk(MODEL_TASKS) if "llmops.sglang.hf_snapshot" in t]
    assert snaps and all(s.get("token_file") == "{{ model_token_file }}" for s in snaps)


SERVER_TASKS = yaml.safe_load((ROOT / "roles" / "server" / "tasks" / "main.yml").read_text())


def _secret_writes(tasks):
    """(index, lineinfile args) of each lineinfile that may create a file holding a secret."""
    flat = list(_walk(tasks))
    return flat, [
        (i, t["ansible.builtin.lineinfile"])
        for i, t in enumerate(flat)
        if "ansible.builtin.lineinfile" in t and t["ansible.builtin.lineinfile"].get("create")
    ]


@pytest.mark.parametrize("tasks", [MODEL_TASKS, SERVER_TASKS], ids=["model token file", "server env file"])
def test_a_secret_file_is_created_empty_and_0600_before_the_secret_goes_in(tasks):
    """lineinfile creates a missing file with the default mode and applies its mode after writing the line; an
    existing file keeps its mode when lineinfile replaces it. So a touch with mode 0600 (times preserved: a re-run
    stays unchanged) comes first for the same path."""
    flat, writes = _secret_writes(tasks)
    assert writes, "no lineinfile creates a secret file: the test would prove nothing"
    for i, args in writes:
        touches = [
            t["ansible.builtin.file"]
            for t in flat[:i]
            if "ansible.builtin.file" in t and t["ansible.builtin.file"].get("path") == args["path"]
        ]
        assert touches, f"no file task creates {args['path']} before its lineinfile"
        touch = touches[-1]
        assert touch["state"] == "touch" and touch["mode"] == "0600" and touch["owner"] == "root", touch
        assert touch["access_time"] == touch["modification_time"] == "preserve", touch
