"""The receipts site.yml left on the node (plugins/module_utils/stage_receipt.py): root-only, and the check the
stages run finds a changed watched file, names it, and matches again once the file is as the stage left it. The
check runs here through Ansible with the inputs the receipt recorded (the playbook computes the same digests)."""

import json

PIN = "/etc/apt/preferences.d/llmops-nvidia-driver.pref"
STAGES = "/var/lib/llmops-sglang/stages"


def check(host, stage):
    receipt = json.loads(host.file(f"{STAGES}/{stage}.json").content_string)
    args = {"directory": STAGES, "stage": stage, "state": "check", "inputs": receipt["inputs"]}
    return host.ansible("llmops.sglang.stage_receipt", json.dumps(args), check=False)


def test_receipts_are_root_only_and_watch_what_the_stages_left(host):
    for stage in ("gpu_stack", "build"):
        f = host.file(f"{STAGES}/{stage}.json")
        assert f.is_file and f.user == "root" and f.mode == 0o600, stage
    watched = json.loads(host.file(f"{STAGES}/gpu_stack.json").content_string)["watch"]
    assert PIN in watched["files"] and "nvidia-persistenced" in watched["services"]
    build = json.loads(host.file(f"{STAGES}/build.json").content_string)["watch"]
    assert any(t.endswith("/site-packages") for t in build["trees"]) and build["users"] == ["sglang"]
    server = json.loads(host.file(f"{STAGES}/server.json").content_string)
    assert host.file(f"{STAGES}/server.json").mode == 0o600
    assert {"/etc/systemd/system/sglang.service", "/etc/logrotate.d/sglang"} <= set(server["watch"]["files"])
    assert server["watch"]["services"] == [
        "llmops-sglang-firewall-watch.service",
        "llmops-sglang-firewall.service",
        "sglang.service",
    ]
    # the roll's name is not an input (it changes every run), this host's place in its replica is
    assert "llmops_roll_id" not in server["inputs"] and "server_receipt_topology" in server["inputs"]
    assert "llmops_fleet" not in server["inputs"]


def test_a_changed_server_unit_is_named_by_the_server_stages_receipt(host):
    assert check(host, "server")["converged"] is True
    unit = "/etc/systemd/system/sglang.service"
    assert host.run(f"cp -p {unit} {unit}.receipt-test && echo '# drift' >> {unit}").rc == 0
    try:
        drifted = check(host, "server")
    finally:
        assert host.run(f"cp -p {unit}.receipt-test {unit} && rm {unit}.receipt-test").rc == 0
    assert drifted["converged"] is False and drifted["msg"].startswith(f"the server stage runs: file {unit}")
    assert check(host, "server")["converged"] is True


def test_a_changed_pin_file_is_named_and_the_receipt_matches_again_once_it_is_restored(host):
    assert check(host, "gpu_stack")["converged"] is True
    assert host.run(f"cp -p {PIN} {PIN}.receipt-test && echo '# drift' >> {PIN}").rc == 0
    try:
        drifted = check(host, "gpu_stack")
    finally:
        assert host.run(f"cp {PIN}.receipt-test {PIN} && rm {PIN}.receipt-test").rc == 0
    assert drifted["converged"] is False
    assert drifted["differences"][0].startswith(f"file {PIN}: was -rw-r--r-- 0:0 sha256 ")
    assert drifted["msg"].startswith(f"the gpu_stack stage runs: file {PIN}")
    assert check(host, "gpu_stack")["converged"] is True
