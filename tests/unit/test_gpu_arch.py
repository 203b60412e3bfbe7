"""gpu_arch: every spelling of a GPU architecture, the families, and the chip name in a device name."""

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import gpu_arch


@pytest.mark.parametrize(
    ("spelling", "cc"),
    [
        ("sm_120", (12, 0)),
        ("sm120a", (12, 0)),
        ("sm_90a", (9, 0)),
        ("compute_90", (9, 0)),
        ("SM_86", (8, 6)),
        ("12.0", (12, 0)),
        ("12.0a", (12, 0)),
        ("10.3f", (10, 3)),
        ("120", (12, 0)),
        ("90a", (9, 0)),
        (90, (9, 0)),
        (121, (12, 1)),
        ((12, 1), (12, 1)),
        ((9,), (9, 0)),
        (" 8.9 ", (8, 9)),
    ],
)
def test_every_spelling_reads_as_the_same_capability(spelling, cc):
    assert gpu_arch.parse(spelling) == cc


@pytest.mark.parametrize("bad", ["", "sm_", "blackwell", "1.2.3", "sm_1200", None, True, 12.0, ("a", "b")])
def test_what_is_not_an_architecture_is_refused_with_the_spellings_that_work(bad):
    with pytest.raises(gpu_arch.ArchError, match=r"use sm_120, sm_90a, 12\.0 or 120"):
        gpu_arch.parse(bad)


def test_an_architecture_nvidia_never_made_is_refused_only_when_asked():
    assert gpu_arch.parse("sm_999") == (99, 9)  # nvidia-smi of a future GPU is still reported
    with pytest.raises(gpu_arch.ArchError, match="'sm_999' is not one NVIDIA makes; known architectures: sm_70"):
        gpu_arch.parse("sm_999", known_only=True)
    assert not gpu_arch.is_known("sm_999")
    assert gpu_arch.is_known("sm_103") and gpu_arch.is_known("12.1")
    assert not gpu_arch.is_known("nonsense")


def test_spellings_out():
    assert gpu_arch.number("12.0a") == 120
    assert gpu_arch.sm("9.0") == "sm_90"
    assert gpu_arch.sm((10, 3)) == "sm_103"
    assert gpu_arch.compute_capability("sm_121") == "12.1"
    assert gpu_arch.suffix("sm_90a") == "a"
    assert gpu_arch.suffix("10.0f") == "f"
    assert gpu_arch.suffix("sm_120") == ""


@pytest.mark.parametrize(
    ("arch", "fam"),
    [
        ("sm_70", "Volta"),
        ("7.5", "Turing"),
        ("sm_80", "Ampere"),
        ("sm_86", "Ampere"),
        ("sm_89", "Ada Lovelace"),
        ("sm_90", "Hopper"),
        ("sm_100", "Blackwell"),
        ("sm_103", "Blackwell"),
        ("sm_120", "Blackwell"),
        ("sm_121", "Blackwell"),
        ("sm_130", "unknown"),
    ],
)
def test_families_follow_nvidias_table(arch, fam):
    assert gpu_arch.family(arch) == fam


@pytest.mark.parametrize(
    ("name", "chip", "cc"),
    [
        ("GV100GL [Tesla V100 PCIe 32GB]", "GV100GL", (7, 0)),
        ("TU104GL [Tesla T4]", "TU104GL", (7, 5)),
        ("GA100 [A100 SXM4 80GB]", "GA100", (8, 0)),
        ("GA102GL [A40]", "GA102GL", (8, 6)),
        ("AD104GL [L4]", "AD104GL", (8, 9)),
        ("AD103M / GN21-X11 [GeForce RTX 4090 Laptop GPU]", "AD103M", (8, 9)),
        ("GH100 [H100 SXM5 80GB]", "GH100", (9, 0)),
        ("GB100 [B200]", "GB100", (10, 0)),
        ("GB102 [B100]", "GB102", (10, 0)),
        ("GB202GL [RTX PRO 6000 Blackwell Workstation Edition]", "GB202GL", (12, 0)),
        ("GB207GLM [RTX PRO 500 Blackwell Generation Laptop GPU]", "GB207GLM", (12, 0)),
        ("NVIDIA GB10", "GB10", (12, 1)),
    ],
)
def test_the_chip_family_in_a_device_name_gives_the_architecture(name, chip, cc):
    assert gpu_arch.chip_of(name) == chip
    assert gpu_arch.chip_arch(name) == cc


@pytest.mark.parametrize("name", ["GB110", "GB120", "GB20B", "GB6-256(N22W-ES-A1)", "NVIDIA H100 80GB HBM3", "", None])
def test_a_chip_no_nvidia_source_ties_to_a_capability_stays_unknown(name):
    assert gpu_arch.chip_arch(name) is None
