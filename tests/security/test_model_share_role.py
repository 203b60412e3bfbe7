"""How the model role runs the fan-out share (roles/model/tasks/main.yml), read from the role's own files: each case
is named after the leak or leftover it proves impossible. tests/integration/test_model_fleet_on_nodes.py runs it."""

from pathlib import Path

import pytest
import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template

ROLE = Path(__file__).resolve().parents[2] / "roles" / "model"
TASKS = yaml.safe_load((ROLE / "tasks" / "main.yml").read_text())
VARS = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
DEFAULTS = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


def walk(tasks):
    for t in tasks:
        yield t
        for key in ("block", "rescue", "always"):
            yield from walk(t.get(key, []))


def task(name_part):
    found = [t for t in walk(TASKS) if name_part in t.get("name", "")]
    assert len(found) == 1, name_part
    return found[0]


START = task("Start the temporary read-only HTTP server")
ARGV = START["ansible.builtin.command"]["argv"]


def test_the_secret_is_not_in_the_share_units_argv_or_properties():
    text = " ".join(ARGV)
    assert "token" not in text and "model_share_token" not in text
    assert not any(a.startswith(("--setenv", "-E", "--property=Environment=")) for a in ARGV)


def test_the_share_gets_its_secret_through_load_credential_from_a_root_only_file():
    assert "--property=LoadCredential=share:{{ model_share_secret_dir }}/share.json" in ARGV
    write = task("Keep the share's secret and the fleet's addresses")
    assert write["no_log"] is True and write["ansible.builtin.copy"]["mode"] == "0600"
    assert write["ansible.builtin.copy"]["owner"] == "root"
    assert VARS["model_share_secret_dir"].startswith("/run/")  # tmpfs: gone at reboot too
    assert task("root-only directory of the share's secret")["ansible.builtin.file"]["mode"] == "0700"


def test_the_receivers_secret_file_is_root_only_and_never_logged():
    write = task("Keep the share's secret for the receivers")
    assert write["no_log"] is True and write["ansible.builtin.copy"]["mode"] == "0600"
    make = task("Make the fan-out share's secret")
    assert make["no_log"] is True and make["run_once"] is True


def test_the_share_listens_on_the_seeds_fleet_address_not_every_interface():
    assert ARGV[-2] == "{{ model_fleet_seed_address }}"
    assert "0.0.0.0" not in DEFAULTS["model_fleet_seed_address"]


def test_an_interrupted_run_cannot_leave_the_share_up_past_its_cap():
    assert any(a.startswith("--property=RuntimeMaxSec=") for a in ARGV)
    assert "--collect" in ARGV and "--property=DynamicUser=yes" in ARGV


def test_the_share_and_its_secret_are_removed_when_the_download_ends_or_fails():
    block = next(t for t in TASKS if "always" in t and any("hf_snapshot" in str(s) for s in t["block"]))
    names = [t["name"] for t in block["always"]]
    assert "Stop sharing the seed host's files" in names
    remove = next(t for t in block["always"] if "Remove the share's secret" in t["name"])
    assert remove["ansible.builtin.file"] == {"path": "{{ model_share_secret_dir }}", "state": "absent"}


def render(expr, **variables):
    variables = {k: trust_as_template(v) if isinstance(v, str) and "{{" in v else v for k, v in variables.items()}
    return Templar(loader=DataLoader(), variables=variables).template(trust_as_template(expr))


@pytest.mark.parametrize(
    ("hostvars", "given", "want"),
    [
        ({"s": {"ansible_host": "10.0.0.1"}, "a": {"ansible_host": "10.0.0.2"}, "b": {}}, [], ["10.0.0.2", "b"]),
        ({"s": {}, "a": {"ansible_host": "10.0.0.2"}, "b": {}}, ["192.168.7.2"], ["192.168.7.2"]),
    ],
    ids=["from-inventory", "given"],
)
def test_the_allow_list_is_the_other_hosts_of_the_fleet_not_the_seed_or_anyone(hostvars, given, want):
    got = render(
        VARS["model_fleet_peers"],
        model_fleet_receivers=VARS["model_fleet_receivers"],
        model_fleet_peer_addresses=given,
        model_fleet_seed="s",
        ansible_play_hosts_all=["s", "a", "b"],
        hostvars=hostvars,
    )
    assert list(got) == want
