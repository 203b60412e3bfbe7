"""A second control node (a CI job's fresh checkout of the inventory: no credentials/, an empty wheelhouse of its own)
runs the whole site.yml against the converged, serving node: driver, CUDA, build, model, server and router stages
change nothing, nothing is built or fetched into its wheelhouse, the server keeps its keys and is not restarted. Run
from the verifier with molecule's own settings, after idempotence."""

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import testinfra.utils.ansible_runner
from playbook_output import changed_tasks, default_output_env, play_recap

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY).get_hosts("all")[:1]
CONVERGE = Path(__file__).resolve().parents[1] / "converge.yml"
ENV_FILE = "/etc/sglang/sglang.env"  # the server's keys (llmops_env_file)
KEPT = "/var/lib/llmops-sglang-build/wheels"  # where the node, its own builder, keeps what it built
BUILD_LOGS = f"find {KEPT} -name build.log 2>/dev/null | sort"


def secrets_of(inventory: Path) -> dict:
    creds = inventory / "credentials"
    return {p.name: p.read_text() for p in sorted(creds.iterdir())} if creds.is_dir() else {}


def test_site_yml_from_a_second_control_node_changes_nothing_builds_nothing_and_restarts_nothing(host):
    source = Path(INVENTORY).parent
    before = {
        "pid": host.run("systemctl show -p MainPID --value sglang.service").stdout.strip(),
        "keys": host.run(f"sha256sum {ENV_FILE}").stdout.split()[0],  # compared as digests: never printed
        "logs": host.run(BUILD_LOGS).stdout,
    }
    assert before["pid"] not in ("", "0"), before  # serving (what the node built, if it built: before["logs"])
    with tempfile.TemporaryDirectory() as work:
        ci = Path(work) / "ci-inventory"
        shutil.copytree(source, ci, ignore=shutil.ignore_patterns("credentials"))  # links copied as their files
        assert not (ci / "credentials").exists()
        wheelhouse = Path(work) / "wheelhouse"
        wheelhouse.mkdir()
        runs = Path(work) / "runs"  # not one of the converge runs test_modules_run_once.py counts
        runs.mkdir()
        env = default_output_env(MODULE_RUNS_DIR=str(runs))
        cmd = ["ansible-playbook", "-i", str(ci / Path(INVENTORY).name), "-e", f"python_env_wheelhouse={wheelhouse}",
               str(CONVERGE)]  # fmt: skip
        t0 = time.monotonic()
        run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=1800, check=False)
        seconds = time.monotonic() - t0
        out = run.stdout + run.stderr
        fetched = sorted(str(p.relative_to(wheelhouse)) for p in wheelhouse.rglob("*") if p.is_file())
        taken = secrets_of(ci)
    assert run.returncode == 0, out[-4000:]
    recap = play_recap(out)
    assert recap and all(c["changed"] == c["unreachable"] == c["failed"] == 0 for c in recap.values()), (
        recap, changed_tasks(out))  # fmt: skip
    assert fetched == [], f"the second control node's wheelhouse got {fetched}"
    assert host.run(BUILD_LOGS).stdout == before["logs"]  # no build ran (none of the builder's logs is new)
    assert host.run("systemctl show -p MainPID --value sglang.service").stdout.strip() == before["pid"]
    assert host.run(f"sha256sum {ENV_FILE}").stdout.split()[0] == before["keys"]
    assert taken == secrets_of(source)  # whatever the first control node generated, the second took, not made anew
    print(f"\nsite.yml from a second control node: {seconds:.0f} s, changed=0, 0 builds, nothing fetched")
