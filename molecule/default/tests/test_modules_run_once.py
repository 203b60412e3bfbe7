"""gpu_facts runs once per host per converged site.yml: every stage takes the GPUs preflight found at the start of the
run (preflight_gpu) instead of asking nvidia-smi again.

Counted by the test callback tests/integration/callback_plugins/module_runs.py (enabled in molecule.yml), which writes
per playbook run how often each llmops.sglang module ran (ok, changed or failed; skipped tasks did not run) on each
host. This scenario's converge is site.yml on a bare node (no driver) and its idempotence step is the converged
re-run. Before this change a site.yml ran gpu_facts 7 times per host on a converged host (issue 24: 7-9).
"""

import json
import os
from pathlib import Path

RUNS = Path(os.environ["MOLECULE_EPHEMERAL_DIRECTORY"]) / "module-runs"


def converge_runs():
    """The counts of this scenario's converge playbook runs since its last create, oldest first."""
    records = sorted((json.loads(p.read_text()) for p in RUNS.glob("*.json")), key=lambda r: r["started"])
    created = [r["started"] for r in records if r["playbook"].endswith("/create.yml")]
    since = created[-1] if created else 0
    return [r for r in records if r["playbook"].endswith("/converge.yml") and r["started"] > since]


def test_gpu_facts_runs_once_per_host_in_a_converged_site_yml():
    runs = converge_runs()
    assert len(runs) == 2, f"expected converge and idempotence, found {len(runs)} converge runs in {RUNS}"
    first, rerun = runs
    for host, counts in rerun["runs"].items():
        assert counts.get("llmops.sglang.gpu_facts") == 1, (host, counts)
    # The first run on a bare node: preflight reads the PCI bus (and again with the current PCI id database, since
    # Debian 12's predates Blackwell), then the driver stage asks nvidia-smi once after it installed the driver.
    for host, counts in first["runs"].items():
        assert counts.get("llmops.sglang.gpu_facts") == 3, (host, counts)


STAGE_ROLES = {f"llmops.sglang.{r}" for r in ("nvidia_driver", "nvidia_repo", "cuda_toolkit", "python_env", "sglang")}


def test_the_converged_rerun_skips_the_driver_and_build_stages_on_their_receipts():
    first, rerun = converge_runs()
    ran_first = {t["role"] for t in first["tasks"] if t.get("status", {}).get("ran")}
    ran_rerun = {t["role"] for t in rerun["tasks"] if t.get("status", {}).get("ran")}
    assert STAGE_ROLES <= ran_first, ran_first
    assert not STAGE_ROLES & ran_rerun, ran_rerun
    for host, counts in first["runs"].items():
        assert counts.get("llmops.sglang.stage_receipt") == 6, (host, counts)  # three checks, three records
        assert counts.get("llmops.sglang.build_plan", 0) >= 1, (host, counts)
    for host, counts in rerun["runs"].items():
        assert counts.get("llmops.sglang.stage_receipt") == 3, (host, counts)  # the three checks alone
        assert "llmops.sglang.build_plan" not in counts, (host, counts)


def test_the_converged_rerun_proves_the_settled_server_ready_without_starting_it():
    first, rerun = converge_runs()
    for counts in first["runs"].values():
        assert counts.get("llmops.sglang.sglang_server", 0) >= 1 and counts.get("llmops.sglang.sglang_attempt"), counts
        assert counts.get("llmops.sglang.sglang_bench") == 1, counts  # the benchmark after the start, once
    ran = [t["task"] for t in rerun["tasks"] if t.get("status", {}).get("ran")]
    for host, counts in rerun["runs"].items():
        # no launch, no planner, no unit or firewall table written; the proof's GPU reading under load, once
        # nor a benchmark: it runs only after a start
        assert not {"llmops.sglang.sglang_server", "llmops.sglang.sglang_attempt", "llmops.sglang.sglang_bench"} & set(
            counts
        ), (host, counts)
        assert counts.get("llmops.sglang.gpu_health") == 1, (host, counts)
    for proof in ("List the served models", "Ask the model one chat question", "Scrape SGLang's Prometheus metrics",
                  "Read the deployment record that is already on the host"):  # fmt: skip
        assert any(proof in t for t in ran), (proof, ran)
    assert not any("Write the systemd unit" in t or "Write the firewall table" in t for t in ran), ran
