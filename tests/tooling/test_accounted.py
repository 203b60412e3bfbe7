"""scripts/accounted: the command's exit status, CPU-seconds that include processes outside its tree, node counts."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# A fixed amount of work (not a duration) that appends the CPU-seconds it took itself to the file named by its
# argument: the test compares the command's figure with what the same processes used, never with another run.
BURN = (
    "import hashlib, sys, time\nh = bytes()\nfor _ in range(3000000): h = hashlib.sha256(h).digest()\n"
    "open(sys.argv[1], 'a').write('%f\\n' % time.process_time())\n"
)


def run(tmp_path, *command):
    (tmp_path / "scripts").mkdir(exist_ok=True)
    shutil.copy(ROOT / "scripts" / "accounted", tmp_path / "scripts" / "accounted")
    p = subprocess.run(
        [sys.executable, str(tmp_path / "scripts" / "accounted"), "probe", *command],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    return p, json.loads((tmp_path / "build" / "accounted-probe.json").read_text())


def test_exit_status_and_counts_of_converged_nodes(tmp_path):
    script = 'printf "n1 cold\\nn2 cold\\nn3 snapshot\\n" >>"$SIM_CONVERGE_LOG"; exit 3'
    p, figures = run(tmp_path, "bash", "-c", script)
    assert p.returncode == 3, p.stderr
    assert (figures["cold_converges"], figures["snapshot_reuses"]) == (2, 1)
    assert figures["converged_nodes"] == ["n1", "n2", "n3"]
    assert p.stdout.strip().endswith("2 cold converges, 1 snapshot reuses, exit 3"), p.stdout


def test_cpu_of_a_process_that_left_the_tree_is_counted(tmp_path):
    # the command runs the same work twice: once itself, once in a new session that it does not wait for (as sim/node
    # starts nodes and mirrors); the command waits on the file the second writes. Each copy reports its own CPU time.
    burn, used, done = tmp_path / "burn.py", tmp_path / "used", tmp_path / "done"
    burn.write_text(BURN)
    script = (
        f"{sys.executable} {burn} {used}; "
        f"setsid bash -c '{sys.executable} {burn} {used}; touch {done}' </dev/null >/dev/null 2>&1 & "
        f"while [ ! -e {done} ]; do sleep 0.1; done"
    )
    p, figures = run(tmp_path, "bash", "-c", script)
    assert p.returncode == 0, p.stderr
    copies = [float(x) for x in used.read_text().split()]
    assert len(copies) == 2 and min(copies) > 0.1, copies
    if figures["cpu_source"] != "cgroup":
        # without a cgroup the detached process cannot be counted: the line must say so
        assert "reaped children only" in p.stdout
        return
    # both copies are in the figure (the kernel's accounting is per tick: allow a quarter of one copy)
    assert figures["cpu_s"] >= sum(copies) - 0.25 * min(copies), (figures, copies)
