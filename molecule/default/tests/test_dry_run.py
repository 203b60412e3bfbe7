"""A dry run of the converged node: site.yml with --check --diff (as an operator runs it before a real run) reports
no change and shows no difference, and fails nothing. Run from the verifier with molecule's own inventory and
settings, after idempotence."""

import os
import subprocess
import tempfile
from pathlib import Path

import testinfra.utils.ansible_runner
from playbook_output import changed_tasks, default_output_env, play_recap

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY).get_hosts("all")[:1]
CONVERGE = Path(__file__).resolve().parents[1] / "converge.yml"


def test_check_diff_on_the_converged_node_changes_nothing_and_shows_no_difference(host):
    with tempfile.TemporaryDirectory() as runs:  # not one of the converge runs test_modules_run_once.py counts
        cmd = ["ansible-playbook", "-i", INVENTORY, "--check", "--diff", str(CONVERGE)]
        run = subprocess.run(cmd, capture_output=True, text=True, env=default_output_env(MODULE_RUNS_DIR=runs),
                             timeout=1800, check=False)  # fmt: skip
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    recap = play_recap(out)
    assert recap and all(c["changed"] == c["unreachable"] == c["failed"] == 0 for c in recap.values()), (
        recap, changed_tasks(out))  # fmt: skip
    diffs = [line for line in out.splitlines() if line.startswith(("--- before", "+++ after"))]
    assert diffs == [], out[-4000:]
