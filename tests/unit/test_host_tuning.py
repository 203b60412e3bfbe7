"""module_utils/host_tuning.py: the HMM decision and plan as tables, and the PCIe-path readers over real outputs.

The outputs are in tests/unit/fixtures/host_tuning (index.yml names each one's public source and what a reader sees
in it: the GPU count and NVLink of a topology matrix, the BAR1 and memory totals of nvidia-smi -q, which bridges'
ACS redirects, the IOMMU mode of a kernel command line). Every fixture is read by the same parser the module uses,
and its verdict compared with index.yml's facts."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ansible_collections.llmops.sglang.plugins.module_utils import host_tuning as T

HERE = Path(__file__).parent / "fixtures" / "host_tuning"
INDEX = yaml.safe_load((HERE / "index.yml").read_text())["fixtures"]


def fixtures(kind):
    return [pytest.param(f, id=f["file"]) for f in INDEX if f["kind"] == kind]


def text(entry):
    return (HERE / entry["file"]).read_text()


def test_every_fixture_file_is_indexed_with_a_source():
    files = {p.name for p in HERE.glob("*.txt")}
    assert files == {f["file"] for f in INDEX}
    assert all(f["source"].startswith("https://") for f in INDEX)


# ---- the PCIe path, over real outputs ----------------------------------------------------------------------------


@pytest.mark.parametrize("entry", fixtures("topo"))
def test_topology_matrix_says_nvlink_or_pcie(entry):
    topo = T.parse_topo(text(entry))
    facts = entry["facts"]
    assert T.nvlink(topo) is facts["nvlink"]
    assert len(topo["gpus"]) == facts.get("rows_present", facts["gpus"])
    pairs = {f"{a}-{b}": v for (a, b), v in topo["links"].items()}
    for pair, link in (facts.get("links") or {}).items():
        if pair != "others":
            assert pairs[pair] == link
    if "gpu_gpu_links" in facts:
        assert set(topo["links"].values()) == set(facts["gpu_gpu_links"])
    assert all(not k[1].startswith(("NIC", "mlx")) for k in topo["links"])  # NIC columns are not GPU links


@pytest.mark.parametrize("entry", fixtures("smi_q"))
def test_bar1_and_memory_totals_are_read_per_gpu(entry):
    gpus = T.parse_bar1(text(entry))
    facts = entry["facts"]
    assert [g["bar1_mib"] for g in gpus] == facts["bar1_mib"]
    assert [g["fb_mib"] for g in gpus] == facts["fb_mib"]
    assert all(g["id"] for g in gpus)


@pytest.mark.parametrize("entry", fixtures("lspci"))
def test_acs_redirection_is_found_on_the_bridges_that_have_it(entry):
    devices = T.parse_acs(text(entry))
    facts = entry["facts"]
    redirecting = T.acs_redirecting(devices)
    assert bool(redirecting) is facts["acs_redirect"]
    assert len(devices) == facts["bridges"]
    if facts["acs_redirect"]:
        assert [d.split()[0] for d in redirecting] == facts["redirect_on"]


@pytest.mark.parametrize("entry", fixtures("iommu"))
def test_iommu_mode_from_the_kernel_command_line(entry):
    cmdline = next(line for line in text(entry).splitlines() if "BOOT_IMAGE" in line)
    assert T.iommu_mode(None, cmdline) == entry["facts"]["iommu"]


@pytest.mark.parametrize(
    ("types", "cmdline", "mode"),
    [
        # the kernel's documented default domain types (Documentation/ABI/testing/sysfs-kernel-iommu_groups)
        (["identity", "identity"], "", "passthrough"),
        (["DMA-FQ", "identity"], "", "translated"),
        (["DMA"], "iommu=pt", "translated"),  # the groups are what runs; the command line is only a fallback
        ([], "ro quiet", "off"),
        (None, "ro quiet", "unknown"),
    ],
)
def test_iommu_mode_from_the_groups(types, cmdline, mode):
    assert T.iommu_mode(types, cmdline) == mode


def test_a_pcie_only_host_with_small_bar1_and_acs_redirect_gets_both_warnings_from_real_outputs():
    by_file = {f["file"]: f for f in INDEX}
    topo = T.parse_topo(text(by_file["topo-4090x8-sys-nic-goalloc17.txt"]))
    bar1 = T.parse_bar1(text(by_file["smi-q-bar1-4090x8-gpud.txt"]))
    acs = T.acs_redirecting(T.parse_acs(text(by_file["lspci-acs-on-h100-pmc-switch-gpud.txt"])))
    found = {f["check"]: f for f in T.path_findings(8, topo, bar1, "passthrough", acs)}
    assert found["pcie_peers"]["found"] == "PCIe only (no NVLink)"
    assert found["bar1"]["severity"] == "warning"
    assert found["bar1"]["found"].startswith("BAR1 256 MiB for 24564 MiB of memory on 8 of 8 GPUs")
    assert "Resizable BAR" in found["bar1"]["action"]
    assert found["iommu_acs"]["severity"] == "warning"
    assert "ACS redirects peer requests on 4 bridge(s) (first: 82:00.0" in found["iommu_acs"]["found"]
    assert T.worst(list(found.values())) == "warning"


def test_an_nvlink_host_gets_no_pcie_warnings_whatever_its_iommu():
    by_file = {f["file"]: f for f in INDEX}
    topo = T.parse_topo(text(by_file["topo-a100x8-nv12-nic-nccl1505.txt"]))
    found = T.path_findings(8, topo, [], "translated", ["x"])
    assert [f["severity"] for f in found] == ["ok"]


def test_a_clean_pcie_path_is_ok():
    by_file = {f["file"]: f for f in INDEX}
    topo = T.parse_topo(text(by_file["topo-rtxpro6000x2-phb-rtx6kpro15.txt"]))
    bar1 = T.parse_bar1(text(by_file["smi-q-bar1-h100x8-gpud.txt"]))  # BAR1 131072 MiB for 81559 MiB
    acs = T.acs_redirecting(T.parse_acs(text(by_file["lspci-acs-off-h100-gpud.txt"])))
    found = {f["check"]: f["severity"] for f in T.path_findings(2, topo, bar1, "passthrough", acs)}
    assert found == {"pcie_peers": "info", "bar1": "ok", "iommu_acs": "ok"}


def test_one_gpu_has_no_peers_to_check():
    assert [f["check"] for f in T.path_findings(1, None, [], "translated", ["x"])] == ["pcie_peers"]


def test_a_matrix_without_a_header_is_refused_with_what_was_found():
    with pytest.raises(T.TuningError, match=r"expected the matrix of 'nvidia-smi topo -m'.*found 'No devices were"):
        T.parse_topo("No devices were found\n")


# ---- HMM: the decision and the plan ------------------------------------------------------------------------------

RTX = {"compute_capability": "12.0", "sm": "sm_120"}
GB10 = {"compute_capability": "12.1", "sm": "sm_121"}
H100 = {"compute_capability": "9.0", "sm": "sm_90"}
PCI_RTX = {"sm": "sm_120", "name": "GB202GL [RTX PRO 6000 Blackwell Workstation Edition]"}  # preflight's PCI list


@pytest.mark.parametrize(
    ("value", "gpus", "disable"),
    [
        ("auto", [RTX] * 8, True),
        ("auto", [RTX] * 2, True),
        ("auto", [PCI_RTX] * 4, True),  # before the driver answers: the PCI list's architectures
        ("auto", [RTX], False),
        ("auto", [GB10], False),
        ("auto", [H100] * 8, False),
        ("auto", [], False),
        ("true", [H100] * 8, True),
        (True, [], True),
        ("false", [RTX] * 8, False),
        (False, [RTX] * 8, False),
        ("AUTO", [RTX] * 2, True),
    ],
)
def test_hmm_decision(value, gpus, disable):
    assert T.hmm_wanted(value, gpus)[0] is disable


@pytest.mark.parametrize("value", ["sometimes", "", "1", "yes", None])
def test_a_setting_that_is_not_a_choice_is_refused(value):
    with pytest.raises(T.TuningError, match=r"^nvidia_driver_disable_hmm: expected auto, true or false, found "):
        T.setting(value)


ON = T.conf_text(True)


@pytest.mark.parametrize(
    ("disable", "current", "live", "refcnt", "expected"),
    [
        (True, None, None, None, (True, False, "none")),  # not loaded: the next load reads the file
        (True, ON, None, None, (False, False, "none")),
        (True, ON, True, 5, (False, False, "none")),  # converged and in use
        (True, None, False, 0, (True, False, "reload")),  # loaded, unused
        (True, None, False, 2, (True, False, "pending")),  # loaded, in use: nothing running is touched
        (True, "options nvidia_uvm uvm_disable_hmm=1\n", True, 0, (True, False, "none")),  # someone's own words
        (False, None, None, None, (False, False, "none")),
        (False, ON, True, 0, (False, True, "reload")),  # the role's file goes, the module follows
        (False, ON, True, 1, (False, True, "pending")),
        (False, None, True, 0, (False, False, "none")),  # set by another file: not the role's
    ],
)
def test_hmm_plan(disable, current, live, refcnt, expected):
    plan = T.uvm_plan(disable, current, live, refcnt)
    assert (plan["write"], plan["remove"], plan["action"]) == expected  # (write, remove, action)
    assert plan["content"] == (ON if disable else None)


@pytest.mark.parametrize(("raw", "value"), [("Y\n", True), ("N\n", False), (None, None), ("", None), ("?", None)])
def test_live_value_reads_the_bool_parameter(raw, value):
    assert T.live_value(raw) is value
