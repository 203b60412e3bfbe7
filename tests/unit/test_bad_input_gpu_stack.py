"""Bad input to the GPU-stack roles: one line saying what is wrong, before anything on the host changes.

Each row runs a role alone (as a user may, without preflight) on this machine with ansible-playbook, connection
local, in check mode as a safety net, against the simulated nvidia-smi and a GPU profile (a host whose older driver
575.57.08 answers, so nvidia-smi names the GPUs). Each row asserts the exact one-line message of the failing task,
that it is a check that runs before the role's first change (validate tasks and the repository index's check
precede the nvidia_repo include), that no Python traceback appears, that the files the role could touch are
unchanged, and that the run ends within its bound.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from bad_input_util import ROW_FACTS_PLAY, failed_by_host
from transcripts import callback_line
from transcripts import check as check_transcript

ROOT = Path(__file__).resolve().parents[2]
FAKE_SMI = ROOT / "sim" / "gpu" / "nvidia-smi"
PROFILES = ROOT / "sim" / "gpu" / "profiles"
SECONDS = 180
# What the roles could change on a host: apt sources/pins/config, dpkg's database, records, modprobe, profile.
WATCHED = ["/etc/apt", "/var/lib/dpkg/status", "/var/lib/llmops-sglang", "/etc/modprobe.d", "/etc/profile.d"]
INDEX = yaml.safe_load((ROOT / "tests/unit/fixtures/debian12_nvidia_packages.yml").read_text())["packages"]
RTX = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition (sm_120)"
V100_PROFILE = {
    "description": "1 x Tesla V100 (test-made profile: Volta, dropped by CUDA 13.0)",
    "nvswitch": False,
    "gpus": [
        {
            "index": 0,
            "name": "Tesla V100-SXM2-16GB",
            "uuid": "GPU-00000000-0000-0000-0000-000000000070",
            "memory_total_mib": 16160,
            "memory_used_mib": 0,
            "compute_cap": "7.0",
            "pci_bus_id": "00000000:00:1E.0",
        }
    ],
}

# (case, role, extra vars, profile, installed driver, exact message)
ROWS = [
    (
        "driver_branch_too_old_for_blackwell",
        "nvidia_driver",
        {"llmops_driver_branch": "550", "llmops_driver_version": "550.163.01-1"},
        "rtx-pro-6000-x8",
        "575.57.08",
        f"{RTX} needs driver branch 570 or newer; llmops_driver_branch is 550. Set llmops_driver_branch and "
        "llmops_driver_version to branch 570 or newer; nothing was changed.",
    ),
    (
        "proprietary_modules_on_blackwell",
        "nvidia_driver",
        {"llmops_driver_flavor": "proprietary"},
        "rtx-pro-6000-x8",
        "575.57.08",
        f"{RTX} works only with the open kernel modules; llmops_driver_flavor is proprietary. Set "
        "llmops_driver_flavor: open; nothing was changed.",
    ),
    (
        "driver_version_off_its_branch",
        "nvidia_driver",
        {"llmops_driver_branch": "580", "llmops_driver_version": "575.57.08-1"},
        "rtx-pro-6000-x8",
        "575.57.08",
        "llmops_driver_version 575.57.08-1 is not on llmops_driver_branch 580; set both to one branch, e.g. '580' "
        "and '580.95.05-1'; nothing was changed.",
    ),
    (
        "driver_branch_not_a_number",
        "nvidia_driver",
        {"llmops_driver_branch": "latest"},
        "rtx-pro-6000-x8",
        "575.57.08",
        "llmops_driver_branch must be a driver branch number such as '580'; found 'latest'; nothing was changed.",
    ),
    (
        "driver_version_without_revision",
        "nvidia_driver",
        {"llmops_driver_version": "580.95.05"},
        "rtx-pro-6000-x8",
        "575.57.08",
        "llmops_driver_version must be a full package version such as '580.95.05-1' (Ubuntu '580.95.05-0ubuntu1'); "
        "found '580.95.05'; nothing was changed.",
    ),
    (
        "fabric_manager_of_an_unknown_branch",
        "nvidia_driver",
        {"llmops_driver_branch": "590", "llmops_driver_version": "590.44.01-1", "nvidia_driver_fabricmanager": True},
        "h100-80gb-x8",
        "575.57.08",
        "This host needs the fabric manager (NVSwitch), but no package name is known for driver branch 590 on Debian "
        "12 (known branches: 535, 550, 555, 560, 565, 570, 575, 580); nothing was changed. Set "
        "nvidia_driver_fabricmanager_package, or add the branch to plugins/module_utils/gpu_compat.py.",
    ),
    (
        "cuda_versions_given_as_a_string",
        "cuda_toolkit",
        {"llmops_cuda_versions": "12.8"},
        "rtx-pro-6000-x8",
        "580.95.05",
        "llmops_cuda_versions must be a list such as ['12.8']; found the string '12.8'. Write "
        "llmops_cuda_versions: ['12.8']; nothing was changed.",
    ),
    (
        "cuda_version_that_does_not_exist",
        "cuda_toolkit",
        {"llmops_cuda_versions": ["12.7"]},
        "rtx-pro-6000-x8",
        "580.95.05",
        "CUDA 12.7 (llmops_cuda_versions) is not a toolkit NVIDIA publishes for Linux; known: 11.8, 12.0, 12.1, "
        "12.2, 12.3, 12.4, 12.5, 12.6, 12.8, 12.9, 13.0. Ask for one of those; nothing was changed.",
    ),
    (
        "cuda_newer_than_the_installed_driver",
        "cuda_toolkit",
        {"llmops_cuda_versions": ["13.0"]},
        "rtx-pro-6000-x8",
        "575.57.08",
        "CUDA 13.0 needs driver branch 580 or newer; the driver installed on this host is 575.57.08. Install a newer "
        "driver (llmops_driver_branch) or ask for an older toolkit; nothing was changed.",
    ),
    (
        "cuda_older_than_blackwell_needs",
        "cuda_toolkit",
        {"llmops_cuda_versions": ["12.4"]},
        "rtx-pro-6000-x8",
        "580.95.05",
        f"{RTX} needs CUDA 12.8 or newer; llmops_cuda_versions asks for 12.4. Ask for CUDA 12.8 or newer; "
        "nothing was changed.",
    ),
    (
        "cuda_that_dropped_volta",
        "cuda_toolkit",
        {"llmops_cuda_versions": ["13.0"]},
        V100_PROFILE,
        "580.95.05",
        "Tesla V100-SXM2-16GB (sm_70) is not supported by CUDA 13.0; the last toolkit for it is CUDA 12.9. Ask for "
        "CUDA 12.9 or older; nothing was changed.",
    ),
    (
        "cuda_default_not_requested",
        "cuda_toolkit",
        {"llmops_cuda_versions": ["12.8"], "cuda_toolkit_default": "12.9"},
        "rtx-pro-6000-x8",
        "580.95.05",
        "cuda_toolkit_default '12.9' is not one of llmops_cuda_versions ['12.8']; nothing was changed.",
    ),
    (
        "cuda_version_not_major_minor",
        "cuda_toolkit",
        {"llmops_cuda_versions": ["12.8.1"], "cuda_toolkit_default": "12.8.1"},
        "rtx-pro-6000-x8",
        "580.95.05",
        "llmops_cuda_versions must hold MAJOR.MINOR strings such as '12.8'; found '12.8.1'; nothing was changed.",
    ),
    (
        "uvm_hmm_setting_not_a_choice",
        "nvidia_driver",
        {"nvidia_driver_disable_hmm": "sometimes"},
        "rtx-pro-6000-x8",
        "575.57.08",
        'nvidia_driver_disable_hmm: expected auto, true or false, found "sometimes"; nothing was changed. Set one of '
        "those (auto turns HMM off on hosts with two or more GPUs of compute capability 12.x).",
    ),
    # NVIDIA's repository stands in as a flat repository ({repo}: a file: URL) whose index is Debian 12's real one for
    # the driver (tests/unit/fixtures/debian12_nvidia_packages.yml: nvidia-driver and its packages at 535.261.03-1)
    (
        "driver_version_the_repository_lacks",
        "nvidia_driver",
        {
            "nvidia_repo_url": "{repo}",
            "llmops_driver_branch": "535",
            "llmops_driver_version": "535.247.01-1",
            "llmops_driver_flavor": "proprietary",
            "nvidia_driver_package_set": "desktop",
            "llmops_cuda_versions": ["12.2"],
            "nvidia_driver_persistenced": False,
            "nvidia_driver_fabricmanager": False,
        },
        "h100-80gb-x8",
        "575.57.08",
        "Expected driver 535.247.01-1 in NVIDIA's repository at {repo}; it lacks nvidia-driver 535.247.01-1 (it has "
        "535.261.03-1); nvidia-kernel-dkms 535.247.01-1 (it has 535.261.03-1); nothing was changed. Set "
        "llmops_driver_version to a version the repository has (on llmops_driver_branch; nvidia_driver_packages to "
        "names it has), or point nvidia_repo_url at a repository that has them.",
    ),
    (
        "toolkit_the_repository_lacks",
        "cuda_toolkit",
        {"nvidia_repo_url": "{repo}", "llmops_cuda_versions": ["12.8"]},
        "rtx-pro-6000-x8",
        "580.95.05",
        "Expected the CUDA toolkits 12.8 in NVIDIA's repository at {repo}; it lacks cuda-toolkit-12-8 (no such "
        "package); nothing was changed. Set llmops_cuda_versions to toolkits the repository has, or point "
        "nvidia_repo_url at a repository that has them.",
    ),
]


def fingerprint(paths):
    h = hashlib.sha256()
    for top in paths:
        p = Path(top)
        files = sorted(x for x in p.rglob("*") if x.is_file()) if p.is_dir() else ([p] if p.exists() else [])
        for f in files:
            st = f.stat()
            h.update(f"{f}\0{st.st_mode}\0{st.st_size}\0".encode())
            try:
                h.update(f.read_bytes())
            except OSError:
                h.update(b"<unreadable>")
    return h.hexdigest()


def gpu_env(directory: Path, profile, driver) -> dict[str, str]:
    """What the fake nvidia-smi of one row reads: its profile, its driver version, on PATH before the real tools."""
    directory.mkdir(parents=True)
    bindir = directory / "bin"
    bindir.mkdir()
    shutil.copy(FAKE_SMI, bindir / "nvidia-smi")
    if isinstance(profile, dict):
        path = directory / "profile.json"
        path.write_text(json.dumps(profile))
    else:
        path = PROFILES / f"{profile}.json"
    driver_file = directory / "driver-version"
    if driver:
        driver_file.write_text(driver + "\n")
    venv_bin = Path(sys.executable).parent
    return {
        "PATH": f"{bindir}:{venv_bin}:{os.environ['PATH']}",
        "SIM_GPU_PROFILE": str(path),
        "SIM_GPU_DRIVER_FILE": str(driver_file),
        "SIM_GPU_LOADED_FILE": str(directory / "loaded"),
    }


def ansible_env(tmp_path):
    venv_bin = Path(sys.executable).parent
    return {
        **os.environ,
        "PATH": f"{venv_bin}:{os.environ['PATH']}",
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_COLLECTIONS_PATH": str(ROOT),
        "ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default",
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
        "ANSIBLE_CALLBACK_FORMAT_PRETTY": "false",
        "ANSIBLE_LOCAL_TEMP": str(tmp_path / "ansible-tmp"),
        "ANSIBLE_NOCOLOR": "1",
    }


# The rows of one role share one ansible-playbook run: each row is its own inventory host (connection local), with its
# GPUs (the fake nvidia-smi's profile and driver, through the play's environment) and its values set as facts before
# the role, which outranks inventory, play and role variables as -e does. Paying the controller's start-up once per
# role instead of once per row; the files the roles could touch are fingerprinted around each run.
PLAY = (
    ROW_FACTS_PLAY
    + """
