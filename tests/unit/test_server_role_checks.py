"""The server role's input checks (roles/server/templates/checks.json.j2), rendered with Ansible's own templating
without a host. tests/integration/test_bad_input_roles.py runs the same checks in the role on a node and proves that a
refusal changes nothing; here: the defaults pass, each bad value gives exactly one problem, and a bad API key is
described without its value."""

from __future__ import annotations

import pytest
from server_checks import problems  # shared with tests/security


def test_the_defaults_pass():
    assert problems() == []


@pytest.mark.parametrize(
    "overrides",
    [
        {"llmops_server_port": 65536},
        {"llmops_server_port": "http"},
        {"server_tp": -1},
        {"server_stall_timeout": "ten"},
        {"server_max_running_requests": 0},
        {"server_mem_fraction_static": "0.0"},
        {"server_mem_fraction_static": "inf"},
        {"llmops_server_host": "0.0.0.0 --api-key x"},
        {"llmops_service_user": "SGLang Service"},
        {"llmops_service_user": "sglang\n"},  # a trailing newline would end the unit's User= line
        {"llmops_service_group": 1000},
        {"llmops_model_dir": "models/glm"},
        {"llmops_model_revisions_dir": "/opt/models/glm revisions"},
        {"server_kv_cache_dtype": "fp8 e4m3"},
        {"server_logrotate_maxsize": "lots"},
        {"server_environment": {"CUDA-VISIBLE": "0"}},
        {"server_environment": {"NCCL_DEBUG": "INFO\nExecStartPre=/bin/sh"}},
        {"server_environment": {"LLMOPS_REDACT_ENV": ""}},  # the launcher would stop hiding the keys in the log
        {"server_environment": {"llmops_api_key_flag": "--x"}},
        {"server_extra_args": ["--tp-size", "4"]},
        {"server_extra_args": ["--cuda-graph-max-bs-decode=8"]},
        {"server_extra_args": ["--context-length 65536\n--port 1"]},
        {"llmops_dist_init_port": 70000},
        {"llmops_dist_init_port": "rendezvous"},
        {"server_dist_timeout": "soon"},
        {"server_dist_timeout": 0},
        {"server_nccl_socket_ifname": "eth0; rm -rf /"},
        {"server_nccl_socket_ifname": "eth0\nExecStartPre=/bin/sh"},
        {"server_nccl_ib_hca": "mlx5_0 mlx5_1"},
        {"server_nccl_environment": {"LD_PRELOAD": "/tmp/x.so"}},
        {"server_nccl_environment": {"NCCL_DEBUG": "INFO\nExecStartPre=/bin/sh"}},
        {"server_nccl_environment": ["NCCL_DEBUG=INFO"]},
        {"server_extra_args": ["--node-rank", "1"]},
        {"server_extra_args": ["--dist-init-addr=10.0.0.1:5000"]},
        {"server_bench_prompts": 0},
        {"server_bench_prompts": 5000},
        {"server_bench_output_len": "long"},
        {"server_bench_concurrency": 2048},
        {"server_bench_timeout": 0},
        {"server_bench_seed": -1},
        {"server_bench_max_slowdown_pct": 0},
        {"server_bench_max_slowdown_pct": 150},
        {"server_bench_max_slowdown_pct": "fifteen"},
    ],
)
def test_each_bad_value_is_one_problem(overrides):
    found = problems(**overrides)
    assert len(found) == 1, found
    assert found[0].startswith("Expected ") and "; found " in found[0]
    assert "\n" not in found[0]


@pytest.mark.parametrize(
    "key",
    ["sk-llmops secret-7Qz9", "sk-llmops-secret-7Qz9\n", "sk-'llmops'-7Qz9", "sk-llm$ops-7Qz9", "7Qz9x", "sk-é-7Qz9xx"],
)
def test_a_bad_api_key_is_described_without_its_value(key):
    found = problems(llmops_server_api_key=key)
    assert len(found) == 1 and "the value is not shown" in found[0]
    assert "7Qz9" not in found[0]


@pytest.mark.parametrize(
    "overrides",
    [
        {"server_nccl_socket_ifname": "^lo,docker"},
        {"server_nccl_socket_ifname": "=eth0"},
        {"server_nccl_ib_hca": "=mlx5_0:1,mlx5_1:1"},
        {"server_nccl_environment": {"NCCL_DEBUG": "INFO", "TORCH_NCCL_BLOCKING_WAIT": 1}},
        {"server_dist_timeout": 600, "llmops_dist_init_port": 5000},
    ],
)
def test_the_documented_forms_of_the_nccl_knobs_pass(overrides):
    assert problems(**overrides) == []


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        # directories the role gives to the service account, or prunes: never the system's own
        ({"server_log_dir": "/var/log"}, "Expected server_log_dir to be a directory of its own"),
        ({"llmops_build_sets_dir": "/opt"}, "found the system directory /opt. Set it to a directory below it"),
        (
            {"llmops_model_revisions_dir": "/var/lib"},
            "Expected llmops_model_revisions_dir to be a directory of its own",
        ),
        ({"llmops_env_file": "/etc/sglang.env"}, "Expected llmops_env_file's directory to be a directory of its own"),
        ({"llmops_state_dir": "/"}, "Expected llmops_state_dir to be an absolute path other than /"),
        # not normal: what the role would create or remove is not what the value reads as
        ({"server_log_dir": "/var/log/sglang/../../../etc"}, "Expected server_log_dir to be a normal path"),
        ({"llmops_build_sets_dir": "/opt/sglang//sets"}, "Expected llmops_build_sets_dir to be a normal path"),
        ({"llmops_venv": "/opt/sglang/venv/"}, "Expected llmops_venv to be a normal path"),
        ({"llmops_build_sets_dir": "/opt/sets\nExecStartPre=+/bin/sh"}, "Expected llmops_build_sets_dir to be an abs"),
    ],
)
def test_a_path_the_role_owns_is_not_a_system_directory_and_is_normal(overrides, expected):
    found = problems(**overrides)
    assert len(found) == 1 and expected in found[0], found
    assert "\n" not in found[0]


def test_a_wrong_env_file_is_one_problem_not_two():
    found = problems(llmops_env_file="sglang.env")
    assert found == [
        "Expected llmops_env_file to be an absolute path other than / with no spaces; found 'sglang.env'. Set it to "
        "the full path, e.g. /etc/sglang/sglang.env."
    ]
