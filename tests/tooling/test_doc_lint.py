"""scripts/doc-lint.py (make lint): the user-facing docs of this checkout pass, and each rule fails, naming the file
and line, on a scratch tree that breaks it."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "doc-lint.py"
_spec = importlib.util.spec_from_file_location("doc_lint", SCRIPT)
doc_lint = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(doc_lint)

MODULE = '''DOCUMENTATION = r"""
---
module: thing
short_description: A thing
version_added: "{version}"
description:
  - {text}
"""
'''


@pytest.fixture
def tree(tmp_path):
    (tmp_path / "galaxy.yml").write_text("namespace: llmops\nname: sglang\nversion: 0.3.0\n")
    (tmp_path / "Makefile").write_text(".PHONY: demo\ndemo:\n\ttrue\ntest: setup\n\ttrue\n")
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "memory.md").write_text("# Memory\n\n## The plan, worked out\n\ntext\n")
    (tmp_path / "roles" / "server" / "defaults").mkdir(parents=True)
    (tmp_path / "roles" / "server" / "defaults" / "main.yml").write_text("server_tp: auto\n")
    (tmp_path / "roles" / "server" / "README.md").write_text("# server\n\nSee [memory](../../docs/memory.md).\n")
    (tmp_path / "plugins" / "modules").mkdir(parents=True)
    (tmp_path / "plugins" / "modules" / "thing.py").write_text(MODULE.format(version="0.3.0", text="Does it."))
    return tmp_path


def lint(root):
    return doc_lint.Linter(root).run()


def readme(tree, text):
    (tree / "README.md").write_text(text)
    return lint(tree)


def test_this_checkout_passes():
    p = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, check=False, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr


def test_a_clean_scratch_tree_passes(tree):
    text = (
        "# x\n\nRun `make demo`, then `make test`. See [the plan](docs/memory.md#the-plan-worked-out),"
        " `docs/memory.md`, `server_tp`, SGLang's PR #14311 and the model commit `3f2a9c0d4b1e7a55`.\n\n"
        "```\nissue 12 at abc1234\n```\n"
    )
    assert readme(tree, text) == []


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("Fixed (issue 24).\n", "internal work-item reference 'issue 24'"),
        ("Items 2 and 3 are in.\n", "internal work-item reference 'Items 2'"),
        ("TODO: PCI detection.\n", "development remark 'TODO'"),
        ("Measured at c35f845 on one node.\n", "commit hash 'c35f845'"),
        ("See [gone](docs/nothing.md).\n", "link 'docs/nothing.md' does not resolve"),
        ("See [gone](docs/memory.md#no-such-part).\n", "memory.md has no heading with the anchor #no-such-part"),
        ("Read `docs/nothing.md`.\n", "path 'docs/nothing.md' does not exist"),
        ("Run `make benchmarks`.\n", "'make benchmarks': the Makefile has no such target"),
        ("Set `server_port`.\n", "variable 'server_port' is named nowhere"),
    ],
)
def test_each_rule_names_the_file_and_line(tree, text, says):
    found = readme(tree, "# x\n\n" + text)
    assert len(found) == 1 and found[0].startswith("README.md:3: ") and says in found[0], found


def test_a_role_readme_and_a_new_docs_page_are_checked_without_being_listed(tree):
    (tree / "roles" / "server" / "README.md").write_text("# server\n\n[x](../../docs/missing.md)\n")
    (tree / "docs" / "new-page.md").write_text("# New\n\nSince issue 9.\n")
    found = lint(tree)
    assert any(f.startswith("roles/server/README.md:3: link") for f in found), found
    assert any(f.startswith("docs/new-page.md:3: internal work-item") for f in found), found


def test_module_documentation_is_checked_and_version_added_is_bounded_by_galaxy(tree):
    mod = tree / "plugins" / "modules" / "thing.py"
    mod.write_text(MODULE.format(version="0.9.0", text="Added for item 4."))
    found = lint(tree)
    assert "plugins/modules/thing.py:5: version_added 0.9.0 is later than the collection's version 0.3.0" in found
    assert any(f.startswith("plugins/modules/thing.py:7: internal work-item reference 'item 4'") for f in found)


def test_a_module_utils_docstring_and_a_playbooks_header_carry_no_work_item(tree):
    (tree / "plugins" / "module_utils").mkdir()
    (tree / "plugins" / "module_utils" / "rules.py").write_text('# c\n"""The rules (issue 25, item 6)."""\nX = 1\n')
    (tree / "playbooks").mkdir()
    (tree / "playbooks" / "roll.yml").write_text("---\n# Roll the fleet (issue 28 item 2).\n- hosts: all\n# issue 9\n")
    found = lint(tree)
    assert found == [
        "plugins/module_utils/rules.py:2: internal work-item reference 'issue 25': say what the file does",
        "plugins/module_utils/rules.py:2: internal work-item reference 'item 6': say what the file does",
        "playbooks/roll.yml:2: internal work-item reference 'issue 28': say what the file does",
        "playbooks/roll.yml:2: internal work-item reference 'item 2': say what the file does",
    ], found  # a comment below the header is the code's, not checked


def test_developer_pages_may_log_runs_but_their_links_must_resolve(tree):
    (tree / "docs" / "development.md").write_text("# Dev\n\nRun at c35f845 (issue 24).\n\n[x](nope.md)\n")
    assert lint(tree) == ["docs/development.md:5: link 'nope.md' does not resolve: no nope.md"]


def test_the_command_line_exits_1_with_one_line_per_finding(tree):
    (tree / "README.md").write_text("# x\n\nissue 3\n")
    p = subprocess.run(
        [sys.executable, str(SCRIPT), "--root", str(tree)], capture_output=True, text=True, check=False, timeout=60
    )
    assert p.returncode == 1 and p.stdout.startswith("README.md:3: internal work-item reference"), p.stdout
    assert "1 finding(s)" in p.stderr