- name: The role alone
  hosts: all
  gather_subset: ['!all', min, virtual]
  environment: "{{ row_env }}"
  roles: [llmops.sglang.%s]
"""
)


def host_of(index: int) -> str:
    return f"row{index:02d}"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """role -> (the run, each host's first failed task and message, the repository's URL, fingerprints before/after)."""
    done: dict = {}

    def get(role: str):
        if role not in done:
            d = tmp_path_factory.mktemp(f"rows-{role}")
            repo = d / "nvidia-repo"
            repo.mkdir()
            (repo / "Packages").write_text(INDEX)
            url = repo.as_uri() + "/"
            hosts = {}
            for i, (_case, row_role, extra, profile, driver, _message) in enumerate(ROWS):
                if row_role == role:
                    row_vars = json.loads(json.dumps(extra).replace("{repo}", url))
                    env = gpu_env(d / host_of(i), profile, driver)
                    hosts[host_of(i)] = {"row_vars": row_vars, "row_env": env}
            common = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
            (d / "hosts.yml").write_text(json.dumps({"all": {"vars": common, "hosts": hosts}}))
            (d / "play.yml").write_text(PLAY % role)
            before = fingerprint(WATCHED)
            cmd = [
                shutil.which("ansible-playbook", path=str(Path(sys.executable).parent)) or "ansible-playbook",
                "-i",
                str(d / "hosts.yml"),
                "--check",
                str(d / "play.yml"),
            ]
            proc = subprocess.run(
                cmd, capture_output=True, text=True, env=ansible_env(d), timeout=SECONDS * 2, check=False
            )
            first = {h: failed[0] for h, failed in failed_by_host(proc.stdout).items()}
            done[role] = (proc, first, url, before, fingerprint(WATCHED))
        return done[role]

    return get


@pytest.mark.parametrize("index", range(len(ROWS)), ids=[r[0] for r in ROWS])
def test_bad_input_is_refused_in_one_line_before_any_change(runs, index):
    case, role, _extra, _profile, _driver, message = ROWS[index]
    proc, failed, url, before, after = runs(role)
    message = message.replace("{repo}", url)
    assert "Traceback" not in proc.stdout + proc.stderr
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    task, msg = failed.get(host_of(index), (None, None))
    assert msg == message, (task, proc.stdout[-3000:])
    assert "\n" not in msg
    # the role's own checks, or the last one, NVIDIA's repository index (roles/nvidia_repo tasks/check.yml)
    assert task.startswith((f"llmops.sglang.{role} : Check ", "llmops.sglang.nvidia_repo : Check ")), task
    assert after == before
    if case == "driver_branch_too_old_for_blackwell":
        # the operator guide's transcript of a refused driver, and its format is the default callback's own line
        printed = [x for x in proc.stdout.splitlines() if x.startswith(f"fatal: [{host_of(index)}]")]
        assert len(printed) == 1, printed
        result = json.loads(printed[0].split(" => ", 1)[1])
        assert callback_line(host_of(index), result) == printed[0]  # the guide's rendering is the callback's own
        check_transcript("refused-driver", task, host_of(index), result, [(host_of(index), "gpu01")])
