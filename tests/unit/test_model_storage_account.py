"""The model role with model_storage_account in check mode on a host that lacks the account (a first dry run of a
shared-storage fleet): the run passes, says it would create the account and then download as it, and changes
nothing - no account, no directory, nothing asked of the hub (the download is not planned as an account that does not
exist yet)."""

from __future__ import annotations

import pwd

from _localhost_play import run_tasks_from

NOWHERE = "http://127.0.0.1:9"  # nothing listens: a dry run that asked the hub would fail


def test_a_dry_run_that_would_create_the_account_changes_nothing(tmp_path):
    models = tmp_path / "models"
    variables = {
        "llmops_model_repo_id": "sim-org/GLM-5-NVFP4",
        "model_hf_endpoint": NOWHERE,
        "llmops_model_dir": str(models / "glm"),
        "llmops_model_revisions_dir": str(tmp_path / "share" / "glm.revisions"),
        "llmops_model_revisions_keep": 1,
        "llmops_state_dir": str(tmp_path / "state"),
        "llmops_env_file": str(tmp_path / "etc" / "sglang.env"),
        "llmops_model_share_port": 8765,
        "model_token_file": str(tmp_path / "etc" / "hf-token.env"),
        "model_storage": "shared",
        "model_storage_account": "llmops-dry-run",
        "model_storage_uid": 4243,
    }
    before = sorted(p.name for p in tmp_path.iterdir())
    rc, out = run_tasks_from(tmp_path, "llmops.sglang.model", "main", variables, args=("--check",))
    assert rc == 0, out[-3000:]
    assert "would create the account llmops-dry-run, then download as it" in out, out[-3000:]
    assert "Download and verify the model snapshot" in out and "cannot list" not in out
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, "play.yml"])  # no directory made
    assert "llmops-dry-run" not in {p.pw_name for p in pwd.getpwall()}, "a dry run created the account"
