"""scripts/role_reads.py: the check `make lint` runs on the roles' boundaries.

Each test plants a small role tree in a temporary directory (an owner role and a reader role) and proves that the
check finds the kind of problem it is about - an undeclared read in each form a role can make it, a declaration
that went stale, an owner that does not name its reader, a role setting another role's variable, a role reading
another role's files by path - and that a correctly declared pair passes. The last test runs it on this
repository's roles: 0 problems.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "role_reads.py"
_spec = importlib.util.spec_from_file_location("role_reads", SCRIPT)
role_reads = importlib.util.module_from_spec(_spec)
sys.modules["role_reads"] = role_reads
_spec.loader.exec_module(role_reads)

OWNER_SPEC = """
argument_specs:
  main:
    short_description: owner
    options:
      owner_port:
        description:
          - A port.
          - "Read by roles: {readers}."
        type: int
        default: 1
"""
READER_SPEC = """
argument_specs:
  main:
    short_description: reader
    options:
      reader_knob:
        description: Its own knob.
        type: str
        default: x
{extra}
"""
DECLARED = """      owner_port:
        description:
          - Read from role owner.
          - The owner's port.
        type: int
"""


def plant(tmp_path, *, reader_tasks, readers="reader", declared=True, templates=None, owner_tasks=None):
    roles = tmp_path / "roles"
    (roles / "owner" / "defaults").mkdir(parents=True)
    (roles / "owner" / "meta").mkdir()
    (roles / "owner" / "defaults" / "main.yml").write_text("---\nowner_port: 1\n")
    (roles / "owner" / "meta" / "argument_specs.yml").write_text(OWNER_SPEC.format(readers=readers))
    if owner_tasks:
        (roles / "owner" / "tasks").mkdir()
        (roles / "owner" / "tasks" / "main.yml").write_text(textwrap.dedent(owner_tasks))
    for sub in ("tasks", "defaults", "meta"):
        (roles / "reader" / sub).mkdir(parents=True)
    (roles / "reader" / "defaults" / "main.yml").write_text("---\nreader_knob: x\n")
    (roles / "reader" / "meta" / "argument_specs.yml").write_text(
        READER_SPEC.format(extra=DECLARED if declared else "")
    )
    (roles / "reader" / "tasks" / "main.yml").write_text(textwrap.dedent(reader_tasks))
    for name, text in (templates or {}).items():
        (roles / "reader" / "templates").mkdir(exist_ok=True)
        (roles / "reader" / "templates" / name).write_text(text)
    return roles


def check(roles):
    found, reads, undeclared = role_reads.problems(role_reads.roles_in(roles))
    return found, reads, undeclared


USES_PORT = """
- name: Use the owner's port
  ansible.builtin.debug:
    msg: "{{ owner_port }}"
