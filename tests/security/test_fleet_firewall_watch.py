"""The unit that keeps the fleet's firewall table loaded (roles/fleet_firewall, llmops-sglang-firewall-watch.service).

The role's own template is rendered, and the commands of its ExecStartPre= and ExecStart= lines (as systemd would run
them: `$$` is `$`) run in a network namespace of the test's own with Debian's real nft: the start loads a missing
table; once `nft monitor` listens, a deletion of the table, a `nft flush ruleset` and another table's deletion are
answered by loading the table again (the first two) or by nothing (the third); a reload of the table in one
transaction (the role's own swap) leaves it as it is. Skips where root, `ip netns` or nft do not work; the namespace
and the watcher are removed also when the test fails.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml
from events import wait_until

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "fleet_firewall"
NFT = shutil.which("nft") or "/usr/sbin/nft"
TABLE = (
    "table inet llmops_sglang\ndelete table inet llmops_sglang\n"
    "table inet llmops_sglang {\n\tset s { type inet_service; elements = { 20000 } }\n}\n"
)


def unit_lines(table_file: Path) -> dict[str, str]:
    """The rendered watch unit's ExecStartPre and ExecStart commands, as systemd runs them."""
    roles_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    values = {k: roles_vars[k] for k in ("fleet_firewall_unit", "fleet_firewall_table")}
    values.update(fleet_firewall_nft=NFT, fleet_firewall_file=str(table_file), ansible_managed="test")
    values["fleet_firewall_watch_load"] = env.from_string(roles_vars["fleet_firewall_watch_load"]).render(values)
    text = env.from_string((ROLE / "templates" / "llmops-sglang-firewall-watch.service.j2").read_text()).render(values)
    out = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep and key in ("ExecStartPre", "ExecStart", "PartOf", "After", "Restart"):
            out[key] = value.replace("$$", "$")
    return out


def shell_command(line: str) -> str:
    """The script of an `/bin/sh -c '...'` command line."""
    m = re.fullmatch(r"/bin/sh -c '(.*)'", line)
    assert m, line
    return m.group(1)


@pytest.fixture
def netns():
    if os.geteuid() != 0 or not shutil.which("ip") or not os.path.exists(NFT):
        pytest.skip("needs root, iproute2 and nft (make setup installs both)")
    name = f"llfw-watch-{secrets.token_hex(3)}"
    made = subprocess.run(["ip", "netns", "add", name], capture_output=True, text=True, timeout=30, check=False)
    if made.returncode != 0:
        pytest.skip(f"ip netns does not work here: {made.stderr.strip()}")
    try:
        yield name
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30, check=False)


def in_ns(ns, *argv, check=True):
    return subprocess.run(["ip", "netns", "exec", ns, *argv], capture_output=True, text=True, timeout=60, check=check)


def loaded(ns) -> bool:
    return in_ns(ns, NFT, "list", "table", "inet", "llmops_sglang", check=False).returncode == 0


def subscribed(ns) -> bool:
    """True once a netfilter netlink socket of the namespace listens to nftables' event group (what `nft monitor`
    subscribes to): /proc/net/netlink, protocol 12 (NETLINK_NETFILTER), group NFNLGRP_NFTABLES (7, bit 0x40)."""
    rows = in_ns(ns, "cat", "/proc/net/netlink").stdout.splitlines()[1:]
    return any(len(r.split()) > 3 and r.split()[1] == "12" and int(r.split()[3], 16) & 0x40 for r in rows)


def test_the_unit_is_part_of_the_loader_and_restarts():
    got = unit_lines(Path("/etc/llmops-sglang/firewall.nft"))
    assert got["PartOf"] == got["After"] == "llmops-sglang-firewall.service" and got["Restart"] == "always"


def test_the_watcher_loads_the_table_again_when_it_is_deleted_or_flushed_and_nothing_else(netns, tmp_path):
    table_file = tmp_path / "firewall.nft"
    table_file.write_text(TABLE)
    lines = unit_lines(table_file)
    assert not loaded(netns)
    in_ns(netns, "/bin/sh", "-c", shell_command(lines["ExecStartPre"]))
    assert loaded(netns)  # the start loads a missing table
    watcher = subprocess.Popen(
        ["ip", "netns", "exec", netns, "/bin/sh", "-c", shell_command(lines["ExecStart"])],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
    )  # fmt: skip
    try:
        wait_until(lambda: subscribed(netns), "nft monitor listening to nftables' events")
        in_ns(netns, NFT, "add", "table", "inet", "other")
        in_ns(netns, NFT, "-f", str(table_file))  # the role's own swap: one transaction, nothing to do
        in_ns(netns, NFT, "delete", "table", "inet", "llmops_sglang")
        wait_until(lambda: loaded(netns), "the deleted table loaded again")
        in_ns(netns, NFT, "flush", "ruleset")
        wait_until(lambda: loaded(netns), "the table loaded again after nft flush ruleset")
        assert "elements = { 20000 }" in in_ns(netns, NFT, "list", "table", "inet", "llmops_sglang").stdout
        assert in_ns(netns, NFT, "list", "table", "inet", "other", check=False).returncode != 0  # not ours to load
    finally:
        os.killpg(watcher.pid, signal.SIGTERM)
        out, _ = watcher.communicate(timeout=30)
    # one line per load it made: after the deletion and after the flush, none for the swap
    assert out.count("was deleted: loading") == 2, out
