"""Bad input to the server and preflight roles, on one simulated node: refused in one line before the first change.

One node (bi1, 10.213.0.81: 8 x RTX PRO 6000 Blackwell with driver 580.95.05, nothing else installed) takes
playbooks/server.yml or playbooks/preflight.yml with bad values. Each row asserts the exact message of its host's
failed task, a failed play, no Python traceback, that the node is exactly as before (installed packages, /etc, /usr,
/opt, /var/lib/llmops-sglang, /var/log/sglang, sglang units: tests/bad_input_util.REMOTE_FINGERPRINT), that a bad
API key is described without its value, and a time bound. The server stage's rows share three ansible-playbook runs,
each row an alias of the node with its own values (see SERVER_ROWS); the others run alone with -e.

Rows marked "no GPU" hide the simulated GPUs for that row only (the no-gpu profile over the fake nvidia-smi's
profile, an empty directory over the simulated PCI bus), as a host without NVIDIA hardware looks.

Run under the node lock (about 1 min):
    flock /run/llmops-nodes.lock .venv/bin/pytest tests/integration/test_bad_input_roles.py -m node
Environment: BI_NODE_NAME / BI_NODE_IP override the node (names bi*, addresses 10.213.0.81-89).
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from _node_util import ROOT, VENV_BIN, booted, fleet_inventory, one_host_inventory, sim_node, stage_env
from bad_input_util import (
    REMOTE_FINGERPRINT,
    ROW_FACTS_PLAY,
    ansible_messages,
    assert_no_traceback,
    assert_one_line,
    failed_by_host,
    run_bounded,
)

NAME = os.environ.get("BI_NODE_NAME", "bi1")
IP = os.environ.get("BI_NODE_IP", "10.213.0.81")
SERVER = "playbooks/server.yml"
PREFLIGHT = "playbooks/preflight.yml"

pytestmark = pytest.mark.node

# "<host>" is the inventory name the row runs as (the message names it): the node itself, or its alias in the batch.
N = "<host>: nothing was changed. "
# What the later rows need to get past the earlier checks: an account, a Python and the stand-in for a model.
ROOT_USER = {"llmops_service_user": "root", "llmops_service_group": "root"}
# (server_venv_python is the role's internal name for llmops_venv's bin/python: an extra var reaches it, the node's
# own python3 stands in for the venv's)
HAS_PYTHON = {**ROOT_USER, "server_venv_python": "/usr/bin/python3"}

# (case, playbook, -e variables, hide the GPUs, the exact message of the failed task)
CASES = [
    (
        "llmops_server_port above 65535",
        SERVER,
        {"llmops_server_port": 70000},
        False,
        N + "Expected llmops_server_port to be a TCP port (1-65535); found 70000. Set it to a free port such as 30000.",
    ),
    (
        "llmops_replica with a space",
        SERVER,
        {"llmops_replica": "big model"},
        False,
        N + "Expected llmops_replica of <host> to be a name of letters, digits, '.', '_' or '-' (at most 63, "
        "starting with a letter or digit); found 'big model'. Set llmops_replica to such a name (the same on every "
        "host of one replica).",
    ),
    (
        "llmops_dist_init_port above 65535",
        SERVER,
        {"llmops_dist_init_port": 70000},
        False,
        N + "Expected llmops_dist_init_port to be a TCP port (1-65535); found 70000. Set it to a free port such as "
        "20000.",
    ),
    (
        "server_nccl_environment with a variable that is not NCCL's",
        SERVER,
        {"server_nccl_environment": {"LD_PRELOAD": "/tmp/x.so"}},
        False,
        N + "Expected server_nccl_environment names to start with NCCL_, GLOO_, TORCH_ or NVSHMEM_ (upper case); "
        "found 'LD_PRELOAD'. Put other variables in server_environment.",
    ),
    (
        "llmops_server_port zero",
        SERVER,
        {"llmops_server_port": 0},
        False,
        N + "Expected llmops_server_port >= 1; found 0. Set it to a free TCP port such as 30000.",
    ),
    (
        "server_tp 16 on an 8-GPU host",
        SERVER,
        {"server_tp": 16},
        False,
        N + "Expected server_tp <= 8 (the NVIDIA GPUs on this host); found 16. Set server_tp to at most 8.",
    ),
    (
        "server_tp zero",
        SERVER,
        {"server_tp": 0},
        False,
        N + "Expected server_tp >= 1; found 0. Set it to the number of GPUs one replica spans, e.g. 8.",
    ),
    (
        "negative server_start_timeout",
        SERVER,
        {"server_start_timeout": -5},
        False,
        N + "Expected server_start_timeout >= 1; found -5. Set it to seconds, e.g. 2400.",
    ),
    (
        "negative server_stall_timeout",
        SERVER,
        {"server_stall_timeout": -1},
        False,
        N + "Expected server_stall_timeout >= 0; found -1. Set it to seconds, e.g. 900 (0 turns the stall check off).",
    ),
    (
        "progress interval longer than the start timeout",
        SERVER,
        {"server_progress_interval": 5000},
        False,
        N + "Expected server_progress_interval <= server_start_timeout; found 5000 > 2400. Lower "
        "server_progress_interval (e.g. 30).",
    ),
    (
        "mem fraction 1.5",
        SERVER,
        {"server_mem_fraction_static": 1.5},
        False,
        N + "Expected server_mem_fraction_static to be auto or a number between 0 and 1 (exclusive); found '1.5'. "
        "Use auto, or for example 0.88.",
    ),
    (
        "mem fraction nan",
        SERVER,
        {"server_mem_fraction_static": "nan"},
        False,
        N + "Expected server_mem_fraction_static to be auto or a number between 0 and 1 (exclusive); found 'nan'. "
        "Use auto, or for example 0.88.",
    ),
    (
        "fifty attempts",
        SERVER,
        {"server_max_attempts": 50},
        False,
        N + "Expected server_max_attempts <= 10 (each attempt loads the model again); found 50. Set it to 3.",
    ),
    (
        "negative cuda graph max bs",
        SERVER,
        {"server_cuda_graph_max_bs": -5},
        False,
        N + "Expected server_cuda_graph_max_bs to be a whole number >= 1, or null for SGLang's default; found '-5'. "
        "Remove it or set a positive number.",
    ),
    (
        "API key with a space",
        SERVER,
        {"llmops_server_api_key": "sk-llmops bad-key-7Qz"},
        False,
        N
        + "Expected llmops_server_api_key without spaces; found a space or tab in it (21 characters; the value is not "
        "shown). Remove it.",
    ),
    (
        "API key ending in a line break",
        SERVER,
        {"llmops_server_api_key": "sk-llmops-key-7Qz9\n"},
        False,
        N + "Expected llmops_server_api_key on one line; found a line break in it (19 characters; the value is not "
        "shown). "
        "Remove the line break (a vault file written with echo often ends with one).",
    ),
    (
        "API key with a quote",
        SERVER,
        {"llmops_server_api_key": 'sk-"llmops-7Qz9'},
        False,
        N
        + "Expected llmops_server_api_key without quotes, backslashes, $ or `; found one of them in it (15 characters; "
        "the value is not shown). Use letters, digits and _.~+/=:-.",
    ),
    (
        "API key too short",
        SERVER,
        {"llmops_server_api_key": "Qz9x7"},
        False,
        N + "Expected llmops_server_api_key of at least 8 characters (or empty for none); found 5 (the value is not "
        "shown). "
        "Use a long random token, e.g. from openssl rand -hex 24.",
    ),
    (
        "API key in server_extra_args",
        SERVER,
        {"server_extra_args": ["--api-key", "sk-llmops-in-args-7Qz9"]},
        False,
        N + "Expected no --api-key in server_extra_args (it would be written into the unit file); found it. Set "
        "llmops_server_api_key from ansible-vault instead: it goes only to the 0600 environment file.",
    ),
    (
        "port in server_extra_args",
        SERVER,
        {"server_extra_args": ["--port=8000"]},
        False,
        N
        + "Expected --port to come from llmops_server_port, not server_extra_args; found it in server_extra_args. Set "
        "llmops_server_port and remove it from server_extra_args.",
    ),
    (
        "hub token in server_environment",
        SERVER,
        {"server_environment": {"HF_TOKEN": "hf_llmops_7Qz9"}},
        False,
        N + "Expected no secret in server_environment (it is written into the unit file); found HF_TOKEN. Use "
        "llmops_server_api_key or the model role's model_hf_token: they go only to the 0600 environment file.",
    ),
    (
        "relative log directory",
        SERVER,
        {"server_log_dir": "logs"},
        False,
        N + "Expected server_log_dir to be an absolute path other than / with no spaces; found 'logs'. Set it to the "
        "full path, e.g. /var/log/sglang.",
    ),
    (
        "unit name without .service",
        SERVER,
        {"server_unit_name": "sglang"},
        False,
        N + "Expected server_unit_name to be a systemd service name ending in .service; found 'sglang'. Use "
        "sglang.service.",
    ),
    (
        "log rotation every fortnight",
        SERVER,
        {"server_logrotate_frequency": "fortnightly"},
        False,
        N + "Expected server_logrotate_frequency to be hourly, daily, weekly, monthly or yearly; found "
        "'fortnightly'. Use daily.",
    ),
    (
        "served model name with a space",
        SERVER,
        {"server_served_model_name": "my model"},
        False,
        N + "Expected server_served_model_name to be one word (the name clients send as model); found 'my model'. "
        "Leave it out to use the model's repo id.",
    ),
    (
        "server role alone on a host without the build stage",
        SERVER,
        {},
        False,
        N + "Expected the service account sglang (llmops_service_user); found no such user. Run the build stage first "
        "(--tags build) or set llmops_service_user to an existing account.",
    ),
    (
        "SGLang's Python missing",
        SERVER,
        ROOT_USER,
        False,
        N + "Expected SGLang's Python at /opt/sglang/venv/bin/python (in llmops_venv); found no executable there. Run "
        "the build stage first (--tags build) or set llmops_venv.",
    ),
    (
        "model missing",
        SERVER,
        {**HAS_PYTHON, "llmops_model_dir": "/opt/models/not-there"},
        False,
        N + "Expected a model in /opt/models/not-there (llmops_model_dir); found no config.json there. Run the model "
        "stage first (--tags model) or set llmops_model_dir to a model directory.",
    ),
    (
        "server role alone on a host without GPUs",
        SERVER,
        {},
        True,
        None,  # gpu_facts' own words about the missing GPUs are in the middle: checked by pattern below
    ),
    (
        "preflight on a host without any NVIDIA GPU",
        PREFLIGHT,
        {},
        True,
        None,
    ),
]

# The two "no GPU" rows: the fixed parts around gpu_facts' own description of what it found.
NO_GPU_PATTERNS = {
    SERVER: re.escape(N + "Expected NVIDIA GPUs that answer nvidia-smi; found none (")
    + r"[^()]*(\([^()]*\)[^()]*)*"
    + re.escape("). Run the driver stage first (--tags driver), or check the driver with nvidia-smi."),
    PREFLIGHT: re.escape(N + "Expected an NVIDIA GPU (from nvidia-smi or on the PCI bus); found none (")
    + r"[^()]*(\([^()]*\)[^()]*)*"
    + re.escape(
        "). If this is a build-only or CPU host, set preflight_build_only: true; otherwise check that the "
        "inventory names the GPU server."
    ),
}

HIDE_GPUS = (
    "set -e; mkdir -p /run/bi-empty; cp /etc/sim-gpu/profile.json /run/bi-profile.json; "
    'printf \'{"description": "hidden", "nvswitch": false, "gpus": []}\' > /run/bi-nogpu.json; '
    "mount --bind /run/bi-nogpu.json /etc/sim-gpu/profile.json; mount --bind /run/bi-empty /sys/bus/pci/devices"
)
SHOW_GPUS = "umount /sys/bus/pci/devices; umount /etc/sim-gpu/profile.json; true"


def ssh(command: str) -> str:
    return sim_node("ssh", NAME, command).stdout


@pytest.fixture(scope="module")
def inventory(tmp_path_factory):
    if os.geteuid() != 0 or shutil.which("systemd-nspawn") is None:
        pytest.skip("needs root and systemd-nspawn (simulated nodes)")
    assert re.fullmatch(r"bi[a-z0-9-]{0,10}", NAME) and re.fullmatch(r"10\.213\.0\.8[1-9]", IP)
    with booted(NAME, IP, profile="rtx-pro-6000-x8", driver="580.95.05"):
        yield one_host_inventory(tmp_path_factory.mktemp("inventory"), NAME, IP)


def play(inventory: Path, playbook: str, extra: dict, seconds: float = 180):
    env = stage_env()
    env["ANSIBLE_CALLBACK_RESULT_FORMAT"] = "json"
    cmd = [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory / "hosts.yml"), str(playbook)]
    if extra:
        cmd += ["-e", json.dumps(extra)]
    return run_bounded(cmd, seconds=seconds, env=env, cwd=ROOT)


# The rows of the server stage on a host with its GPUs run a few to one ansible-playbook run: each row is its own
# inventory host (an alias of the node: the same address, its own name) whose bad values are set as facts before the
# stage, which outranks every inventory, play and role variable as -e does. The controller's start-up, the plays before
# the refusal and the connection are paid once per run. The node is fingerprinted around each run.
# The server stage checks the whole fleet's settings (every host's port, replica name) after each host's own inputs:
# a bad value there stops every host that got that far, naming the host that has it. So the rows refused after that
# check run without such a row (each alias with its own port), and the fleet's own row runs alone.
AFTER_FLEET_CHECK = {
    "server_tp 16 on an 8-GPU host",
    "server role alone on a host without the build stage",
    "SGLang's Python missing",
    "model missing",
}
FLEET_CHECK = {"llmops_replica with a space"}
SERVER_ROWS = [c for c in CASES if c[1] == SERVER and not c[3]]
ALONE = [c for c in CASES if c not in SERVER_ROWS]


def run_of(case: str) -> str:
    """Which one ansible-playbook run a server row shares with others."""
    return "after" if case in AFTER_FLEET_CHECK else "fleet" if case in FLEET_CHECK else "inputs"


ROWS_PLAY = (
    ROW_FACTS_PLAY
    + """
