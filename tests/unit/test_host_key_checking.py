"""Host-key checking: off for the simulation's nodes only (their inventory says so), on for every other inventory run
from this checkout (its ansible.cfg no longer turns it off).

The proof is the ssh command line Ansible builds: `ansible HOST -m ansible.builtin.ping` with ssh replaced by a
script that writes its arguments down and exits 255 as OpenSSH does when it cannot connect (no host is reached).
"""

from __future__ import annotations

import configparser
import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = ROOT / ".venv" / "bin"
NO_CHECK = ("StrictHostKeyChecking=no", "UserKnownHostsFile=/dev/null")

FAKE_SSH = """#!/bin/sh
printf '%s\\n' "$@" >> "$FAKE_SSH_ARGS"
echo "ssh: connect to host fake port 22: Connection refused" >&2
exit 255
"""


def ssh_argv(tmp_path: Path, inventory: str, host: str) -> list[str]:
    """The arguments Ansible gives ssh to reach ``host`` of ``inventory``, with this checkout's ansible.cfg."""
    fake = tmp_path / "ssh"
    fake.write_text(FAKE_SSH)
    fake.chmod(0o755)
    args = tmp_path / f"{host}.args"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_COLLECTIONS_PATH=str(ROOT),
        ANSIBLE_HOME=str(tmp_path / "ansible-home"),
        ANSIBLE_SSH_CONTROL_PATH_DIR=str(tmp_path / "cp"),
        ANSIBLE_SSH_RETRIES="0",
        FAKE_SSH_ARGS=str(args),
        PATH=f"{VENV_BIN}:{env.get('PATH', '')}",
    )
    p = subprocess.run(
        [
            str(VENV_BIN / "ansible"),
            "-i",
            str(ROOT / inventory),
            host,
            "-m",
            "ansible.builtin.ping",
            "-e",
            json.dumps({"ansible_ssh_executable": str(fake)}),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert "UNREACHABLE" in p.stdout, p.stdout + p.stderr  # the fake ssh ran, nothing was reached
    return args.read_text().splitlines()


@pytest.mark.parametrize("host", ["gpu01", "router01"])
def test_the_example_inventory_run_from_the_checkout_keeps_host_key_checking_on(tmp_path, host):
    argv = ssh_argv(tmp_path, "inventories/example", host)
    assert "192.0.2.10" in argv or "192.0.2." in " ".join(argv), argv  # ssh was asked for the host itself
    assert not [a for a in argv if any(x in a for x in NO_CHECK)], argv


def test_the_simulated_nodes_are_reached_without_host_key_checking(tmp_path):
    argv = ssh_argv(tmp_path, "inventories/sim", "demo1")
    joined = " ".join(argv)
    assert all(x in joined for x in NO_CHECK), argv


def test_the_checkouts_ansible_cfg_turns_no_host_key_checking_off():
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(ROOT / "ansible.cfg")
    assert cfg.get("defaults", "host_key_checking", fallback="True").lower() not in ("false", "no", "0")
    ssh_args = cfg.get("ssh_connection", "ssh_args", fallback="")
    assert not any(x in ssh_args for x in NO_CHECK), ssh_args
