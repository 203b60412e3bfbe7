"""Issue 25 item 5: the role fleet_firewall as ansible-playbook runs it, on the controller only (local connection,
--check: nothing on this host changes; the table would be written and loaded on a real multi-node replica, which is
the node test's part). Proves that bad input stops the role in one line before its first change, that the plan reaches
the file task and the unit, and that a host without a table gets nothing."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import jinja2
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
ROLE = ROOT / "roles" / "fleet_firewall"
PLAY = [
    {
        "name": "The fleet's firewall table",
        "hosts": "gpu_servers",
        "gather_facts": False,
        "roles": [{"role": "llmops.sglang.llmops_defaults"}, {"role": "llmops.sglang.fleet_firewall"}],
    }
]


def inventory(h1=None, **group_vars):
    hosts = {
        "h0": {"ansible_host": "10.214.250.10", "llmops_replica": "tp16"},
        "h1": {"ansible_host": "10.214.250.11", "llmops_replica": "tp16", **(h1 or {})},
        "h2": {"ansible_host": "10.214.250.12"},
    }
    common = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"}
    return {"all": {"vars": common, "children": {"gpu_servers": {"hosts": hosts, "vars": group_vars}}}}


def play(ansible_playbook, tmp_path, inv, *args):
    (tmp_path / "play.yml").write_text(yaml.safe_dump(PLAY))
    return ansible_playbook(tmp_path, inv, tmp_path / "play.yml", "--check", *args)


def test_a_newline_in_an_address_stops_the_role_in_one_line_before_its_first_change(ansible_playbook, tmp_path):
    """The name resolving to loopback, a catch-all network and the other bad values are refused by the same plan
    (tests/security/test_fleet_firewall.py, one case each); this run proves the refusal reaches the user as the role's
    one line, before any task that changes something."""
    h1, group_vars, expected = {"fleet_firewall_addresses": ["10.1.1.1\n}"]}, {}, "Remove the whitespace or control"
    run = play(ansible_playbook, tmp_path, inventory(h1, **group_vars))
    assert run.returncode != 0, run.stdout[-2000:]
    failures = [ln for ln in run.stdout.splitlines() if ln.startswith("fatal:")]
    assert failures and all(expected in ln for ln in failures), run.stdout[-3000:]
    msgs = re.findall(r'"msg": "(.*?)"\}', run.stdout)
    assert msgs and all("nothing was changed" in m and "\\n" not in m.split("found", 1)[0] for m in msgs), msgs
    install = re.search(
        r"TASK \[llmops\.sglang\.fleet_firewall : Install nftables.*?(?=TASK \[|PLAY RECAP)", run.stdout, re.S
    )
    assert install is None or not re.search(r"\[h[01]\]", install.group(0)), install.group(0)  # the refused hosts
    assert "Traceback" not in run.stdout + run.stderr


def test_an_account_allowed_over_loopback_that_does_not_exist_stops_the_role_before_its_first_change(
    ansible_playbook, tmp_path
):
    # nft resolves names when it loads the table: a missing account would fail the load, after nftables was installed
    run = play(ansible_playbook, tmp_path, inventory(fleet_firewall_local_accounts=["llmops-no-such-account", 4242]))
    assert run.returncode != 0, run.stdout[-2000:]
    failures = [ln for ln in run.stdout.splitlines() if ln.startswith("fatal:")]
    assert len(failures) == 3 and all("found no account llmops-no-such-account." in ln for ln in failures), failures
    assert "4242" not in " ".join(failures)  # a uid needs no account: nft takes the number as it is
    assert "TASK [llmops.sglang.fleet_firewall : Install nftables" not in run.stdout


def test_the_role_plans_checks_and_would_write_the_table_only_where_one_is_wanted(ansible_playbook, tmp_path):
    # SGLang's service account: one this machine has (nft resolves names when it loads the table)
    run = play(ansible_playbook, tmp_path, inventory(llmops_service_user="nobody"), "--diff")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    out = run.stdout
    # the multi-node replica's hosts: the table, with the other node's address, would be written 0600 and loaded
    assert "h0: TCP 20000-20005, 20013, 32768-65535 only from replica tp16 (2 node(s))" in out
    assert "elements = { 10.214.250.10, 10.214.250.11 }" in out and "10.214.250.12" not in out.split("PLAY RECAP")[0]
    task = re.compile(r"TASK \[llmops\.sglang\.fleet_firewall : Write the firewall table.*?(?=TASK \[)", re.S)
    assert re.search(r"changed: \[h0\]", task.search(out).group(0))
    # the single-node replica h2: its ephemeral and pyzmq ports for itself alone
    assert (
        "h2: TCP 32768-65535 only from this host (single-node replica h2); over loopback only from nobody, root" in out
    )
    assert 'meta skuid != { "nobody", "root" } counter reject with tcp reset' in out
    assert re.search(r"changed: \[h2\]", task.search(out).group(0))


def test_a_service_account_not_made_yet_is_left_out_of_the_table_until_it_exists(ansible_playbook, tmp_path):
    # a model stage with the fan-out runs the role before the build stage makes the account; the server stage plans
    # again once it exists
    run = play(ansible_playbook, tmp_path, inventory(llmops_service_user="llmops-not-made-yet"), "--diff")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert (
        "h2: TCP 32768-65535 only from this host (single-node replica h2); over loopback only from root" in run.stdout
    )
    assert 'meta skuid != { "root" } counter reject with tcp reset' in run.stdout


def test_the_argument_specs_declare_every_variable_the_role_reads_from_the_inventory():
    spec = yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]["main"]["options"]
    defaults = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())
    assert set(defaults) <= set(spec) and "llmops_firewall" in spec
    knob = yaml.safe_load((ROOT / "roles" / "llmops_defaults" / "defaults" / "main.yml").read_text())["llmops_firewall"]
    assert knob is True  # on by default (docs/security.md says why)
    assert json.dumps(spec["llmops_firewall"]).count("Read from role llmops_defaults.") == 1


def test_the_unit_reloads_the_table_after_debians_nftables_service_which_flushes_every_table(tmp_path):
    """Debian's own nftables.service runs /etc/nftables.conf, whose first rule is `flush ruleset`: the table would be
    gone after every boot, restart or reload of it unless the unit comes after it and follows its restarts/reloads.
    Read from the installed Debian package (make setup installs it); the rendered unit checked by systemd-analyze."""
    conf, debian_unit = Path("/etc/nftables.conf"), Path("/lib/systemd/system/nftables.service")
    if not conf.exists() or not debian_unit.exists() or not shutil.which("systemd-analyze"):
        pytest.skip("needs Debian's nftables package and systemd-analyze (make setup installs nftables)")
    first = next(ln.strip() for ln in conf.read_text().splitlines() if ln.strip() and not ln.startswith("#"))
    assert first == "flush ruleset"
    real = debian_unit.read_text()
    assert (
        "ExecStart=/usr/sbin/nft -f /etc/nftables.conf" in real
        and "ExecReload=/usr/sbin/nft -f /etc/nftables.conf" in real
    )
    variables = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    text = jinja2.Template((ROLE / "templates" / "llmops-sglang-firewall.service.j2").read_text()).render(
        ansible_managed="Ansible managed", **{k: v for k, v in variables.items() if not str(v).startswith("{{")}
    )
    unit = tmp_path / variables["fleet_firewall_unit"]
    unit.write_text(text)
    reload = f"ExecReload=/usr/sbin/nft -f {variables['fleet_firewall_file']}"
    for line in ("After=nftables.service", "PartOf=nftables.service", "ReloadPropagatedFrom=nftables.service",
                 "Before=network-pre.target shutdown.target", reload,
                 "ExecStop=-/usr/sbin/nft delete table inet llmops_sglang"):  # fmt: skip
        assert line in text.splitlines(), line
    verify = subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False
    )
    assert verify.returncode == 0 and verify.stderr.strip() == "", verify.stderr
