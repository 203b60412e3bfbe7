"""An air-gapped install end to end: a simulated node that cannot open a connection to anything but itself takes
site.yml to a ready server from an offline bundle, answers a chat completion, and a second run changes nothing; a
tampered bundle is refused before anything is installed.

One node, ob1 (10.213.0.141, 8 x RTX PRO 6000 Blackwell, no driver). The wheelhouse the bundle carries is filled
first by the build stage run online on that node (as a site's staging fleet would); the bundle is then made on this
control node with playbooks/bundle.yml from the local mirrors (NVIDIA's repository stand-in, the package indexes,
the hub stand-in) and, for the operating system's own packages, this machine's own Debian archive as its apt
configuration names it. The node is then booted again from the bare image, the bundle copied into it (root's), and
its network namespace refuses every connection it would open to another host (nftables, output: only loopback and
answers to connections made to it); a connection to the mirrors is checked to fail before the run.

Run under the node lock: flock /work/locks/nodes.lock make test-offline (which sets LLMOPS_OFFLINE_E2E=1).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from _node_util import ROOT, VENV_BIN, booted_nodes, fleet_inventory, sim_node, stage_env
from events import PLAYBOOK_GUARD
from playbook_output import play_recap

pytestmark = [
    pytest.mark.node,
    pytest.mark.skipif(
        os.environ.get("LLMOPS_OFFLINE_E2E") != "1",
        reason="out of make test (minutes): make test-offline runs it (LLMOPS_OFFLINE_E2E=1)",
    ),
]

NAME, IP = os.environ.get("OB_NODE_NAME", "ob1"), os.environ.get("OB_NODE_IP", "10.213.0.141")
PROFILE = "rtx-pro-6000-x8"
SIM_STATE = Path(os.environ.get("SIM_STATE", "/run/llmops-sim"))
SIM_CACHE = Path(os.environ.get("SIM_CACHE", "/var/cache/llmops-sim"))
ON_NODE = "/srv/llmops-bundle"
# Only loopback and the answers to connections made to the node (ssh from this control node) leave it; any other
# connection fails at once, as without a route.
NO_EGRESS = """
table inet llmops_test_offline {
  chain output {
    type filter hook output priority 0; policy accept;
    ct state established,related accept
    oifname "lo" accept
    reject with icmpx type no-route
  }
}
"""


FIGURES: list[str] = []


def other_holders() -> list[str]:
    """The live processes that hold the mirrors (sim/node hold: make test's streams), by PID."""
    live = []
    for f in sorted((SIM_STATE / "holds").glob("*")) if (SIM_STATE / "holds").is_dir() else []:
        try:
            os.kill(int(f.name), 0)
        except (ValueError, ProcessLookupError, PermissionError):
            continue
        live.append(f.name)
    return live


def reachable(url: str) -> bool:
    """Whether this control node can open a connection to ``url``'s host and port (no proxy)."""
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname, parts.port or 80), timeout=5).close()
    except OSError:
        return False
    return True


def debian_sources() -> list[str]:
    """This machine's own Debian archive lines for bookworm's main component, from its apt configuration (deb822 or
    one-line), each as one line naming its keyring."""
    lines = []
    for path in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for stanza in path.read_text().split("\n\n"):
            fields = {}
            for line in stanza.splitlines():
                if ":" in line and not line.startswith(("#", " ")):
                    key, _, value = line.partition(":")
                    fields[key.strip().lower()] = value.strip()
            if "deb" not in fields.get("types", "").split() or "main" not in fields.get("components", "").split():
                continue
            keyring = fields.get("signed-by", "/usr/share/keyrings/debian-archive-keyring.gpg")
            for uri in fields.get("uris", "").split():
                for suite in fields.get("suites", "").split():
                    if suite in ("bookworm", "bookworm-updates", "bookworm-security"):
                        lines.append(f"deb [signed-by={keyring}] {uri} {suite} main")
    listed = Path("/etc/apt/sources.list")
    for line in listed.read_text().splitlines() if listed.exists() else []:
        m = re.match(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)\s+(bookworm(?:-updates|-security)?)\s+.*\bmain\b", line)
        if m:
            lines.append(f"deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] {m[1]} {m[2]} main")
    return lines


