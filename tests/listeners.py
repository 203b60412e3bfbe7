"""What listens on a simulated node or a stand-in process (``ss -ltnpH``), against the Listeners table of
docs/security.md.

The table is the documentation users read: every port the collection opens, its default bind address and who may
connect. A node test takes ``ss -ltnpH`` from a serving node and asks ``problems`` for the listeners the table does not
list (stray) and those bound elsewhere than it says (wrong). A row's port is a number (``var`` = ``30000``) or the
kernel's ephemeral range (``fixed `ephemeral```): a listener on a port of the host's ``ip_local_port_range`` that no
numbered row names is matched against the ephemeral row.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EVERY_INTERFACE = ("0.0.0.0", "*", "::")
NODE_OWN = {"sshd"}  # the simulated node's own services, not the collection's


def documented() -> dict[int | str, tuple[str | None, str]]:
    """{port or "ephemeral": (bind variable or None when fixed, default bind)} from docs/security.md's table."""
    text = (ROOT / "docs" / "security.md").read_text()
    table = text.split("## Listeners", 1)[1].split("\n## ", 1)[0]
    out: dict[int | str, tuple[str | None, str]] = {}
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 7 or not line.startswith("| "):
            continue
        port = re.match(r"`(\w+)` = `(\d+)`", cells[1])
        ephemeral = re.match(r"fixed `ephemeral`", cells[1])
        bind = re.match(r"`(\w+)` = `([^`]+)`", cells[2]) or re.match(r"fixed `([^`]+)`", cells[2])
        if bind is None or not (port or ephemeral):
            continue
        where = (bind.group(1), bind.group(2)) if bind.lastindex == 2 else (None, bind.group(1))
        out[int(port.group(2)) if port else "ephemeral"] = where
    return out


def listening(ss_output: str, pid: int | None = None) -> set[tuple[str, int, str]]:
    """(address, port, process name) of every listening TCP socket in ``ss -ltnpH``'s output (only process ``pid``'s
    when given)."""
    out = set()
    for line in ss_output.splitlines():
        fields = line.split()
        if len(fields) < 4 or (pid is not None and f"pid={pid}," not in line):
            continue
        addr, port = fields[3].rsplit(":", 1)
        proc = re.search(r'users:\(\("([^"]+)"', line)
        out.add((addr.strip("[]"), int(port), proc.group(1) if proc else "?"))
    return out


def problems(seen: dict[str, set], binds: dict[str, str], ephemeral: tuple[int, int]):
    """(stray, wrong) over ``seen`` ({node: listening(...)}): listeners no row lists, listeners bound elsewhere than
    their row's default or the inventory's value in ``binds`` ({variable: value})."""
    rows = documented()
    stray, wrong = [], []
    for name, found in sorted(seen.items()):
        for addr, port, proc in sorted(found):
            if proc in NODE_OWN:
                continue
            key = port if port in rows else ("ephemeral" if ephemeral[0] <= port <= ephemeral[1] else None)
            if key not in rows:
                stray.append((name, addr, port, proc))
                continue
            var, default = rows[key]
            want = binds.get(var, default) if var else default
            if addr != want and not (want == "0.0.0.0" and addr in EVERY_INTERFACE):
                wrong.append((name, addr, port, proc, f"docs: {var or 'fixed'} = {want}"))
    return stray, wrong


def ports(found: set[tuple[str, int, str]], ephemeral: tuple[int, int]) -> list[int | str]:
    """The ports of the collection's listeners, a port of the ephemeral range shown as "ephemeral"."""
    return sorted(
        {"ephemeral" if ephemeral[0] <= p <= ephemeral[1] else p for _, p, proc in found if proc not in NODE_OWN},
        key=str,
    )


def port_range(text: str) -> tuple[int, int]:
    """The two numbers of ``/proc/sys/net/ipv4/ip_local_port_range``."""
    low, high = text.split()
    return int(low), int(high)


def in_range(found: set[tuple[str, int, str]], ephemeral: tuple[int, int]) -> list[int]:
    """The ports of the collection's listeners that lie in the ephemeral range (a process-group store, ...)."""
    return sorted(p for _, p, proc in found if ephemeral[0] <= p <= ephemeral[1] and proc not in NODE_OWN)


def of_process(pid: int) -> set[tuple[str, int, str]]:
    """``listening`` for process ``pid`` of this host (the stand-in launched by a test)."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, timeout=30, check=True).stdout
    return listening(out, pid)


def this_host_range() -> tuple[int, int]:
    """This host's ephemeral port range."""
    return port_range(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text())
