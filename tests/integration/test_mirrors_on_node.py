"""On a simulated node: the signed NVIDIA-style apt repo, the package index and the SGLang stand-in's
pip install, all from the local mirrors on the bridge (no role involved: this proves the mirrors themselves).

One node (mi1, 10.213.0.76, no driver; MI_NODE_NAME / MI_NODE_IP override it) for the module; the finalizer
powers off exactly that node.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from _node_util import Node, sim_node, skip_reason

pytestmark = pytest.mark.node

NAME, IP = os.environ.get("MI_NODE_NAME", "mi1"), os.environ.get("MI_NODE_IP", "10.213.0.76")
REPO_PATH = "nvidia/compute/cuda/repos/debian12/x86_64"


def pip(venv: str, url: str) -> str:
    """pip with only the local index (the mirror is plain HTTP on the bridge, hence --trusted-host)."""
    host = url.split("//", 1)[1].split(":", 1)[0]
    return f"PIP_CONFIG_FILE=/dev/null {venv}/bin/pip install -q --index-url {url}/pypi/simple --trusted-host {host}"


@pytest.fixture(scope="module")
def mirror(request):
    reason = skip_reason()
    if reason:
        pytest.skip(reason)
    control = Path(f"/tmp/mn-ssh-{os.getpid()}")
    state = {"node": None}

    def finalize():
        if state["node"] is not None:
            state["node"].close()
        sim_node("down", NAME, check=False)
        sim_node("teardown", check=False)
        shutil.rmtree(control, ignore_errors=True)

    request.addfinalizer(finalize)
    url = sim_node("mirrors", "up").stdout.strip()
    up = sim_node("up", NAME, IP, "--profile", "rtx-pro-6000-x8", "--driver", "none", check=False)
    assert up.returncode == 0, up.stderr
    control.mkdir(exist_ok=True)
    state["node"] = Node(NAME, IP, sim_node("ssh-key").stdout.strip(), control)
    return state["node"], url


def test_apt_installs_the_pinned_open_driver_from_the_signed_repo(mirror):
    node, url = mirror
    node.run(
        f"curl -fsS -o /tmp/cuda-keyring.deb {url}/{REPO_PATH}/cuda-keyring_1.1-1_all.deb"
        " && dpkg -i /tmp/cuda-keyring.deb && apt-get update -q",
        timeout=120,
    )
    sources = node.sh("cat /etc/apt/sources.list.d/cuda-debian12-x86_64.list")
    assert "signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg" in sources
    # The repository also serves 580.105.08: as on a real server, only a pin on the driver's source packages (NVIDIA's
    # documented version locking) keeps nvidia-open's exact-version dependency chain at 580.95.05.
    node.run(
        "printf 'Package: src:*nvidia*:any\\nPin: version 580.95.05-1\\nPin-Priority: 1001\\n'"
        " > /etc/apt/preferences.d/nvidia-driver.pref"
        " && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends"
        " nvidia-open=580.95.05-1 nvidia-driver=580.95.05-1 nvidia-kernel-open-dkms=580.95.05-1",
        timeout=180,
    )
    versions = node.sh("dpkg-query -W -f='${Package} ${Version}\\n' nvidia-open nvidia-kernel-open-dkms")
    assert "nvidia-open 580.95.05-1" in versions
    assert "nvidia-kernel-open-dkms 580.95.05-1" in versions
    assert node.run("dpkg -s nvidia-kernel-dkms cuda-drivers cuda", check=False).returncode != 0
    # The fake nvidia-smi now reports the installed driver.
    assert "Driver Version: 580.95.05" in node.sh("nvidia-smi")


def test_apt_refuses_the_repo_signed_by_another_key(mirror):
    node, url = mirror
    node.run(
        "install -d /tmp/wrongkey && gpg --batch --quiet --homedir /tmp/wrongkey --pinentry-mode loopback"
        " --passphrase '' --quick-gen-key 'Not NVIDIA <x@example.invalid>' ed25519 sign never"
        " && gpg --batch --homedir /tmp/wrongkey --export > /tmp/wrong.gpg",
        timeout=60,
    )
    node.put_file("/tmp/wrong-apt/sources.list", f"deb [signed-by=/tmp/wrong.gpg] {url}/{REPO_PATH}/ /\n")
    res = node.run(
        "apt-get update -o Dir::Etc::sourcelist=/tmp/wrong-apt/sources.list -o Dir::Etc::sourceparts=-"
        " -o APT::Get::List-Cleanup=0",
        check=False,
        timeout=60,
    )
    out = res.stdout.decode() + res.stderr.decode()
    assert "NO_PUBKEY" in out or "not signed" in out, out


def test_pip_installs_torch_cu128_from_the_index(mirror):
    node, url = mirror
    node.run("python3 -m venv /opt/t && /opt/t/bin/pip --version", timeout=60)
    node.run(
        f"{pip('/opt/t', url)} torch==2.9.1+cu128",
        timeout=120,
    )
    out = node.sh("/opt/t/bin/python -c 'import torch; print(torch.__version__, torch.version.cuda)'")
    assert out.strip() == "2.9.1+cu128 12.8"


def test_pip_installs_the_sglang_stand_in_from_the_git_mirror(mirror):
    node, url = mirror
    node.run("DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends git", timeout=180)
    node.run(
        f"git clone -q {url}/git/llmops-sim/sglang-standin.git /opt/sglang-src && python3 -m venv /opt/s"
        f" && {pip('/opt/s', url)} setuptools==75.8.0 wheel==0.45.1 setuptools-scm==9.2.2"
        f" && {pip('/opt/s', url)} --no-build-isolation /opt/sglang-src/python",
        timeout=240,
    )
    out = node.sh("cd / && /opt/s/bin/python -c 'import sglang, sglang.launch_server; print(sglang.__version__)'")
    # setuptools-scm versions the build from the clone's tags: main is the commit tagged v0.5.9
    assert out.strip() == "0.5.9", out