def play(inventory: Path, playbook: Path, extra: dict | None = None, *args: str) -> subprocess.CompletedProcess:
    cmd = [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory / "hosts.yml"), str(playbook), *args]
    cmd += ["-e", json.dumps(extra)] if extra else []
    return subprocess.run(
        cmd, capture_output=True, text=True, env=stage_env(), cwd=ROOT, timeout=PLAYBOOK_GUARD, check=False
    )


def ssh(command: str, check: bool = True) -> subprocess.CompletedProcess:
    return sim_node("ssh", NAME, command, check=check)


def tail(p: subprocess.CompletedProcess) -> str:
    return p.stdout[-6000:] + p.stderr[-2000:]


@pytest.fixture(scope="module")
def offline(tmp_path_factory):
    if os.geteuid() != 0 or shutil.which("systemd-nspawn") is None or shutil.which("nft") is None:
        pytest.skip("needs root, systemd-nspawn and nft (simulated nodes)")
    sources = debian_sources()
    assert sources, "this machine's apt configuration names no Debian bookworm archive with main"
    work = tmp_path_factory.mktemp("offline")
    wheelhouse = work / "wheelhouse"
    with booted_nodes({NAME: (IP, PROFILE)}, driver="none", mirrors=True):
        inv = fleet_inventory(work / "inventory", {"gpu_servers": {"hosts": {NAME: IP}}})
        mirror = sim_node("mirrors", "up").stdout.strip()
        (inv / "host_vars").mkdir()
        (inv / "host_vars" / f"{NAME}.yml").write_text(json.dumps({"python_env_wheelhouse": str(wheelhouse)}))
        # 1. The staging run, online: the build stage fills the wheelhouse the bundle carries.
        staging = work / "staging.yml"
        staging.write_text("".join(f"- ansible.builtin.import_playbook: {ROOT}/playbooks/{p}.yml\n"
                                   for p in ("preflight", "gpu_stack", "build")))  # fmt: skip
        clock = time.monotonic()
        built = play(inv, staging)
        assert built.returncode == 0, tail(built)
        FIGURES.append(f"staging build {time.monotonic() - clock:.0f} s")
        # 2. The bundle, on this control node, from the mirrors; signed with the operator's key.
        key = work / "ops"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ops@site", "-f", str(key)], check=True)
        bundle = work / "bundle"
        keyring = SIM_CACHE / "mirrors" / "keys" / "cuda-archive-keyring.gpg"  # the stand-in repository's (sim/node)
        settings = {
            "bundle_dir": str(bundle),
            "bundle_name": "offline-test",
            "bundle_os": ["debian-12"],
            "bundle_gpu_archs": ["sm_120"],
            "bundle_signing_key": str(key),
            "bundle_git": False,
            "bundle_apt_sources": {
                "debian-12": [
                    f"deb [signed-by={keyring}] {mirror}/nvidia/compute/cuda/repos/debian12/x86_64/ /",
                    *sources,
                ]
            },
        }
        clock = time.monotonic()
        made = play(inv, ROOT / "playbooks" / "bundle.yml", settings)
        assert made.returncode == 0, tail(made)
        FIGURES.append(f"bundle {time.monotonic() - clock:.0f} s")
        # 3. The node again from the bare image, with the bundle and no route out.
        sim_node("down", NAME, check=False)
        up = sim_node("up", NAME, IP, "--profile", PROFILE, "--driver", "none", check=False, timeout=600)
        assert up.returncode == 0, up.stderr
        dest = SIM_STATE / "nodes" / NAME / "root" / ON_NODE.lstrip("/")
        dest.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cp", "-a", f"{bundle}/.", str(dest)], check=True)
        subprocess.run(["chown", "-R", "root:root", str(dest)], check=True)
        subprocess.run(["ip", "netns", "exec", f"llms-{NAME}", "nft", "-f", "-"], input=NO_EGRESS, text=True,
                       check=True)  # fmt: skip
        reach = ssh(f"curl -sS -m 5 -o /dev/null {mirror}/ 2>&1; echo rc=$?", check=False).stdout
        # the control node loses its mirrors too for the offline runs (the teardown below ends what is left), unless
        # another run (make test's streams) holds them: then that check is skipped, saying so
        holders = other_holders()
        if not holders:
            sim_node("mirrors", "down", check=False)
        control_reach = None if holders else reachable(mirror)
        offline_vars = {
            "llmops_bundle_dir": ON_NODE,
            "llmops_bundle_public_key": (work / "ops.pub").read_text().strip(),
            # the wheelhouse is the bundle's copy on this control node
            "python_env_wheelhouse": str(bundle / "wheelhouse"),
        }
        (inv / "host_vars" / f"{NAME}.yml").write_text(json.dumps(offline_vars))
        clock = time.monotonic()
        first = play(inv, ROOT / "site.yml")
        FIGURES.append(f"offline site.yml {time.monotonic() - clock:.0f} s")
        clock = time.monotonic()
        second = play(inv, ROOT / "site.yml") if first.returncode == 0 else None
        FIGURES.append(f"offline re-run {time.monotonic() - clock:.0f} s")
        yield {"inventory": inv, "bundle": bundle, "reach": reach, "control_reach": control_reach, "first": first,
               "second": second, "mirror": mirror}  # fmt: skip
        print("\noffline bundle on a node: " + ", ".join(FIGURES))


