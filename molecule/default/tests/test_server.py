"""Verifier for the model and server stages of site.yml on a simulated 8 x RTX PRO 6000 node."""

import json
import os

import testinfra.utils.ansible_runner

testinfra_hosts = testinfra.utils.ansible_runner.AnsibleRunner(os.environ["MOLECULE_INVENTORY_FILE"]).get_hosts("all")

MODEL = "/opt/models/GLM-5-NVFP4"
ENV_FILE = "/etc/sglang/sglang.env"


def test_model_is_verified_with_its_commit(host):
    marker = json.loads(host.file(f"{MODEL}/.llmops-snapshot.json").content_string)
    assert marker["repo_id"] == "sim-org/GLM-5-NVFP4"
    assert len(marker["commit"]) == 40
    for rel, info in marker["files"].items():
        f = host.file(f"{MODEL}/{rel}")
        assert f.exists and f.size == info["size"], rel
    assert not host.file(f"{MODEL}/.llmops-partial").exists
    record = json.loads(host.file("/var/lib/llmops-sglang/model.json").content_string)
    assert record["commit"] == marker["commit"]
    # the revision lives in its own directory, named by its commit; the served path is a link to it
    assert host.file(MODEL).is_symlink
    assert host.file(MODEL).linked_to == f"{MODEL}.revisions/{marker['commit']}" == record["path"]


def test_unit_is_active_and_enabled(host):
    svc = host.service("sglang")
    assert svc.is_running
    assert svc.is_enabled
    assert host.check_output("systemctl show sglang -p User --value") == "sglang"
    assert host.check_output("systemctl show sglang -p Restart --value") == "no"


def test_health_and_served_model_from_the_node(host):
    assert host.check_output("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:30000/health") == "200"
    models = json.loads(host.check_output("curl -s http://127.0.0.1:30000/v1/models"))
    assert "glm-5" in [m["id"] for m in models["data"]]


def test_binds_loopback_only(host):
    assert host.socket("tcp://127.0.0.1:30000").is_listening
    assert not host.socket("tcp://0.0.0.0:30000").is_listening


HF_TOKEN = "hf_sim_test_token"  # set by converge.yml


TOKEN_FILE = "/etc/sglang/hf-token.env"  # the model role's model_token_file: only the download reads it


def test_token_file_is_root_only_and_the_only_place_with_the_token(host):
    f = host.file(TOKEN_FILE)
    assert f.exists and f.mode == 0o600 and f.user == "root"
    assert f"HF_TOKEN={HF_TOKEN}" in f.content_string
    # nowhere else, so not in the long-running server's EnvironmentFile either (issue 25 item 7)
    hits = host.run(f"grep -rlF {HF_TOKEN} /etc /opt /var /root /home /tmp 2>/dev/null").stdout.split()
    assert hits == [TOKEN_FILE]


def test_unit_keeps_secrets_out_and_cuda_in(host):
    unit = host.file("/etc/systemd/system/sglang.service").content_string
    assert f"EnvironmentFile=-{ENV_FILE}" in unit
    # No key on the command line: the launcher reads SGLANG_API_KEY from the EnvironmentFile and passes it as the
    # release's flag, whose name (not the key) the unit carries in LLMOPS_API_KEY_FLAG.
    exec_start = [line for line in unit.splitlines() if line.startswith("ExecStart")]
    assert exec_start and not any("--api-key" in line or "--admin-api-key" in line for line in exec_start)
    assert "SGLANG_API_KEY=" not in unit and "HF_TOKEN=" not in unit
    for opt in ("NoNewPrivileges=true", "ProtectSystem=full", "ProtectHome=true", "PrivateTmp=true"):
        assert opt in unit
    settings = [line for line in unit.splitlines() if not line.lstrip().startswith("#")]
    assert not [line for line in settings if line.startswith(("PrivateDevices=", "DevicePolicy="))]
    assert "StandardOutput=append:/var/log/sglang/server.log" in unit


def test_log_rotation(host):
    conf = host.file("/etc/logrotate.d/sglang").content_string
    assert "/var/log/sglang/*.log" in conf and "copytruncate" in conf
    assert host.run("logrotate -d /etc/logrotate.d/sglang").rc == 0


def test_deployment_record(host):
    rec = json.loads(host.file("/var/lib/llmops-sglang/deployment.json").content_string)
    assert rec["driver"] == "580.95.05"
    # the whole chain is on record, from the stages that installed it
    assert str(rec["cuda"]).startswith("12.8")
    assert str(rec["torch"]).startswith("2.9.1+cu128")
    assert len(rec["sglang_commit"]) == 40
    # what the build stage built (its build.json): every wheel with the fingerprint it was built under
    assert sorted(rec["build"]) == ["flash-attn", "sgl-kernel", "sglang"]
    for name, wheel in rec["build"].items():
        assert len(wheel["fingerprint"]) == 16 and len(wheel["sha256"]) == 64 and wheel["installed_version"], name
    assert rec["model"]["commit"] and rec["model"]["repo_id"] == "sim-org/GLM-5-NVFP4"
    assert set(rec["kv_tokens_per_rank"].values()) == {425664} and len(rec["kv_tokens_per_rank"]) == 8
    assert set(rec["kv_size_gb_per_rank"].values()) == {24.37}
    # the real run logged 8.61 (the stand-in, with the run's 64-row table and torch's rounding per tensor: 8.63)
    assert all(abs(v - 8.61) <= 0.05 for v in rec["avail_after_pool_gb_per_rank"].values())
    assert "--mem-fraction-static" in rec["flags"] and "0.88" in rec["flags"]
    assert rec["memory"]["attempts"][-1]["outcome"] == "ready"
    assert rec["milestones"]["ready"] > 0
    # the GPU health verdict of the reading under load, after the smoke test (roles/server/tasks/health.yml)
    assert rec["gpu_health"]["verdict"] == "ok" and rec["gpu_health"]["phase"] == "load", rec["gpu_health"]
    # the benchmark after the start (SGLang's client from the served venv): the host's first figures, its baseline
    assert rec["benchmark"]["verdict"] == "baseline" and rec["benchmark"]["figures"]["completed"] == 32, rec[
        "benchmark"
    ]
