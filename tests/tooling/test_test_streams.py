"""scripts/test-streams on stand-in parts: a failed part never skips the next one, and the summary names every failure.

The script is copied into a scratch tree with a stub ``sim/node`` (no nodes, no mirrors) and stub parts: ``pytest-run``
prints pytest's short-summary lines and fails for the [others] stream, ``make molecule`` fails one scenario; nothing
here waits on time.
"""

import os
import re
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PYTEST_RUN = """#!/usr/bin/env bash
echo "pytest-run $*" >>"$CALLS"
case "$*" in
  *"not node"*) echo "FAILED tests/mirrors/test_a.py::test_one - AssertionError: boom"
                echo "ERROR tests/sim/test_b.py::test_two - fixture broke"; exit 1 ;;
  *) echo "1 passed"; exit 0 ;;
esac
"""
MAKE = """#!/usr/bin/env bash
echo "make $*" >>"$CALLS"
echo "=== molecule scenario default ==="
echo "molecule: FAILED scenarios: gpu_stack"
exit 1
"""


def tree(tmp_path):
    (tmp_path / "scripts").mkdir(parents=True)
    (tmp_path / "sim").mkdir()
    (tmp_path / "bin").mkdir()
    shutil.copy(ROOT / "scripts" / "test-streams", tmp_path / "scripts" / "test-streams")
    for path, text in (
        ("scripts/pytest-run", PYTEST_RUN),
        ("sim/node", '#!/usr/bin/env bash\necho "sim/node $*" >>"$CALLS"\n'),
        ("bin/make", MAKE),
    ):
        (tmp_path / path).write_text(text)
        (tmp_path / path).chmod(0o755)
    return tmp_path


def run(tmp_path, mode):
    env = dict(os.environ, PATH=f"{tmp_path / 'bin'}:{os.environ['PATH']}", CALLS=str(tmp_path / "calls"))
    env["TEST_STREAMS"] = mode
    return subprocess.run(
        ["bash", str(tmp_path / "scripts" / "test-streams")],
        capture_output=True,
        text=True,
        env=env,
        check=False,
        timeout=120,  # a hang guard only: the stubs return at once
        stdin=subprocess.DEVNULL,
    )


def test_a_failed_pytest_part_does_not_skip_molecule_and_the_summary_names_every_failure(tmp_path):
    for mode in ("parallel", "serial"):
        root = tree(tmp_path / mode)
        p = run(root, mode)
        assert p.returncode == 1, p.stdout + p.stderr
        calls = (root / "calls").read_text()
        assert "make --no-print-directory molecule" in calls  # molecule ran after pytest failed
        assert "sim/node release" in calls and "sim/node teardown" in calls
        summary = p.stdout[p.stdout.index("test-streams: fleet/pytest") :]
        lines = summary.splitlines()
        assert lines[0].startswith("test-streams: fleet/pytest passed in ")
        assert lines[1].startswith("test-streams: nodes/pytest passed in ")
        assert lines[2].startswith("test-streams: others/pytest FAILED (exit 1) in ")
        assert lines[3:5] == [
            "    FAILED tests/mirrors/test_a.py::test_one - AssertionError: boom",
            "    ERROR tests/sim/test_b.py::test_two - fixture broke",
        ]
        assert lines[5].startswith("test-streams: others/molecule FAILED (exit 1) in ")
        assert lines[6] == "    molecule: FAILED scenarios: gpu_stack"
        assert lines[7].startswith("test-streams: builds/molecule FAILED (exit 1) in ")
        assert lines[8] == "    molecule: FAILED scenarios: gpu_stack"
        assert "[others] FAILED tests/mirrors/test_a.py::test_one" in p.stdout  # the stream's own lines, prefixed


def test_all_parts_passing_exits_zero(tmp_path):
    root = tree(tmp_path)
    (root / "scripts" / "pytest-run").write_text('#!/usr/bin/env bash\necho "1 passed"\n')
    (root / "bin" / "make").write_text('#!/usr/bin/env bash\necho "molecule ok"\n')
    p = run(root, "parallel")
    assert p.returncode == 0, p.stdout + p.stderr
    assert [line.split(" in ")[0] for line in p.stdout.splitlines() if line.startswith("test-streams:")] == [
        "test-streams: fleet/pytest passed",
        "test-streams: nodes/pytest passed",
        "test-streams: others/pytest passed",
        "test-streams: others/molecule passed",
        "test-streams: builds/molecule passed",
    ]


def test_every_node_test_runs_in_exactly_one_node_stream(tmp_path):
    """The fleet stream takes the files it lists; the nodes stream takes every other node test (--ignore of those)."""
    root = tree(tmp_path)
    p = run(root, "serial")
    assert p.returncode == 1, p.stdout + p.stderr
    calls = [c.split() for c in (root / "calls").read_text().splitlines() if c.startswith("pytest-run")]
    fleet = next(c for c in calls if c[1] != "tests" and "node" in c)
    nodes = next(c for c in calls if c[1] == "tests" and c[c.index("-m") + 1] == "node")
    listed = [a for a in fleet[1:] if a.endswith(".py")]
    assert listed and all((ROOT / f).is_file() for f in listed)
    assert sorted(a.removeprefix("--ignore=") for a in nodes if a.startswith("--ignore=")) == sorted(listed)
    # the molecule scenarios, split between two streams, are every scenario, once
    makes = [c for c in (root / "calls").read_text().splitlines() if c.startswith("make ")]
    named = " ".join(m.split("SCENARIOS=", 1)[1] for m in makes).split()
    # ... with the one `make test-builds` runs (after make test in .ci/run)
    builds = re.search(r"^TEST_BUILDS_SCENARIOS := (.+)$", (ROOT / "Makefile").read_text(), re.M).group(1).split()
    # ... every time: a line of its own at the top level of the script, not under a condition
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    code = [line.strip() for line in ci if line.strip() and not line.lstrip().startswith("#")]
    assert "make test-builds" in code and not any(w in line for line in code for w in ("if ", "SKIPPED")), ci
    assert [line for line in code if "test-builds" in line] == ["make test-builds"], ci
    scenarios = [p.name for p in (ROOT / "molecule").iterdir() if (p / "molecule.yml").is_file()]
    assert sorted(named + builds) == sorted(scenarios)
