"""A second control node (a CI job's fresh checkout) runs the build stage against the built fleet with an empty
wheelhouse of its own: the hosts' build records match, so it builds nothing, fetches nothing and changes nothing; a
host that lacks a wheel gets the one the builder keeps, collected into that wheelhouse, not a new build. Run from the
verifier with molecule's own inventory and settings, after idempotence."""

import json
import os
import subprocess
from pathlib import Path

import testinfra.utils.ansible_runner
from playbook_output import changed_tasks, default_output_env, play_recap

INVENTORY = os.environ["MOLECULE_INVENTORY_FILE"]
testinfra_hosts = [h for h in testinfra.utils.ansible_runner.AnsibleRunner(INVENTORY).get_hosts("all") if h == "bd1"]
CONVERGE = Path(__file__).resolve().parents[1] / "converge.yml"
KEPT = "/var/lib/llmops-sglang-build/wheels"  # where the builder keeps what it built (llmops_build_dir/wheels)
BUILD_LOGS = f"find {KEPT} -name build.log 2>/dev/null | sort"


def converge_with(wheelhouse: Path) -> tuple[int, str]:
    """(exit status, output) of the build scenario's converge from a control node whose wheelhouse is ``wheelhouse``
    (ansible-playbook's default output, no colour)."""
    wheelhouse.mkdir()
    cmd = ["ansible-playbook", "-i", INVENTORY, "-e", f"python_env_wheelhouse={wheelhouse}", str(CONVERGE)]
    run = subprocess.run(cmd, capture_output=True, text=True, env=default_output_env(), timeout=1800, check=False)
    return run.returncode, run.stdout + run.stderr


def test_an_empty_wheelhouse_on_another_control_node_builds_nothing_and_changes_nothing(host, tmp_path):
    logs = host.run(BUILD_LOGS).stdout  # bd1 is the fleet's builder: its logs of the wheels it built
    assert logs.count("build.log") == 3, logs
    wheelhouse = tmp_path / "wheelhouse"
    rc, out = converge_with(wheelhouse)
    fetched = sorted(str(p.relative_to(wheelhouse)) for p in wheelhouse.rglob("*") if p.is_file())
    assert rc == 0, out[-4000:]
    recap = play_recap(out)
    assert len(recap) == 2 and all(c["changed"] == c["unreachable"] == c["failed"] == 0 for c in recap.values()), (
        recap, changed_tasks(out))  # fmt: skip
    assert fetched == [], f"the second control node's wheelhouse got {fetched}"
    assert host.run(BUILD_LOGS).stdout == logs  # no build ran


def test_a_host_that_needs_a_wheel_gets_the_one_its_builder_kept_not_a_new_build(host, tmp_path):
    # A host that lacks the SGLang wheel (one that joins the fleet; here bd2 without its record of the installed
    # wheel), run from a control node whose wheelhouse is empty: the wheel bd1 built and keeps under its build
    # directory is collected into that wheelhouse (its sha256 checked against bd1's record) and installed on bd2.
    bd2 = testinfra.get_host(f"ansible://bd2?ansible_inventory={INVENTORY}")
    marker = bd2.run("find /opt/sglang -path '*/llmops-builds/sglang.json'").stdout.split()
    assert len(marker) == 1, marker
    before = json.loads(bd2.file(marker[0]).content_string)
    kept = json.loads(host.file(f"{KEPT}/sglang/{before['fingerprint']}/build.json").content_string)
    assert kept["builder"] == "bd1" and kept["sha256"] == before["sha256"], (kept, before)
    logs = host.run(BUILD_LOGS).stdout
    bd2.run_expect([0], f"rm {marker[0]}")
    wheelhouse = tmp_path / "wheelhouse"
    rc, out = converge_with(wheelhouse)
    entry = wheelhouse / "sglang" / before["fingerprint"]
    collected = sorted(p.name for p in entry.iterdir()) if entry.is_dir() else []
    record = json.loads((entry / "build.json").read_text()) if "build.json" in collected else {}
    others = sorted(p.name for p in wheelhouse.iterdir() if p.name != "sglang")
    assert rc == 0, out[-4000:]
    assert collected == sorted([kept["wheel"], "build.log", "build.json"]) and record == kept, (collected, record)
    assert others == [], f"collected more than the wheel bd2 lacked: {others}"
    assert host.run(BUILD_LOGS).stdout == logs  # no build ran
    assert json.loads(bd2.file(marker[0]).content_string)["sha256"] == kept["sha256"]
    assert "install the wheel bd1 kept from an earlier build" in out, out[-4000:]
