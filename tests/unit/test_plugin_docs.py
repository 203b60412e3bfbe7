"""Every filter the collection defines has its documentation (plugins/filter/<name>.yml), as ansible-doc reads it;
every module declares the collection's attributes (plugins/doc_fragments/attributes.py) and says what it does in
check mode."""

from __future__ import annotations

import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def defined_filters() -> set[str]:
    names = set()
    for path in sorted((ROOT / "plugins" / "filter").glob("*.py")):
        module = importlib.import_module(f"ansible_collections.llmops.sglang.plugins.filter.{path.stem}")
        names |= set(module.FilterModule().filters())
    return names


def test_every_filter_has_its_documentation_file():
    names = defined_filters()
    assert len(names) >= 20
    documented = {p.stem for p in (ROOT / "plugins" / "filter").glob("*.yml")}
    assert names - documented == set()
    assert documented - names == set()
    for name in names:
        doc = yaml.safe_load((ROOT / "plugins" / "filter" / f"{name}.yml").read_text())
        assert doc["DOCUMENTATION"]["name"] == name
        assert doc["DOCUMENTATION"]["short_description"] and doc["RETURN"]["_value"]["description"]
        assert "llmops.sglang." + name in doc["EXAMPLES"], name


def test_ansible_doc_lists_every_filter_with_its_short_description():
    ansible_doc = shutil.which("ansible-doc", path=str(Path(sys.executable).parent)) or "ansible-doc"
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT))
    out = subprocess.run([ansible_doc, "-t", "filter", "--list", "--json", "llmops.sglang"], capture_output=True,
                         text=True, env=env, timeout=120, check=True).stdout  # fmt: skip
    listed = json.loads(out)
    assert {n.removeprefix("llmops.sglang.") for n in listed} == defined_filters()
    assert all(listed.values()), listed


def test_every_module_declares_its_attributes_and_its_check_mode():
    modules = sorted(p.stem for p in (ROOT / "plugins" / "modules").glob("*.py"))
    assert len(modules) >= 12
    for name in modules:
        module = importlib.import_module(f"ansible_collections.llmops.sglang.plugins.modules.{name}")
        raw = yaml.safe_load(module.DOCUMENTATION)
        assert raw["extends_documentation_fragment"] == ["llmops.sglang.attributes"], name
        assert raw["attributes"]["check_mode"]["details"], name
    # as ansible-doc merges them with the fragment
    ansible_doc = shutil.which("ansible-doc", path=str(Path(sys.executable).parent)) or "ansible-doc"
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(ROOT))
    out = subprocess.run([ansible_doc, "-t", "module", "--json", *[f"llmops.sglang.{m}" for m in modules]],
                         capture_output=True, text=True, env=env, timeout=120, check=True).stdout  # fmt: skip
    docs = json.loads(out)
    assert len(docs) == len(modules)
    for name, entry in docs.items():
        attributes = entry["doc"]["attributes"]
        assert set(attributes) == {"check_mode", "diff_mode", "platform"}, name
        assert attributes["check_mode"]["support"] == "full", name
        assert attributes["diff_mode"]["support"] == "none", name
        assert attributes["platform"]["support"] == "full" and attributes["platform"]["platforms"], name
