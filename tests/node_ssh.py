"""The one ssh of the node tests: a command as root on a simulated node, by the nodes' key."""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from pathlib import Path

# ssh's own failures to reach a node (exit 255 and one of these in ssh's log; the pattern is sim/ssh-unreached.ere,
# which `sim/node ssh` reads too): the node's sshd answering late on a loaded 2-core machine is one of them. CI's run
# of b66273a lost a whole test module to one "Connection timed out during banner exchange" (then ConnectTimeout=5) on
# a node sim/node had just reached. ssh writes its own words to the -E file, the command's stderr stays on stderr: a
# command that ran and exited 255 is never run again.
SSH_UNREACHED = re.compile((Path(__file__).resolve().parents[1] / "sim" / "ssh-unreached.ere").read_text().strip())
SSH_OPTS = [
    "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
    "-o", "LogLevel=ERROR", "-o", "ConnectTimeout=15",
]  # fmt: skip
# The same for Ansible, in the node tests' own inventories (ansible.cfg keeps host-key checking on; a simulated node
# gets new host keys with every boot). inventories/sim/group_vars/all/connection.yml sets the same for the simulation.
SIM_SSH_VARS = {
    "ansible_host_key_checking": False,
    "ansible_ssh_common_args": "-o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null",
    "ansible_ssh_timeout": 60,
    "ansible_ssh_retries": 3,
}


def ssh_run(
    key: str,
    ip: str,
    cmd: str,
    *,
    check: bool = True,
    timeout: float = 60,
    input: bytes | str | None = None,
    text: bool = False,
    opts: tuple[str, ...] = (),
    attempts: int = 3,
    name: str | None = None,
) -> subprocess.CompletedProcess:
    """``cmd`` as root on the node at ``ip``. Tried again (up to ``attempts`` in all) only when ssh itself could not
    reach the node, never when the command ran and failed; with ``check`` a failure is an AssertionError naming the
    command, the node (``name`` beside its address), ssh's words and the command's stderr."""
    stdin = None if input is not None else subprocess.DEVNULL
    with tempfile.TemporaryDirectory(prefix="node-ssh-") as d:
        log = Path(d) / "ssh.log"
        argv = ["ssh", "-E", str(log), "-i", key, *SSH_OPTS, *opts, f"root@{ip}", cmd]
        for attempt in range(1, attempts + 1):
            log.write_text("")
            p = subprocess.run(
                argv, check=False, capture_output=True, timeout=timeout, input=input, stdin=stdin, text=text
            )
            said = log.read_text(errors="replace").strip()
            if p.returncode != 255 or not SSH_UNREACHED.search(said) or attempt == attempts:
                break
            print(f"ssh to {ip} failed before the command ran (attempt {attempt} of {attempts}): {said}")
            time.sleep(2)
    if check and p.returncode != 0:
        err = p.stderr if text else p.stderr.decode(errors="replace")
        where = f"{name} ({ip})" if name else ip
        raise AssertionError(
            f"`{cmd}` on {where} exited {p.returncode}: {' '.join(x for x in (said, err.strip()) if x)}"
        )
    return p