def test_the_node_cannot_reach_the_mirrors(offline):
    assert "rc=0" not in offline["reach"] and "rc=" in offline["reach"], offline["reach"]


def test_the_control_node_cannot_reach_the_mirrors_during_the_offline_runs(offline):
    if offline["control_reach"] is None:
        pytest.skip(f"the mirrors are held by another run ({', '.join(other_holders())}): they were left up")
    assert offline["control_reach"] is False


def test_site_yml_reaches_a_ready_server_from_the_bundle_alone(offline):
    first = offline["first"]
    assert first.returncode == 0, tail(first)
    assert ssh("cat /etc/apt/sources.list.d/cuda-debian12-x86_64.list").stdout.strip() == (
        f"deb [trusted=yes] file:{ON_NODE}/apt/debian-12 ./"
    )
    assert ssh("systemctl is-active sglang").stdout.strip() == "active"
    record = json.loads(ssh("cat /var/lib/llmops-sglang/deployment.json").stdout)
    assert record, record
    unit = ssh("systemctl show -p Environment sglang").stdout
    assert "HF_HUB_OFFLINE=1" in unit and "TRANSFORMERS_OFFLINE=1" in unit, unit
    answer = ssh(
        "curl -sS -m 60 http://127.0.0.1:30000/v1/chat/completions -H 'Content-Type: application/json'"
        ' -d \'{"model": "glm-5", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}\''
    ).stdout
    assert json.loads(answer)["choices"][0]["message"]["content"], answer


def test_a_second_run_from_the_bundle_changes_nothing(offline):
    second = offline["second"]
    assert second is not None and second.returncode == 0, tail(second) if second else "the first run failed"
    recap = play_recap(second.stdout)
    assert recap[NAME]["changed"] == 0, tail(second)


@pytest.mark.parametrize("piece", ["wheels", "model", "apt"])
def test_a_tampered_file_is_refused_before_anything_is_installed(offline, piece):
    """A wheel, a model shard, a driver package: each changed by one bit in the host's copy is refused by preflight,
    naming the file, and the run changes nothing on the host."""
    top = SIM_STATE / "nodes" / NAME / "root" / ON_NODE.lstrip("/") / piece
    pattern = {"wheels": "*.whl", "model": "*.safetensors", "apt": "nvidia-*.deb"}[piece]
    path = sorted(top.rglob(pattern))[0]
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 1
    path.write_bytes(bytes(data))
    try:
        run = play(offline["inventory"], ROOT / "site.yml")
        rel = path.relative_to(SIM_STATE / "nodes" / NAME / "root" / ON_NODE.lstrip("/"))
        assert run.returncode != 0
        assert f"{rel} has sha256" in run.stdout and "nothing was installed" in run.stdout, tail(run)
        assert play_recap(run.stdout)[NAME]["changed"] == 0, tail(run)
    finally:
        data[len(data) // 2] ^= 1
        path.write_bytes(bytes(data))


def test_a_bundle_signed_by_another_key_is_refused_before_anything_is_installed(offline, tmp_path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "other@site", "-f", str(tmp_path / "other")],
                   check=True)  # fmt: skip
    other = (tmp_path / "other.pub").read_text().strip()
    run = play(offline["inventory"], ROOT / "site.yml", {"llmops_bundle_public_key": other})
    assert run.returncode != 0 and "signed by the key given as public_key" in run.stdout, tail(run)
    assert play_recap(run.stdout)[NAME]["changed"] == 0, tail(run)
