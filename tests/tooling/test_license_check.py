"""scripts/license-check.py (make lint): passes on this checkout and fails, naming the file, on each way to break the
policy - tried on a copy of the repository's own galaxy.yml, LICENSE and plugin files in a scratch git repository."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "scripts" / "license-check.py"
MODULE = "plugins/modules/gpu_facts.py"
UTIL = "plugins/module_utils/sglang_topology.py"
GPL = "# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)\n"


def run(root):
    return subprocess.run(
        [sys.executable, str(CHECK), "--root", str(root)], capture_output=True, text=True, check=False, timeout=120
    )


@pytest.fixture
def tree(tmp_path):
    for rel in ("galaxy.yml", "LICENSE", MODULE, UTIL, "tests/sanity/README.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / rel, tmp_path / rel)
    return tmp_path


def commit(root):
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)


def test_this_checkout_keeps_the_policy():
    p = run(ROOT)
    assert p.returncode == 0, p.stderr


def test_the_copy_keeps_it_too(tree):
    commit(tree)
    p = run(tree)
    assert p.returncode == 0, p.stderr


def test_a_gpl_header_fails_and_names_the_file(tree):
    f = tree / UTIL
    f.write_text(f.read_text().replace("# Apache License 2.0 (see LICENSE)\n", GPL, 1))
    commit(tree)
    p = run(tree)
    assert p.returncode == 1
    assert f"license-check: {UTIL}: its opening lines declare '{GPL.strip()}'" in p.stderr


def test_a_shipped_file_without_the_header_fails(tree):
    f = tree / MODULE
    f.write_text(f.read_text().replace("# Copyright: llmops.sglang contributors\n", "", 1))
    commit(tree)
    p = run(tree)
    assert p.returncode == 1 and f"{MODULE}: ships in the collection without the license header" in p.stderr


def test_a_file_that_does_not_ship_needs_no_header_but_may_not_declare_another_license(tree):
    (tree / "tests" / "helper.py").write_text("print('no header: tests do not ship')\n")
    commit(tree)
    assert run(tree).returncode == 0
    (tree / "tests" / "helper.py").write_text("# SPDX-License-Identifier: MIT\nprint('x')\n")
    subprocess.run(["git", "add", "-A"], cwd=tree, check=True)
    p = run(tree)
    assert (
        p.returncode == 1 and "tests/helper.py: its opening lines declare '# SPDX-License-Identifier: MIT'" in p.stderr
    )


def test_galaxy_yml_and_license_must_say_apache(tree):
    g = tree / "galaxy.yml"
    g.write_text(g.read_text().replace("  - Apache-2.0\n", "  - GPL-3.0-or-later\n", 1))
    (tree / "LICENSE").write_text("All rights reserved.\n")
    commit(tree)
    p = run(tree)
    assert p.returncode == 1
    assert "galaxy.yml: expected `license: [Apache-2.0]`" in p.stderr and "license=['GPL-3.0-or-later']" in p.stderr
    assert "LICENSE: expected the Apache License 2.0 text" in p.stderr
