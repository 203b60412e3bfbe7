"""Issue 25 item 7: preflight's pci.ids download is checked before use (plugins/module_utils/pci_ids_check.py, through
gpu_facts' pci_ids_candidate): a captive-portal page, an empty, truncated, oversized, older or altered file is refused
in one line and the installed database stays in use.

Grounded in Debian's own pci.ids packages (trixie's as the current download, bookworm's as the installed database),
fetched by sim/gpu/pci_ids.py from the Debian mirror of this host's apt sources; the bad files are made from them."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.llmops.sglang.plugins.module_utils import pci_ids_check

ROOT = Path(__file__).resolve().parents[2]
MODULE = ROOT / "plugins" / "modules" / "gpu_facts.py"


def _debian_pci_ids(suite):
    env = {**os.environ, "SIM_PCI_IDS_SUITE": suite}
    got = subprocess.run(
        [sys.executable, str(ROOT / "sim/gpu/pci_ids.py")], capture_output=True, text=True, env=env, check=False
    )
    if got.returncode != 0:
        pytest.skip(f"Debian's pci.ids ({suite}) not available: {got.stderr.strip()[:200]}")
    return Path(got.stdout.strip())


@pytest.fixture(scope="module")
def current():
    return _debian_pci_ids("trixie")


@pytest.fixture(scope="module")
def installed():
    return _debian_pci_ids("bookworm")


def _file(tmp_path, data):
    path = tmp_path / "download.pci.ids"
    path.write_bytes(data if isinstance(data, bytes) else data.encode())
    return str(path)


def test_the_current_debian_database_passes_against_the_older_installed_one(current, installed):
    assert pci_ids_check.problem(str(current), str(installed)) is None


def test_a_database_older_than_the_installed_one_is_refused(current, installed):
    assert "fewer than the installed" in pci_ids_check.problem(str(installed), str(current))


def test_a_captive_portal_page_is_refused(tmp_path, installed):
    page = "<!DOCTYPE html>\n<html><head><title>Hotel Wi-Fi</title></head><body>Log in</body></html>\n"
    assert "HTML page" in pci_ids_check.problem(_file(tmp_path, page), str(installed))


def test_an_empty_download_is_refused(tmp_path, installed):
    assert pci_ids_check.problem(_file(tmp_path, b""), str(installed)) == "an empty file"


def test_a_download_cut_inside_nvidias_block_is_refused(tmp_path, current, installed):
    text = current.read_text(encoding="utf-8")
    cut = text.index("\n10de  ") + 20000  # well inside NVIDIA's block
    assert pci_ids_check.problem(_file(tmp_path, text[:cut]), str(installed)) is not None


def test_a_download_cut_before_the_class_list_is_refused(tmp_path, current):
    text = current.read_text(encoding="utf-8")
    cut = text.index("\nC 00  ")
    assert "cut short" in pci_ids_check.problem(_file(tmp_path, text[:cut]), None)


def test_a_database_without_nvidias_vendor_block_is_refused(tmp_path, current):
    text = current.read_text(encoding="utf-8").replace("\n10de  ", "\n10dx  ")
    assert "no NVIDIA vendor block" in pci_ids_check.problem(_file(tmp_path, text), None)


def test_an_oversized_download_is_refused(tmp_path, current):
    assert "more than the" in pci_ids_check.problem(str(current), None, max_bytes=1024 * 1024)


def test_binary_data_is_refused(tmp_path):
    assert "binary" in pci_ids_check.problem(_file(tmp_path, b"10de  NVIDIA\n\xff\xfe\x00C 00  x\n"), None)


def test_a_well_formed_but_altered_database_is_refused_by_the_sha256_pin(tmp_path, current, installed):
    # A poisoned name (an RTX PRO 6000 renamed to a Hopper part) passes every format check; only the pin catches it.
    text = current.read_text(encoding="utf-8")
    poisoned = _file(tmp_path, text.replace("\t2bb1  GB202GL", "\t2bb1  GH100 [H100 SXM5 80GB] GB202GL", 1))
    pin = hashlib.sha256(current.read_bytes()).hexdigest()
    assert pci_ids_check.problem(poisoned, str(installed)) is None
    assert "not the pinned" in pci_ids_check.problem(poisoned, str(installed), sha256=pin)
    assert pci_ids_check.problem(str(current), str(installed), sha256=pin.upper()) is None


def _run(tmp_path, args):
    argfile = tmp_path / "args.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.run(
        [sys.executable, str(MODULE), str(argfile)], capture_output=True, text=True, env=env, check=False
    )
    return json.loads(proc.stdout)


def _bus(tmp_path):
    d = tmp_path / "pci" / "0000:01:00.0"
    d.mkdir(parents=True)
    for name, value in (("vendor", "0x10de"), ("device", "0x2bb1"), ("class", "0x030200")):
        (d / name).write_text(value + "\n")
    return str(tmp_path / "pci")


def test_gpu_facts_refuses_a_portal_page_in_one_line_and_keeps_the_installed_database(tmp_path, installed):
    portal = _file(tmp_path, "<html><body>Accept the terms</body></html>")
    args = {
        "nvidia_smi": str(tmp_path / "absent"),
        "pci_root": _bus(tmp_path),
        "pci_ids": [str(installed)],
        "pci_ids_candidate": portal,
    }
    res = _run(tmp_path, args)
    assert res.get("failed") is True and "\n" not in res["msg"]
    assert res["msg"].startswith("Expected a current PCI id database; found an HTML page")
    assert f"Kept the installed one ({installed})" in res["msg"]


def test_gpu_facts_names_blackwell_from_a_checked_current_database(tmp_path, current, installed):
    args = {
        "nvidia_smi": str(tmp_path / "absent"),
        "pci_root": _bus(tmp_path),
        "pci_ids": [str(installed)],
        "pci_ids_candidate": str(current),
    }
    res = _run(tmp_path, args)
    assert res.get("failed") is not True, res
    assert res["pci_ids"] == str(current) and res["sm_list"] == ["sm_120"]


def test_the_default_download_is_one_fixed_snapshot_with_its_pin():
    # A pin on a URL whose file changes every day (the upstream's /v2.2/pci.ids) would refuse every download: the
    # default names one commit of the upstream's snapshot repository, and the pin is that file's sha256 (read from
    # the repository's snapshot at that commit: 1,659,114 bytes, names 2bb1 "GB202GL [RTX PRO 6000 Blackwell
    # Workstation Edition]").
    defaults = yaml.safe_load((ROOT / "roles" / "preflight" / "defaults" / "main.yml").read_text())
    specs = yaml.safe_load((ROOT / "roles" / "preflight" / "meta" / "argument_specs.yml").read_text())
    options = specs["argument_specs"]["main"]["options"]
    url, pin = defaults["preflight_pci_ids_url"], defaults["preflight_pci_ids_sha256"]
    assert re.fullmatch(r"https://raw\.githubusercontent\.com/pciutils/pciids/[0-9a-f]{40}/pci\.ids", url), url
    assert re.fullmatch(r"[0-9a-f]{64}", pin), pin
    assert options["preflight_pci_ids_url"]["default"] == url and options["preflight_pci_ids_sha256"]["default"] == pin
