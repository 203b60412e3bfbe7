"""A dry run of the converged node: site.yml with --check --diff (as an operator runs it before a real run) reports
no change and shows no difference, and fails nothing. Run from the verifier with molecule's own inventory and
settings, after idempotence."""

import os
import re
import subprocess
import tempfile
from pathlib import Path

import testinfra.utils.ansible_runner

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY).get_hosts("all")[:1]
CONVERGE = Path(__file__).resolve().parents[1] / "converge.yml"


def test_check_diff_on_the_converged_node_changes_nothing_and_shows_no_difference(host):
    with tempfile.TemporaryDirectory() as runs:  # not one of the converge runs test_modules_run_once.py counts
        env = dict(os.environ, ANSIBLE_STDOUT_CALLBACK="default", ANSIBLE_NOCOLOR="1", MODULE_RUNS_DIR=runs)
        env.pop("ANSIBLE_FORCE_COLOR", None)
        cmd = ["ansible-playbook", "-i", INVENTORY, "--check", "--diff", str(CONVERGE)]
        run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800, check=False)
    out = run.stdout + run.stderr
    assert run.returncode == 0, out[-4000:]
    recap = re.findall(r"^(\S+)\s+:\s+ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", out, re.M)
    changed = re.findall(r"^TASK \[(.+?)\] \*+\n(?:(?!TASK \[).*\n)*?changed: \[", out, re.M)
    assert recap and all((c, u, f) == ("0", "0", "0") for _, c, u, f in recap), (recap, changed)
    diffs = [line for line in out.splitlines() if line.startswith(("--- before", "+++ after"))]
    assert diffs == [], out[-4000:]
