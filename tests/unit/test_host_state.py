"""llmops.sglang.host_state (plugins/module_utils/host_state.py): one read of what a stage would otherwise ask task by
task. The readers against real files in a temporary directory, the dpkg and systemctl parsers against their real
output formats (fake runners), and the module through ansible-playbook on localhost, in check mode: it reads, returns
variable names of an EnvironmentFile but never their values, and changes nothing."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

from ansible_collections.llmops.sglang.plugins.module_utils import host_state

ROOT = Path(__file__).resolve().parents[2]


def test_sha1_is_the_checksum_the_copy_module_compares(tmp_path):
    f = tmp_path / "unit"
    f.write_bytes(b"[Unit]\nDescription=x\n")
    assert host_state.sha1_of(str(f)) == hashlib.sha1(b"[Unit]\nDescription=x\n").hexdigest()
    assert host_state.sha1_of(str(tmp_path / "missing")) is None
    assert host_state.sha1_of(str(tmp_path)) is None  # a directory has no checksum


def test_path_info_follows_a_link_and_says_so(tmp_path):
    target = tmp_path / "python3"
    target.write_text("#!/bin/sh\n")
    target.chmod(0o755)
    link = tmp_path / "python"
    link.symlink_to(target)
    info = host_state.path_info(str(link))
    assert info["kind"] == "file" and info["link"] is True and info["executable"] is True and info["mode"] == "0755"
    assert host_state.path_info(str(tmp_path))["kind"] == "directory"
    assert host_state.path_info(str(tmp_path / "none")) is None


def test_json_and_env_keys_never_return_a_secret(tmp_path):
    env = tmp_path / "sglang.env"
    env.write_text("# secrets\nHF_TOKEN=hf_secret_value\nSGLANG_API_KEY=sk-secret\n")
    assert host_state.env_keys(str(env)) == ["HF_TOKEN", "SGLANG_API_KEY"]
    record = tmp_path / "r.json"
    record.write_text('{"a": 1}')
    (tmp_path / "bad.json").write_text("{not json")
    assert host_state.read_json(str(record)) == {"a": 1}
    assert host_state.read_json(str(tmp_path / "bad.json")) is None
    assert host_state.read_json(str(tmp_path / "missing.json")) is None


def test_glob_read_returns_each_matching_file_base64(tmp_path):
    for dev, cls in (("0000:00:01.0", "0x068000\n"), ("0000:00:02.0", "0x030000\n")):
        (tmp_path / dev).mkdir()
        (tmp_path / dev / "class").write_text(cls)
    out = host_state.glob_read(str(tmp_path / "*" / "class"))
    decoded = {Path(p).parent.name: base64.b64decode(v).decode() for p, v in out.items()}
    assert decoded == {"0000:00:01.0": "0x068000\n", "0000:00:02.0": "0x030000\n"}


DPKG = (
    "nvidia-driver-cuda\t580.95.05-1\thi \tnvidia-graphics-drivers\n"
    "libcuda1:amd64\t580.95.05-1\tii \tnvidia-graphics-drivers\n"
    "oldpkg\t1.0\trc \toldpkg\n"
)


def fake(stdout):
    calls = []

    def runner(argv, timeout=None, env=None):
        calls.append(argv)
        return {"rc": 0, "stdout": stdout, "stderr": ""}

    return runner, calls


def test_dpkg_states_installed_held_and_source():
    runner, calls = fake(DPKG)
    pkgs = host_state.all_packages(runner)
    assert pkgs["nvidia-driver-cuda"] == {
        "version": "580.95.05-1",
        "installed": True,
        "held": True,
        "source": "nvidia-graphics-drivers",
    }
    assert pkgs["libcuda1"]["installed"] is True and pkgs["libcuda1"]["held"] is False
    assert pkgs["oldpkg"]["installed"] is False  # removed, configuration files left
    runner, calls = fake(DPKG)
    asked = host_state.packages(["nvidia-driver-cuda", "logrotate"], runner)
    assert asked["logrotate"] == {"version": None, "installed": False, "held": False}
    assert calls[0][:2] == ["dpkg-query", "-W"] and calls[0][-2:] == ["nvidia-driver-cuda", "logrotate"]


def test_units_from_one_systemctl_show():
    out = (
        "Id=sglang.service\nActiveState=active\nUnitFileState=enabled\n\n"
        "Id=nvidia-persistenced.service\nActiveState=inactive\nUnitFileState=\n"
    )
    runner, calls = fake(out)
    assert host_state.units(["sglang.service", "nvidia-persistenced.service"], runner) == {
        "sglang.service": {"active": "active", "enabled": "enabled"},
        "nvidia-persistenced.service": {"active": "inactive", "enabled": "unknown"},
    }
    assert len(calls) == 1


def test_a_command_that_cannot_start_is_rc_none():
    assert host_state.run(["/nonexistent/nvcc", "--version"])["rc"] is None
    assert host_state.run([sys.executable, "-c", "print('x')"]) == {"rc": 0, "stdout": "x\n", "stderr": ""}


def test_the_module_reads_in_check_mode_and_changes_nothing(tmp_path):
    env_file = tmp_path / "sglang.env"
    env_file.write_text("SGLANG_API_KEY=sk-never-shown-7Qz9\n")
    unit = tmp_path / "sglang.service"
    unit.write_text("[Unit]\n")
    before = {p: p.stat().st_mtime_ns for p in (env_file, unit)}
    play = tmp_path / "play.yml"
    play.write_text(
        json.dumps(
            [
                {
                    "hosts": "localhost",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "llmops.sglang.host_state": {
                                "files": [str(unit), str(tmp_path / "missing")],
                                "env_keys": [str(env_file)],
                                "json": [str(tmp_path / "missing.json")],
                                "commands": {"py": [sys.executable, "-c", "print(40 + 2)"]},
                            },
                            "register": "state",
                        },
                        {"ansible.builtin.debug": {"var": "state"}},
                    ],
                }
            ]
        )
    )
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(ROOT))
    env["ANSIBLE_STDOUT_CALLBACK"] = "ansible.builtin.default"
    env["ANSIBLE_CALLBACK_RESULT_FORMAT"] = "json"
    p = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local", "--check",
         "-e", f"ansible_python_interpreter={sys.executable}", "-vvv", str(play)],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    out = p.stdout + p.stderr
    assert "sk-never-shown-7Qz9" not in out
    assert '"SGLANG_API_KEY"' in out and hashlib.sha1(b"[Unit]\n").hexdigest() in out
    assert '"stdout": "42\\n"' in out
    assert {p: p.stat().st_mtime_ns for p in (env_file, unit)} == before
