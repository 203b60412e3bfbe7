"""gpu_health: the verdict on 31 real outputs (35 index entries: four files are also judged as read under load).

The outputs are `nvidia-smi -q` dumps and excerpts, `lspci -vv` link lines and kernel-log Xid lines gathered from
public issue threads, a published article and leptonai/gpud's captured testdata; each one's source is in
fixtures/gpu_health/index.yml with the verdict it must get.
"""

from pathlib import Path

import pytest
import yaml

from ansible_collections.llmops.sglang.plugins.module_utils import gpu_health as H
from ansible_collections.llmops.sglang.plugins.module_utils import gpu_health_parse as P

FIXTURES = Path(__file__).parent / "fixtures" / "gpu_health"
INDEX = yaml.safe_load((FIXTURES / "index.yml").read_text())["fixtures"]


def judge(entry):
    text = (FIXTURES / entry["file"]).read_text()
    if entry["kind"] == "smi_q":
        return H.verdict(P.parse_smi_q(text), None, entry["under_load"])
    if entry["kind"] == "lspci":
        return H.verdict(P.parse_lspci(text), None, entry["under_load"])
    return H.verdict([], P.parse_kernel_log(text), entry["under_load"])


def test_the_index_lists_every_fixture_file_with_a_source():
    files = {p.name for p in FIXTURES.iterdir() if p.name != "index.yml" and not p.name.startswith("NOTICE-")}
    assert files == {e["file"] for e in INDEX}
    assert len(files) >= 30
    assert all(e["source"].startswith("https://") for e in INDEX)
    # a third party's notice travels with the files taken from it
    if any("github.com/leptonai/gpud/" in e["source"] for e in INDEX):
        assert "Lepton AI" in (FIXTURES / "NOTICE-gpud").read_text()


@pytest.mark.parametrize("entry", INDEX, ids=[f"{e['file']}-load{int(e['under_load'])}" for e in INDEX])
def test_fixture_verdict(entry):
    checks = judge(entry)
    assert H.worst(checks) == entry["expected"], [c["message"] for c in checks if c["severity"] != "ok"]
    for name, severity in entry["checks"].items():
        worst_of_name = H.worst([c for c in checks if c["name"] == name]) if any(
            c["name"] == name for c in checks) else None  # fmt: skip
        assert worst_of_name == severity, (name, [c for c in checks if c["name"] == name][:2])
    for c in checks:
        assert c["severity"] in H.SEVERITIES and c["message"].endswith(".")


def test_the_h100_power_brake_is_named_with_its_gpu():
    gpus = P.parse_smi_q((FIXTURES / "smi-q-h100x8-535.183.01.txt").read_text())
    assert len(gpus) == 8
    bad = [c for c in H.verdict(gpus) if c["severity"] == "critical"]
    assert [c["gpu"] for c in bad] == ["00000000:75:00.0"]
    assert "hw_power_brake_slowdown" in bad[0]["message"]


def test_h100_fields_read_from_a_full_dump():
    g = P.parse_smi_q((FIXTURES / "smi-q-h100x8-535.183.01.txt").read_text())[0]
    assert g["id"] == "00000000:53:00.0"
    assert (g["pcie_gen_max"], g["pcie_gen_current"], g["pcie_width_max"], g["pcie_width_current"]) == (5, 5, 16, 16)
    assert g["persistence_mode"] == "Enabled"
    assert g["ecc_uncorrectable_volatile"] == 0
    assert g["remapped_rows_pending"] is False
    assert (g["fabric_state"], g["fabric_status"]) == ("Completed", "Success")
    assert g["temperature_c"] == 36
    assert g["slowdown_margin_c"] == 52  # T.Limit 50 C, slowdown at -2 C


def test_idle_link_is_ok_but_the_same_link_under_load_is_critical_with_the_sentence():
    text = (FIXTURES / "smi-a-zenn-gen1.txt").read_text()
    idle = H.verdict(P.parse_smi_q(text), under_load=False)[0]
    load = H.verdict(P.parse_smi_q(text), under_load=True)[0]
    assert idle["severity"] == "ok" and "read while idle" in idle["message"]
    assert load["severity"] == "critical"
    assert "expected the PCIe link at Gen3 x16 under load, found Gen1 x16" in load["message"]


def test_lspci_link_speeds_become_generations():
    gpus = P.parse_lspci((FIXTURES / "lspci-jan183-riser.txt").read_text())
    assert (gpus[0]["pcie_gen_max"], gpus[0]["pcie_gen_current"], gpus[0]["pcie_downgraded"]) == (4, 1, True)
    h100 = P.parse_lspci((FIXTURES / "lspci-vv-h100-gpud.txt").read_text())
    assert len(h100) == 8 and all(g["pcie_gen_current"] == 5 and g["pcie_width_current"] == 16 for g in h100)


def test_xid_lines_are_grouped_per_gpu_and_number():
    events = P.parse_kernel_log((FIXTURES / "journal-gpuop1146-xid48-64.txt").read_text())
    assert [(e["pci"], e["xid"]) for e in events] == [("PCI:0000:07:00", 48), ("PCI:0000:07:00", 64)]
    fallen = P.parse_kernel_log((FIXTURES / "dmesg-nvsentinel155-fallen.txt").read_text())
    assert [(e["pci"], e["xid"]) for e in fallen] == [("0000:b3:00.0", 79)]
    twice = H.verdict([], P.parse_kernel_log((FIXTURES / "dmesg-bumblebee554-fallen.txt").read_text()))
    assert len(twice) == 1 and "(2 times)" in twice[0]["message"]


def test_an_empty_kernel_log_is_one_ok_check_and_an_unread_log_is_none():
    assert [c["severity"] for c in H.verdict([], [])] == ["ok"]
    assert H.verdict([], None) == []


def test_bad_input_is_one_sentence_not_a_traceback():
    with pytest.raises(P.HealthParseError, match="expected nvidia-smi -q output"):
        P.parse_smi_q("No devices were found\n")
    with pytest.raises(P.HealthParseError, match="expected lspci -vv output"):
        P.parse_lspci("00:00.0 Host bridge: Intel Corporation Device 1234\n")
    with pytest.raises(P.HealthParseError, match="header"):
        P.parse_query_csv("0, 5, 5\n")


def test_query_csv_fields():
    text = (
        "index, pcie.link.gen.current, pcie.link.gen.max, pcie.link.width.current, pcie.link.width.max, "
        "persistence_mode, ecc.errors.uncorrected.volatile.total, clocks_event_reasons.hw_slowdown, "
        "clocks_event_reasons.sw_power_cap, temperature.gpu, fabric.state\n"
        "0, 2, 5, 16, 16, Disabled, 3, Active, Not Active, 41, In Progress\n"
    )
    g = P.parse_query_csv(text)[0]
    assert (g["pcie_gen_current"], g["pcie_gen_max"], g["persistence_mode"]) == (2, 5, "Disabled")
    assert g["ecc_uncorrectable_volatile"] == 3 and g["clock_reasons_active"] == ["hw_slowdown"]
    sev = {c["name"]: c["severity"] for c in H.verdict([g], under_load=True)}
    assert sev == {"persistence_mode": "warning", "pcie_link": "critical", "ecc_uncorrectable": "critical",
                   "clock_reasons": "critical", "temperature": "ok", "fabric": "critical"}  # fmt: skip
