"""execution-environment.yml: ansible-builder 3 turns it into a build context that installs this collection's own
tarball and the pins of requirements.txt (`ansible-builder create`, no container engine needed)."""

import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
EE = yaml.safe_load((ROOT / "execution-environment.yml").read_text())
VERSION = yaml.safe_load((ROOT / "galaxy.yml").read_text())["version"]


def pins() -> dict[str, str]:
    out = {}
    for line in (ROOT / "requirements.txt").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)$", line)
        if m:
            out[m.group(1).lower()] = m.group(2)
    return out


def test_the_ee_pins_are_the_ones_requirements_txt_pins():
    have = pins()
    wanted = [EE["dependencies"]["ansible_core"]["package_pip"], *EE["dependencies"]["python"]]
    for spec in wanted:
        name, _, version = spec.partition("==")
        assert have.get(name.lower()) == version, (
            f"{spec} in execution-environment.yml, requirements.txt: {have.get(name.lower())}"
        )
    assert EE["version"] == 3


def test_the_ee_installs_the_collection_of_this_version():
    (entry,) = EE["dependencies"]["galaxy"]["collections"]
    assert entry == {"name": f"/build/collection/llmops-sglang-{VERSION}.tar.gz", "type": "file"}


@pytest.fixture(scope="module")
def context(tmp_path_factory):
    work = tmp_path_factory.mktemp("ee")
    shutil.copy(ROOT / "execution-environment.yml", work)
    out = work / "build" / "ee-collection"
    out.mkdir(parents=True)
    subprocess.run(
        [BIN / "ansible-galaxy", "collection", "build", "--output-path", str(out), str(ROOT)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    p = subprocess.run(
        [
            BIN / "ansible-builder",
            "create",
            "-f",
            "execution-environment.yml",
            "-c",
            "context",
            "--output-filename",
            "Containerfile",
        ],
        cwd=work,
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )
    assert p.returncode == 0, p.stdout + p.stderr
    return work / "context"


def test_ansible_builder_create_makes_a_context_with_the_tarball_and_the_pins(context):
    tarball = context / "_build" / "collection" / f"llmops-sglang-{VERSION}.tar.gz"
    with tarfile.open(tarball) as tf:
        assert "playbooks/site.yml" in [m.name.removeprefix("./") for m in tf.getmembers()]
    galaxy = yaml.safe_load((context / "_build" / "requirements.yml").read_text())
    assert galaxy["collections"] == EE["dependencies"]["galaxy"]["collections"]
    assert (context / "_build" / "requirements.txt").read_text().split() == EE["dependencies"]["python"]
    containerfile = (context / "Containerfile").read_text()
    assert f'ANSIBLE_INSTALL_REFS="{EE["dependencies"]["ansible_core"]["package_pip"]} ' in containerfile
    assert f'EE_BASE_IMAGE="{EE["images"]["base_image"]["name"]}"' in containerfile
    # the galaxy stage copies _build to /build and installs requirements.yml from there: the tarball's path resolves
    assert "COPY _build /build" in containerfile
    assert re.search(r"ansible-galaxy collection install .*-r requirements.yml", containerfile)
