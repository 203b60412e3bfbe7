"""An unrelated llmops.sglang in ~/.ansible/collections changes nothing that `make test` runs, and nothing it runs
writes one there.

HOME points at a temporary home holding a decoy: an old llmops.sglang (version 0.0.1) with one module and no roles.
Each way `make test` reaches the collection then runs with that HOME: ansible-doc as the Makefile, the node tests and
a user inside the checkout configure Ansible; every molecule scenario's syntax check (molecule's prerun would install
the checkout over the decoy); and ansible-test sanity's ansible-doc test. Each must use this checkout, and the decoy
must be left exactly as it was.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from conftest import ROOT, clean_env, run, tool, tree_fingerprint

pytestmark = pytest.mark.slow

DECOY_MODULE = '''#!/usr/bin/python
DOCUMENTATION = r"""
module: gpu_facts
short_description: DECOY - an unrelated old copy of llmops.sglang
description: [an unrelated old copy]
author: [nobody (@nobody)]
"""
'''


@pytest.fixture(scope="module")
def decoy_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("decoy-home")
    col = home / ".ansible" / "collections" / "ansible_collections" / "llmops" / "sglang"
    (col / "plugins" / "modules").mkdir(parents=True)
    (col / "meta").mkdir()
    (col / "meta" / "runtime.yml").write_text("---\nrequires_ansible: '>=2.15.0'\n")
    (col / "plugins" / "modules" / "gpu_facts.py").write_text(DECOY_MODULE)
    info = {"namespace": "llmops", "name": "sglang", "version": "0.0.1", "authors": ["nobody"], "readme": "README.md"}
    info |= {"tags": [], "description": "decoy", "license": [], "license_file": None, "dependencies": {}}
    info |= {"repository": None, "documentation": None, "homepage": None, "issues": None}
    manifest = {"collection_info": info, "file_manifest_file": {"name": "FILES.json"}, "format": 1}
    (col / "MANIFEST.json").write_text(json.dumps(manifest))
    # ansible-test keeps its virtualenvs under ~/.ansible/test: share the real ones (no rebuild, no download).
    real = Path(os.path.expanduser("~/.ansible/test"))
    real.mkdir(parents=True, exist_ok=True)
    (home / ".ansible" / "test").symlink_to(real)
    return home


def decoy_state(home: Path) -> dict:
    return tree_fingerprint(home / ".ansible" / "collections")


def files_outside_molecule_ephemeral(home: Path) -> list[str]:
    """Files under ``home`` other than the decoy, the ansible-test link and molecule's ~/.ansible/tmp/molecule.*."""
    out = []
    for f in home.rglob("*"):
        parts = f.relative_to(home).parts
        if f.is_dir() or parts[:2] in ((".ansible", "collections"), (".ansible", "test")):
            continue
        if parts[:2] == (".ansible", "tmp") and len(parts) > 2 and parts[2].startswith("molecule."):
            continue
        out.append("/".join(parts))
    return sorted(out)


# How make test's pieces configure Ansible: the Makefile's exports, the node tests (ANSIBLE_* removed, ANSIBLE_CONFIG
# set), and a user inside the checkout (ansible.cfg found in the working directory).
SETUPS = {
    "make": {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_COLLECTIONS_PATH": str(ROOT)},
    "node-tests": {"ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")},
    "checkout": {},
}


@pytest.mark.parametrize("setup", sorted(SETUPS))
def test_ansible_resolves_the_checkout_not_the_copy_in_home(decoy_home, setup):
    before = decoy_state(decoy_home)
    p = run(
        [tool("ansible-doc"), "-t", "module", "--json", "llmops.sglang.gpu_facts"],
        cwd=ROOT,
        env=clean_env(HOME=str(decoy_home), **SETUPS[setup]),
    )
    assert p.returncode == 0, p.stdout + p.stderr
    doc = json.loads(p.stdout)["llmops.sglang.gpu_facts"]["doc"]
    assert "DECOY" not in doc["short_description"]
    assert Path(doc["filename"]).resolve() == ROOT / "plugins" / "modules" / "gpu_facts.py"
    assert decoy_state(decoy_home) == before


def test_molecule_uses_the_checkout_and_leaves_home_collections_alone(decoy_home):
    before = decoy_state(decoy_home)
    env = clean_env(HOME=str(decoy_home), **SETUPS["make"])
    p = run([tool("molecule"), "syntax", "--all"], cwd=ROOT, env=env, timeout=600)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out[-4000:]
    scenarios = sorted(d.name for d in (ROOT / "molecule").iterdir() if (d / "molecule.yml").exists())
    for s in scenarios:  # the syntax check ran for every scenario, and passed (the decoy has no roles)
        assert f"playbook: {ROOT}/molecule/{s}/converge.yml" in out, s
    assert decoy_state(decoy_home) == before  # molecule's prerun would have installed the checkout over it
    assert "Performing prerun" not in out
    # and it wrote no file in the home outside its own ephemeral directories (~/.ansible/tmp/molecule.*)
    assert files_outside_molecule_ephemeral(decoy_home) == []


def test_sanity_uses_the_checkout_and_leaves_home_collections_alone(decoy_home):
    before = decoy_state(decoy_home)
    env = clean_env(HOME=str(decoy_home), PATH=f"{ROOT / '.venv' / 'bin'}:{os.environ.get('PATH', '')}")
    p = run(
        ["bash", str(ROOT / "scripts" / "ansible-test-sanity"), "--test", "ansible-doc"], cwd=ROOT, env=env, timeout=600
    )
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    assert 'Running sanity test "ansible-doc"' in p.stdout + p.stderr
    assert decoy_state(decoy_home) == before
