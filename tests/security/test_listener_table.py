"""Issue 25 item 1 (start): docs/security.md's listener table cannot drift from the roles' defaults.

Every `variable` = `default` cell of the table must be that role default (roles/*/defaults/main.yml), every role
variable that names a bind address or a port (*_host, *_port) must be in the table (or listed below as not a
listener, with the reason), and every row that binds every interface or asks no key must say so in its Open column.
The node test the issue asks for (ss -ltnp on a 2-replica fleet against this table) is not part of this change."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "security.md").read_text()
CELL = re.compile(r"`([a-z_]+)` = `([^`]*)`")
# Role variables named like a listener's that are not one: why.
NOT_LISTENERS = {
    "python_env_build_host": "the host a build runs on (a delegate_to target), not a bind address",
}


def _defaults():
    out = {}
    for path in sorted(ROOT.glob("roles/*/defaults/main.yml")):
        for name, value in (yaml.safe_load(path.read_text()) or {}).items():
            out[name] = value
    return out


def _rows():
    lines = DOC.split("## Listeners", 1)[1].split("\n## ", 1)[0].splitlines()
    table = [ln for ln in lines if ln.startswith("|")]
    header = [c.strip() for c in table[0].strip("|").split("|")]
    return [dict(zip(header, (c.strip() for c in ln.strip("|").split("|")), strict=True)) for ln in table[2:]]


ROWS = _rows()


def test_the_table_lists_every_kind_of_listener_the_issue_names():
    names = " ".join(r["Listener"] for r in ROWS).lower()
    for kind in (
        "sglang http",
        "prometheus",
        "router data plane",
        "router control plane",
        "share",
        "rendezvous",
        "nccl",
        "dummy",
    ):
        assert kind in names, kind
    assert len(ROWS) >= 9


@pytest.mark.parametrize("row", ROWS, ids=[r["Listener"][:40] for r in ROWS])
def test_each_rows_default_bind_and_port_are_the_role_defaults(row):
    defaults = _defaults()
    cells = CELL.findall(row["Port"] + " " + row["Bind by default"])
    for name, value in cells:
        assert name in defaults, f"{name} is not a role default"
        assert str(defaults[name]) == value, (name, defaults[name], value)
    fixed = "fixed" in row["Port"] or "fixed" in row["Bind by default"]
    assert cells or fixed, row["Listener"]


def test_every_bind_or_port_variable_of_the_roles_is_in_the_table():
    named = {n for r in ROWS for n, _ in CELL.findall(r["Port"] + " " + r["Bind by default"])}
    named |= set(re.findall(r"`([a-z_]+)`", " ".join(r["Bind by default"] for r in ROWS)))
    listener_vars = {n for n in _defaults() if n.endswith(("_host", "_port"))}
    assert listener_vars - named - set(NOT_LISTENERS) == set()


def test_a_row_on_every_interface_or_without_a_key_is_marked_open():
    for row in ROWS:
        # every interface is open; the fleet's address (a host's ansible_host) is not, when a key guards it
        wide = re.search(r"(= |fixed )`0\.0\.0\.0`", row["Bind by default"]) is not None
        keyless = row["Authentication by default"].startswith("none")
        if wide or keyless:
            assert row["Open"] not in ("", "no"), row["Listener"]


def test_each_node_test_the_document_names_for_ss_ltnp_compares_its_listeners_with_the_table():
    """docs/security.md says which node tests compare `ss -ltnp` with the Listeners table: each of them does
    (tests/listeners.py parses the table), on the three shapes a fleet takes."""
    named = set(re.findall(r"`(tests/integration/test_\w+\.py)`", DOC.split("## Listeners and secrets", 1)[1]))
    assert named >= {
        "tests/integration/test_router_rolling_on_nodes.py",
        "tests/integration/test_multinode_tp_on_nodes.py",
        "tests/integration/test_server_stage.py",
    }, named
    for path in sorted(named):
        text = (ROOT / path).read_text()
        assert '"ss -ltnpH"' in text and "listeners.problems(" in text, path
