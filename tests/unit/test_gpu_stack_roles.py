"""The GPU-stack roles: inputs checked before the first change, one owner of NVIDIA's repository."""

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
CHANGING = ("ansible.builtin.apt", "ansible.builtin.copy", "ansible.builtin.template", "ansible.builtin.file",
            "ansible.builtin.dpkg_selections", "ansible.builtin.include_role")  # fmt: skip


def tasks(path):
    return yaml.safe_load((ROOT / path).read_text())


def finds_gpus(task):
    """preflight's discovery, included when no earlier stage of the run found the GPUs: it only reads (gpu_facts;
    before a driver exists it may install the PCI id database, as preflight itself does before its gate)."""
    include = task.get("ansible.builtin.include_role") or {}
    return include == {"name": "llmops.sglang.preflight", "tasks_from": "discover"}


def checks_the_repository(task):
    """NVIDIA's repository index read from the host (roles/nvidia_repo tasks/check.yml): only reads."""
    include = task.get("ansible.builtin.include_role") or {}
    return include.get("name") == "llmops.sglang.nvidia_repo" and include.get("tasks_from") == "check"


def changes(task):
    return any(k in task for k in CHANGING) and not finds_gpus(task) and not checks_the_repository(task)


def first_change(task_list):
    return next(i for i, t in enumerate(task_list) if changes(t))


def test_the_driver_role_validates_everything_before_its_first_change():
    main = tasks("roles/nvidia_driver/tasks/main.yml")
    validate = next(i for i, t in enumerate(main) if t.get("ansible.builtin.include_tasks") == "validate.yml")
    assert validate < first_change(main)
    assert main[first_change(main)]["ansible.builtin.include_role"]["name"] == "llmops.sglang.nvidia_repo"
    assert not [t for t in tasks("roles/nvidia_driver/tasks/validate.yml") if changes(t)]
    assert not [t for t in tasks("roles/nvidia_driver/tasks/nvswitch.yml") if changes(t)]
    # the repository index is the last check (it is the only one that needs the network)
    assert checks_the_repository(tasks("roles/nvidia_driver/tasks/validate.yml")[-1])


def test_the_cuda_role_validates_everything_before_its_first_change():
    main = tasks("roles/cuda_toolkit/tasks/main.yml")
    checks = [i for i, t in enumerate(main) if "ansible.builtin.assert" in t]
    assert len(checks) >= 2
    assert max(checks[:2]) < first_change(main)
    assert main[first_change(main)]["ansible.builtin.include_role"]["name"] == "llmops.sglang.nvidia_repo"
    repo_check = next(i for i, t in enumerate(main) if checks_the_repository(t))
    assert max(checks[:2]) < repo_check < first_change(main)


def test_the_repository_check_changes_nothing():
    for name in ("check.yml", "distro.yml"):
        found = tasks(f"roles/nvidia_repo/tasks/{name}")
        assert found and not [t for t in found if changes(t)], name
    check = tasks("roles/nvidia_repo/tasks/check.yml")
    assert [t for t in check if "llmops.sglang.repo_packages" in t]


def test_nvidia_repository_has_one_url_variable_and_one_owner():
    for role in ("nvidia_driver", "cuda_toolkit"):
        text = "".join(p.read_text() for p in (ROOT / "roles" / role).rglob("*.yml"))
        assert "sources.list.d" not in text and "cuda-keyring" not in text.replace("cuda-keyring)", ""), role
        assert "repo_url" not in text, role
    defaults = yaml.safe_load((ROOT / "roles/nvidia_repo/defaults/main.yml").read_text())
    assert [k for k in defaults if k.endswith("_url")] == [
        "nvidia_repo_base_url",
        "nvidia_repo_url",
        "nvidia_repo_keyring_url",
    ]
    assert defaults["nvidia_repo_url"].startswith("{{ nvidia_repo_base_url }}/")
    assert defaults["nvidia_repo_keyring_url"].startswith("{{ nvidia_repo_url }}")