"""


def test_a_declared_read_on_both_sides_passes(tmp_path):
    found, reads, undeclared = check(plant(tmp_path, reader_tasks=USES_PORT))
    assert found == [] and undeclared == []
    assert [(r.reader, r.name, r.owner) for r in reads] == [("reader", "owner_port", "owner")]


@pytest.mark.parametrize(
    "tasks",
    [
        USES_PORT,
        # a bare expression (when:)
        "- name: Bare\n  ansible.builtin.debug:\n    msg: x\n  when: owner_port | int > 0\n",
        # another host's variable
        "- name: Hostvars\n  ansible.builtin.debug:\n    msg: \"{{ hostvars['h'].owner_port }}\"\n",
        "- name: Hostvars item\n  ansible.builtin.debug:\n    msg: \"{{ hostvars['h']['owner_port'] }}\"\n",
        # a string naming the owner's variable
        "- name: Select\n  ansible.builtin.debug:\n"
        "    msg: \"{{ groups['all'] | map('extract', hostvars) | selectattr('owner_port', 'defined') }}\"\n",
    ],
    ids=["variable", "when", "hostvars-attr", "hostvars-item", "selectattr-string"],
)
def test_each_form_of_an_undeclared_read_is_found(tmp_path, tasks):
    found, _, undeclared = check(plant(tmp_path, reader_tasks=tasks, declared=False, readers="nobody"))
    assert [r.name for r in undeclared] == ["owner_port"]
    assert any("undeclared cross-role read of owner_port (role owner)" in p for p in found), found


def test_a_read_in_a_template_is_found(tmp_path):
    roles = plant(
        tmp_path,
        reader_tasks="- name: Nothing\n  ansible.builtin.debug:\n    msg: x\n",
        declared=False,
        readers="nobody",
        templates={"unit.j2": "{% set p = 1 %}Port={{ owner_port }} {{ p }}\n"},
    )
    found, _, undeclared = check(roles)
    assert [r.where for r in undeclared] == ["reader/templates/unit.j2"]
    assert len([p for p in found if "undeclared" in p]) == 1


def test_an_owner_that_does_not_name_its_reader_fails(tmp_path):
    found, _, undeclared = check(plant(tmp_path, reader_tasks=USES_PORT, readers="someone_else"))
    assert [r.name for r in undeclared] == ["owner_port"]
    assert any("does not name reader in 'Read by roles:'" in p for p in found)
    assert any(
        "'Read by roles:' of owner_port names someone_else; the roles that read it are reader" in p for p in found
    )


def test_a_declaration_the_code_no_longer_makes_is_stale(tmp_path):
    found, reads, _ = check(
        plant(tmp_path, reader_tasks="- name: Nothing\n  ansible.builtin.debug:\n    msg: x\n", readers="reader")
    )
    assert reads == []
    assert "reader: owner_port is declared 'Read from role owner.', but reader does not read it" in found
    assert any("names reader; the roles that read it are none" in p for p in found)


def test_setting_another_roles_variable_is_refused(tmp_path):
    tasks = USES_PORT + "- name: Overwrite\n  ansible.builtin.set_fact:\n    owner_port: 2\n"
    found, _, _ = check(plant(tmp_path, reader_tasks=tasks))
    assert any("reader sets owner_port, a variable of role owner" in p for p in found), found


@pytest.mark.parametrize(
    "tasks",
    [
        '- name: Vars\n  ansible.builtin.include_vars:\n    file: "{{ role_path }}/../owner/defaults/main.yml"\n',
        "- name: Lookup\n  ansible.builtin.set_fact:\n"
        "    reader_x: \"{{ lookup('ansible.builtin.file', role_path ~ '/../owner/defaults/main.yml') }}\"\n",
        "- name: Copy\n  ansible.builtin.copy:\n    src: ../owner/files/x\n    dest: /tmp/x\n    mode: '0644'\n",
        "- name: Relative to the playbook\n  ansible.builtin.set_fact:\n"
        "    reader_x: \"{{ lookup('ansible.builtin.file', 'roles/owner/vars/main.yml') }}\"\n",
    ],
    ids=["include_vars-role_path", "lookup-role_path", "src-dotdot", "lookup-roles-dir"],
)
def test_reading_another_roles_files_by_path_is_refused(tmp_path, tasks):
    found, _, _ = check(plant(tmp_path, reader_tasks=tasks, declared=False, readers="nobody"))
    assert any("reads another role's files by path" in p for p in found), found


def test_a_message_that_names_a_path_is_no_read(tmp_path):
    tasks = (
        "- name: Say\n  ansible.builtin.fail:\n    msg: add the branch to roles/owner/vars/main.yml\n  when: false\n"
    )
    found, _, _ = check(plant(tmp_path, reader_tasks=tasks, declared=False, readers="nobody"))
    assert not any("by path" in p for p in found)


def test_a_published_fact_must_be_set_by_its_owner(tmp_path):
    roles = plant(tmp_path, reader_tasks=USES_PORT)
    spec = roles / "owner" / "meta" / "argument_specs.yml"
    spec.write_text(spec.read_text().replace("- A port.", "- A port.\n          - Published by this role at run time."))
    found, _, _ = check(roles)
    assert "owner: owner_port is declared 'Published by this role at run time.' but the role never sets it" in found
    roles = plant(
        tmp_path / "b",
        reader_tasks=USES_PORT,
        owner_tasks="- name: Set\n  ansible.builtin.set_fact:\n    owner_port: 3\n",
    )
    spec = roles / "owner" / "meta" / "argument_specs.yml"
    spec.write_text(spec.read_text().replace("- A port.", "- A port.\n          - Published by this role at run time."))
    assert check(roles)[0] == []


def test_the_topology_filter_reads_the_shared_fleet_variables(tmp_path):
    roles = plant(tmp_path, reader_tasks=USES_PORT)
    (roles / "llmops_defaults" / "defaults").mkdir(parents=True)
    (roles / "llmops_defaults" / "defaults" / "main.yml").write_text("---\nllmops_replica: x\n")
    tasks = roles / "reader" / "tasks" / "main.yml"
    tasks.write_text(
        tasks.read_text() + "- name: Fleet\n  ansible.builtin.debug:\n"
        "    msg: \"{{ groups['gpu_servers'] | llmops.sglang.fleet_topology(hostvars, {}) }}\"\n"
    )
    _, _, undeclared = check(roles)
    assert {r.name for r in undeclared} == set(role_reads.HOST_VARIABLES)
    assert {r.owner for r in undeclared} == {"llmops_defaults"}


def test_this_repositorys_roles_have_no_undeclared_read_and_no_read_by_path():
    run = subprocess.run([sys.executable, str(SCRIPT)], capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stderr
    assert " 0 undeclared, 0 problem(s)" in run.stdout
    listed = subprocess.run([sys.executable, str(SCRIPT), "--list"], capture_output=True, text=True, check=False)
    assert "UNDECLARED" not in listed.stdout and " 0 undeclared" in listed.stdout
