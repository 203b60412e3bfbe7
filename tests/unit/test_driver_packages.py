"""The NVIDIA driver's package names per OS and branch (plugins/module_utils/driver_packages.py) against the real
metadata read from public pages (tests/unit/fixtures/ubuntu_nvidia_packages.yml), the refusals before any change,
and the inventory's override of the package list."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from ansible_collections.llmops.sglang.plugins.module_utils import driver_packages as dp

ROOT = Path(__file__).resolve().parents[2]
FIXTURE = yaml.safe_load((ROOT / "tests/unit/fixtures/ubuntu_nvidia_packages.yml").read_text())
FAKE_FACTS = ROOT / "tests/unit/fixtures/fake_os_facts"
ROLE = ROOT / "roles/nvidia_driver"
NAMES = {"Ubuntu-22": "Ubuntu 22.04", "Ubuntu-24": "Ubuntu 24.04", "Debian-12": "Debian 12"}


def request(os_key="Ubuntu-24", branch="580", version="580.95.05-0ubuntu1", **kw):
    base = {
        "os_key": os_key,
        "os_name": NAMES.get(os_key, os_key),
        "branch": branch,
        "version": version,
        "flavor": "open",
        "package_set": "compute",
        "packages": {},
        "persistenced_package": "",
        "persistenced": True,
    }
    base.update(kw)
    return base


def page_names(page):
    entry = FIXTURE["pages"][page]
    names = set(entry.get("binaries", [])) | set(entry.get("providers", [])) | set(entry.get("depends", []))
    return names | ({entry["package"]} if "package" in entry else set())


CASES = [
    (os_key, branch, pset, flavor)
    for os_key, branches in FIXTURE["releases"].items()
    for branch in branches
    for pset in ("compute", "desktop")
    for flavor in ("open", "proprietary")
]


@pytest.mark.parametrize("case", CASES, ids=["-".join(c) for c in CASES])
def test_the_packages_installed_on_ubuntu_are_the_names_of_the_cited_pages(case):
    os_key, branch, pset, flavor = case
    release = FIXTURE["releases"][os_key][branch]
    seen = set().union(*(page_names(p) for p in release["seen_on"]))
    version = branch + ".64.03-0ubuntu1"
    planned = dp.plan(request(os_key, branch, version, flavor=flavor, package_set=pset))
    assert planned["problem"] == ""
    assert planned["packages"], case
    for name in planned["packages"]:
        assert name in seen or name in release["unseen"], f"{name} ({os_key} {branch}) is on no page read"
        assert name.endswith(branch) or ("-" + branch + "-") in name, name  # the branch in every name up to 580


def test_the_unseen_names_are_honest_and_documented():
    doc = (ROOT / "docs/gpu-stack.md").read_text()
    for os_key, branches in FIXTURE["releases"].items():
        for branch, release in branches.items():
            seen = set().union(*(page_names(p) for p in release["seen_on"]))
            installed = set()
            for pset in ("compute", "desktop"):
                for flavor in ("open", "proprietary"):
                    plan = dp.plan(request(os_key, branch, branch + ".1.1-0ubuntu1", flavor=flavor, package_set=pset))
                    installed |= set(plan["packages"])
            assert not set(release["unseen"]) & seen, (os_key, branch)  # a seen name is not listed as unseen
            assert set(release["unseen"]) <= installed, (os_key, branch)  # no stale entry
            for name in release["unseen"]:
                assert f"`{name}`" in doc, f"docs/gpu-stack.md does not say that {name} was not seen"


def test_every_page_is_cited_by_its_address():
    for name, page in FIXTURE["pages"].items():
        assert page["url"].startswith("https://"), name


def test_the_ubuntu_branches_are_the_ones_with_pages():
    for os_key in ("Ubuntu-22", "Ubuntu-24"):
        assert sorted(dp.OS[os_key]["branches"]) == sorted(FIXTURE["releases"][os_key])


def test_the_renamed_packages_of_590_are_not_guessed():
    renames = FIXTURE["pages"]["nvidia_590_renames"]["renames"]
    assert renames["nvidia-dkms-580-open"] == "nvidia-dkms-open"
    planned = dp.plan(request(branch="590", version="590.44.01-0ubuntu1"))
    assert planned["problem"] == (
        "Driver branch 590 has no known package names on Ubuntu 24.04 (known branches: 570, 575, 580; from 590 NVIDIA "
        "renames the Ubuntu packages); set llmops_driver_branch to a known branch, or set nvidia_driver_packages; "
        "nothing was changed."
    )


def test_debian_keeps_nvidias_debian_names_on_every_branch():
    for branch in ("575", "580", "590"):
        plan = dp.plan(request("Debian-12", branch, branch + ".10.01-1"))
        assert plan["problem"] == ""
        assert plan["packages"] == ["nvidia-driver-cuda", "nvidia-kernel-open-dkms", "nvidia-persistenced"]
    desktop = dp.plan(request("Debian-12", "580", "580.95.05-1", package_set="desktop", flavor="proprietary"))
    assert desktop["packages"] == ["nvidia-driver", "nvidia-kernel-dkms", "nvidia-persistenced"]


def test_ubuntu_installs_persistenced_from_the_compute_utilities_of_the_branch():
    plan = dp.plan(request())
    assert plan["packages"] == ["nvidia-headless-580-open", "nvidia-utils-580", "nvidia-compute-utils-580"]
    assert "nvidia-compute-utils-580" in page_names("noble_source_580")
    assert dp.plan(request(persistenced=False))["packages"] == ["nvidia-headless-580-open", "nvidia-utils-580"]


@pytest.mark.parametrize(
    ("req", "message"),
    [
        (
            request(version="580.95.05-1"),
            "llmops_driver_version 580.95.05-1 is a Debian package version, but Ubuntu 24.04's NVIDIA packages are "
            "versioned like '580.95.05-0ubuntu1'; set llmops_driver_version to the Ubuntu 24.04 version of the "
            "driver; nothing was changed.",
        ),
        (
            request("Debian-12", version="580.95.05-0ubuntu1"),
            "llmops_driver_version 580.95.05-0ubuntu1 is an Ubuntu package version, but Debian 12's NVIDIA packages "
            "are versioned like '580.95.05-1'; set llmops_driver_version to the Debian 12 version of the driver; "
            "nothing was changed.",
        ),
        (
            request("Rocky-9", version="580.95.05-1", os_name="Rocky 9.4"),
            "Rocky 9.4 has no NVIDIA package names in this collection (known: Debian 12, Ubuntu 22.04, Ubuntu "
            "24.04); set nvidia_driver_packages to the driver's packages for this system; nothing was changed.",
        ),
        (
            request(branch="580", version="575.57.08-0ubuntu1"),
            "llmops_driver_version 575.57.08-0ubuntu1 is not on llmops_driver_branch 580; set both to one branch, "
            "e.g. '580' and '580.95.05-0ubuntu1'; nothing was changed.",
        ),
        (
            request(packages={"compute": "nvidia-headless-580-open"}),
            "nvidia_driver_packages must map compute/desktop to open/proprietary lists of package names, e.g. "
            "{compute: {open: [nvidia-headless-580-open, nvidia-utils-580]}}; found "
            "{'compute': 'nvidia-headless-580-open'}; nothing was changed.",
        ),
        (
            request(packages={"desktop": {"open": ["nvidia-driver-580-open"]}}),
            "nvidia_driver_packages names no packages for package set compute and flavour open; add compute.open, or "
            "leave nvidia_driver_packages unset for the collection's names; nothing was changed.",
        ),
    ],
)
def test_a_request_that_cannot_be_right_is_refused_in_one_line(req, message):
    plan = dp.plan(req)
    assert plan["problem"] == message
    assert "\n" not in plan["problem"]
    assert plan["packages"] == []


def test_ubuntus_own_revisions_count_as_ubuntu_versions():
    assert dp.version_style("580.95.05-0ubuntu0.24.04.3") == "ubuntu"
    assert dp.version_style("580.95.05-0ubuntu1") == "ubuntu"
    assert dp.version_style("580.95.05-1") == "debian"
    assert dp.plan(request(version="580.95.05-0ubuntu0.24.04.3"))["problem"] == ""


def test_the_inventorys_package_list_is_honoured_even_for_an_unknown_branch():
    mine = {"compute": {"open": ["libnvidia-compute", "nvidia-dkms-open", "my-nvidia-smi"]}}
    plan = dp.plan(request(branch="590", version="590.44.01-0ubuntu1", packages=mine))
    assert plan["problem"] == ""
    assert plan["packages"] == ["libnvidia-compute", "nvidia-dkms-open", "my-nvidia-smi", "nvidia-compute-utils-590"]
    plan = dp.plan(request(packages=mine, persistenced_package="nvidia-persistenced"))
    assert plan["packages"][-1] == "nvidia-persistenced"


def test_the_role_reads_its_package_lists_from_variables_an_inventory_can_override():
    """No include_vars (which outranks the inventory), no role vars and no set_fact name the package list."""
    for path in (ROLE / "tasks").glob("*.yml"):
        text = path.read_text()
        assert "include_vars" not in text, path
        for task in yaml.safe_load(text) or []:
            facts = task.get("ansible.builtin.set_fact") or {}
            assert "nvidia_driver_packages" not in facts and "nvidia_driver_persistenced_package" not in facts
    role_vars = yaml.safe_load((ROLE / "vars/main.yml").read_text())
    assert "nvidia_driver_packages" not in role_vars and "nvidia_driver_persistenced_package" not in role_vars
    assert sorted(p.name for p in (ROLE / "vars").iterdir()) == ["main.yml"]
    defaults = yaml.safe_load((ROLE / "defaults/main.yml").read_text())
    assert defaults["nvidia_driver_packages"] == {} and defaults["nvidia_driver_persistenced_package"] == ""
    plan_expr = role_vars["nvidia_driver_plan"]
    assert "'packages': nvidia_driver_packages" in plan_expr and "llmops.sglang.driver_plan" in plan_expr
    validate = yaml.safe_load((ROLE / "tasks/validate.yml").read_text())
    assert validate[0]["ansible.builtin.assert"]["that"] == "nvidia_driver_plan.problem | length == 0"
    assert validate[1]["ansible.builtin.set_fact"]["nvidia_driver_install_packages"] == (
        "{{ nvidia_driver_plan.packages }}"
    )


# ---- the role on this machine, as if it were Ubuntu 24.04 (fake facts), in check mode --------------------------


def _play(tmp_path, inventory_vars, tasks):
    (tmp_path / "inventory.yml").write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {
                        "localhost": {
                            "ansible_connection": "local",
                            "ansible_python_interpreter": sys.executable,
                            **inventory_vars,
                        }
                    }
                }
            }
        )
    )
    play = [
        {
            "hosts": "localhost",
            "gather_facts": False,
            "pre_tasks": [
                {
                    "name": "Report Ubuntu 24.04's facts",
                    "fake_os_facts": {"distribution": "Ubuntu", "distribution_version": "24.04"},
                }
            ],
            "tasks": tasks,
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play, sort_keys=False))
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(ROOT),
        "ANSIBLE_LIBRARY": str(FAKE_FACTS),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default",
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
        "ANSIBLE_CALLBACK_FORMAT_PRETTY": "false",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"),
        "ANSIBLE_NOCOLOR": "1",
    }
    playbook = shutil.which("ansible-playbook", path=str(Path(sys.executable).parent)) or "ansible-playbook"
    cmd = [playbook, "-i", str(tmp_path / "inventory.yml"), "--check", str(tmp_path / "play.yml")]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180, check=False)


def test_on_ubuntu_a_debian_version_is_refused_before_the_first_change(tmp_path):
    proc = _play(
        tmp_path,
        {"llmops_driver_version": "580.95.05-1"},
        [{"ansible.builtin.include_role": {"name": "llmops.sglang.nvidia_driver"}}],
    )
    out = proc.stdout
    assert proc.returncode == 2, out[-3000:] + proc.stderr[-3000:]
    assert "Traceback" not in out + proc.stderr
    fatal = [line for line in out.splitlines() if line.startswith("fatal: [localhost]: FAILED! => ")]
    assert len(fatal) == 1
    assert json.loads(fatal[0].split(" => ", 1)[1])["msg"] == (
        "llmops_driver_version 580.95.05-1 is a Debian package version, but Ubuntu 24.04's NVIDIA packages are "
        "versioned like '580.95.05-0ubuntu1'; set llmops_driver_version to the Ubuntu 24.04 version of the driver; "
        "nothing was changed."
    )
    before_fatal = out[: out.index(fatal[0])]
    tasks = [line for line in before_fatal.splitlines() if line.startswith("TASK [")]
    assert tasks[-1].startswith(
        "TASK [llmops.sglang.nvidia_driver : Check the requested branch, version, flavour and package set against"
    )
    assert not [t for t in tasks if "nvidia_repo" in t or "Pin every package" in t or "Blacklist" in t]
    assert "changed: [localhost]" not in before_fatal


def test_on_ubuntu_the_default_version_and_an_inventory_package_list_are_taken(tmp_path):
    mine = {"compute": {"open": ["nvidia-headless-580-open", "nvidia-utils-580", "nvidia-fabricmanager-580"]}}
    # nvswitch.yml only reads the PCI bus; public makes the role's defaults and vars visible to the next task
    tasks = [
        {
            "ansible.builtin.include_role": {
                "name": "llmops.sglang.nvidia_driver",
                "tasks_from": "nvswitch",
                "public": True,
            }
        },
        {"name": "Show the plan", "ansible.builtin.debug": {"msg": "{{ nvidia_driver_plan }}"}},
        {"name": "Show the version", "ansible.builtin.debug": {"msg": "{{ llmops_driver_version }}"}},
    ]
    proc = _play(tmp_path, {"nvidia_driver_packages": mine}, tasks)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    oks = [line for line in proc.stdout.splitlines() if line.startswith("ok: [localhost] => {")]
    results = [json.loads(line.split(" => ", 1)[1]) for line in oks]
    plan, version = results[-2]["msg"], results[-1]["msg"]
    assert version == "580.95.05-0ubuntu1"
    assert plan["problem"] == ""
    assert plan["packages"] == mine["compute"]["open"] + ["nvidia-compute-utils-580"]


def test_every_roles_platforms_are_the_support_matrix_systems():
    doc = (ROOT / "docs/gpu-stack.md").read_text()
    matrix = doc[doc.index("## Support matrix") :].split("\n\n", 2)[1]
    rows = [line.split("|")[1].strip() for line in matrix.splitlines()[2:]]
    systems = {}
    for row in rows:  # "Ubuntu 22.04 (jammy)"
        name, codename = row.split(" ", 1)[0], row.split("(", 1)[1].rstrip(")")
        systems.setdefault(name, set()).add(codename)
    assert systems == {"Debian": {"bookworm"}, "Ubuntu": {"jammy", "noble"}}
    for meta in sorted(ROOT.glob("roles/*/meta/main.yml")):
        platforms = yaml.safe_load(meta.read_text())["galaxy_info"]["platforms"]
        assert {p["name"]: set(p["versions"]) for p in platforms} == systems, meta
    for os_key in dp.OS:
        assert dp.OS[os_key]["name"].split(" ")[0] in systems


@pytest.mark.parametrize(
    ("distribution", "os_key", "expected"),
    [
        ("Debian", "Debian-12", "580.95.05-1"),
        ("Ubuntu", "Ubuntu-22", "580.95.05-0ubuntu1"),
        ("Ubuntu", "Ubuntu-24", "580.95.05-0ubuntu1"),
    ],
)
def test_the_default_version_follows_the_operating_system_and_passes_its_check(distribution, os_key, expected):
    from ansible.parsing.dataloader import DataLoader
    from ansible.template import Templar, trust_as_template

    raw = yaml.safe_load((ROOT / "roles/llmops_defaults/defaults/main.yml").read_text())["llmops_driver_version"]
    variables = {"ansible_facts": {"distribution": distribution}}
    version = Templar(loader=DataLoader(), variables=variables).template(trust_as_template(raw))
    assert version == expected
    assert dp.plan(request(os_key, "580", version))["problem"] == ""