- name: The server stage
  ansible.builtin.import_playbook: %s
"""
)


def alias(index: int) -> str:
    return f"{NAME}-r{index:02d}"


@pytest.fixture(scope="module")
def runs(inventory, tmp_path_factory):
    """run name -> (the run, its messages per host, the node's fingerprint before, after); each made once."""
    done: dict = {}

    def get(name: str):
        if name not in done:
            d = tmp_path_factory.mktemp(f"rows-{name}")
            rows = {alias(i): row for i, row in enumerate(SERVER_ROWS) if run_of(row[0]) == name}
            fleet_inventory(d, {"gpu_servers": {"hosts": dict.fromkeys(rows, IP)}})
            (d / "host_vars").mkdir()
            for i, (host, row) in enumerate(rows.items()):
                # each alias its own port: the fleet's check refuses two replicas at one address and port
                own = {"row_vars": row[2], "llmops_server_port": 30100 + i}
                (d / "host_vars" / f"{host}.json").write_text(json.dumps(own))
            (d / "rows.yml").write_text(ROWS_PLAY % (ROOT / SERVER))
            before = ssh(REMOTE_FINGERPRINT)
            run = play(d, d / "rows.yml", {}, seconds=900)
            messages = {h: [m for _, m in failed] for h, failed in failed_by_host(run.stdout).items()}
            done[name] = (run, messages, before, ssh(REMOTE_FINGERPRINT))
        return done[name]

    return get


def check_refusal(run, messages: list[str], row, host: str, message_pattern: str | None = None) -> None:
    case, _, extra, _, message = row
    assert_no_traceback(run.stdout, run.stderr)
    assert run.rc != 0, f"{case} was accepted:\n{run.stdout[-3000:]}"
    assert len(messages) == 1, f"{case} ({host}): {messages}\n{run.stdout[-3000:]}"
    if message is None:
        assert "\n" not in messages[0].strip()
        assert re.fullmatch(message_pattern, messages[0].strip()), messages[0]
    else:
        assert_one_line(messages[0], message.replace("<host>", host))
    secrets = [extra.get("llmops_server_api_key"), (extra.get("server_environment") or {}).get("HF_TOKEN")]
    secrets += [a for a in extra.get("server_extra_args", []) if a.startswith("sk-")]
    for secret in filter(None, secrets):
        assert secret.strip() not in run.output, f"{case}: a secret reached the output"


@pytest.mark.parametrize("index", range(len(SERVER_ROWS)), ids=[c[0] for c in SERVER_ROWS])
def test_bad_input_to_the_server_stage_is_refused_in_one_line_before_the_first_change(runs, index):
    row, host = SERVER_ROWS[index], alias(index)
    run, messages, before, after = runs(run_of(row[0]))
    check_refusal(run, messages.get(host, []), row, host)
    assert after == before, f"the run of {row[0]} and the rows beside it changed the node"


@pytest.mark.parametrize("row", ALONE, ids=[c[0] for c in ALONE])
def test_bad_input_without_gpus_is_refused_in_one_line_before_the_first_change(inventory, row):
    case, playbook, extra, no_gpu, _ = row
    assert no_gpu or playbook != SERVER
    if no_gpu:
        ssh(HIDE_GPUS)
    try:
        before = ssh(REMOTE_FINGERPRINT)
        run = play(inventory, ROOT / playbook, extra)
        after = ssh(REMOTE_FINGERPRINT)
    finally:
        if no_gpu:
            ssh(SHOW_GPUS)
    pattern = NO_GPU_PATTERNS[playbook].replace("<host>", NAME)
    check_refusal(run, ansible_messages(run.stdout), row, NAME, pattern)
    assert after == before, f"{case}: the refused run changed the node"


def test_a_build_only_host_without_gpus_passes_preflight(inventory):
    """The refusal above is a default, not a wall: a declared build-only host passes and gets its record (which
    the fingerprint notices: it is not blind to a change)."""
    ssh(HIDE_GPUS)
    try:
        before = ssh(REMOTE_FINGERPRINT)
        run = play(inventory, ROOT / PREFLIGHT, {"preflight_build_only": True})
        after = ssh(REMOTE_FINGERPRINT)
    finally:
        ssh(SHOW_GPUS)
    assert run.rc == 0, run.stdout[-3000:]
    assert after != before
    record = json.loads(ssh("cat /var/lib/llmops-sglang/preflight.json"))
    assert record["gpu_source"] == "none"
