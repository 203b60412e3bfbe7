"""Bad input to the model download (hf_snapshot module and the model role's token check): one table, one row a case.

Every row asserts the exact one-line message (expected, found, what to do), the failed status, that no Python
traceback is printed, that nothing on the host changed (fingerprint of the directory the command could write) and
that it returns within a time bound (a hang fails the row).
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MODULE = "ansible_collections.llmops.sglang.plugins.modules.hf_snapshot"
BOUND = 60  # seconds: any row slower than this is a hang
NOWHERE = "http://127.0.0.1:9"  # nothing listens: a row that reaches the network fails differently
TOKEN = "hf_secretvalue_never_shown"


def fingerprint(root):
    """Mode, size and mtime of everything below ``root`` (the playbook's own files in root/play excluded)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath == str(root) and "play" in dirnames:
            dirnames.remove("play")
        for n in dirnames + filenames:
            p = os.path.join(dirpath, n)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


def run_module(args):
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump({"ANSIBLE_MODULE_ARGS": args}, f)
    try:
        p = subprocess.run(
            [sys.executable, "-m", MODULE, f.name],
            capture_output=True,
            text=True,
            timeout=BOUND,
            env=dict(os.environ, PYTHONPATH=str(ROOT)),
            cwd=ROOT,
            check=False,
        )
    finally:
        os.unlink(f.name)
    return p.returncode, json.loads(p.stdout) if p.stdout.strip().startswith("{") else {}, p.stdout + p.stderr


PLAY = """
- name: Run the model role's checks only
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Include the model role's input checks
      ansible.builtin.include_role:
        name: llmops.sglang.model
        tasks_from: validate
"""


def run_role(extra, tmp):
    tmp = tmp / "play"
    tmp.mkdir(exist_ok=True)
    play = tmp / "play.yml"
    play.write_text(PLAY)
    (tmp / "vars.json").write_text(json.dumps(extra))
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(ROOT))
    env.pop("ANSIBLE_CALLBACKS_ENABLED", None)
    p = subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            "localhost,",
            "-vvv",
            str(play),
            "-e",
            f"@{tmp / 'vars.json'}",
            "-e",
            f"ansible_python_interpreter={sys.executable}",
        ],
        capture_output=True,
        text=True,
        timeout=BOUND,
        env=env,
        cwd=tmp,
        check=False,
    )
    return p.returncode, p.stdout + p.stderr


def _binary_token_file(tmp):
    f = tmp / "sglang.env"
    f.write_bytes(b"HF_TOKEN=\xff\xfe\x00\x01binary\n")
    return {"token_file": str(f)}


def _token_file_with_space(tmp):
    f = tmp / "sglang.env"
    f.write_text(f'HF_TOKEN="{TOKEN} x"\n')
    return {"token_file": str(f)}


def _readonly_dest(tmp):
    if os.geteuid() != 0:
        pytest.skip("a read-only mount needs root")
    ro = tmp / "ro"
    ro.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)], check=True)
    return {"dest": str(ro / "model")}


def _dest_is_file(tmp):
    (tmp / "afile").write_text("x")
    return {"dest": str(tmp / "afile")}


# (case, extra module args or a function of tmp giving them, exact message with {tmp})
MODULE_ROWS = [
    (
        "repo id with spaces",
        {"repo_id": "zai-org/GLM 5"},
        "repo_id: expected ORG/NAME made of letters, digits, '.', '_' and '-' (for example zai-org/GLM-5); found "
        "'zai-org/GLM 5'; correct the repository id",
    ),
    (
        "repo id climbing out with ..",
        {"repo_id": "../etc"},
        "repo_id: expected ORG/NAME made of letters, digits, '.', '_' and '-' (for example zai-org/GLM-5); found "
        "'../etc'; correct the repository id",
    ),
    (
        "repo id with three parts",
        {"repo_id": "a/b/c"},
        "repo_id: expected ORG/NAME made of letters, digits, '.', '_' and '-' (for example zai-org/GLM-5); found "
        "'a/b/c'; correct the repository id",
    ),
    (
        "endpoint not a URL",
        {"endpoint": "not-a-url"},
        "endpoint: expected an http(s) URL such as https://huggingface.co; found 'not-a-url'; correct the endpoint",
    ),
    (
        "endpoint with another scheme",
        {"endpoint": "ftp://hub.example"},
        "endpoint: expected an http(s) URL such as https://huggingface.co; found 'ftp://hub.example'; correct the "
        "endpoint",
    ),
    (
        "peer_url not a URL",
        {"peer_url": "host1:8765"},
        "peer_url: expected an http(s) URL such as http://10.0.0.5:8765; found 'host1:8765'",
    ),
    ("connections 0", {"connections": 0}, "connections: expected an integer from 1 to 64; found 0"),
    ("connections 1000", {"connections": 1000}, "connections: expected an integer from 1 to 64; found 1000"),
    ("retries negative", {"retries": -1}, "retries: expected an integer from 0 to 100; found -1"),
    ("timeout 0", {"timeout": 0}, "timeout: expected an integer from 1 to 3600; found 0"),
    ("segment_mib negative", {"segment_mib": -5}, "segment_mib: expected an integer from 0 to 65536; found -5"),
    ("wait_budget nan", {"wait_budget": "nan"}, "wait_budget: expected a finite number >= 0; found nan"),
    (
        "lock_owner with a slash",
        {"lock_owner": "../gpu01"},
        "lock_owner: expected a host name of letters, digits and ._:@- (at most 253, not starting with '.'); found "
        "'../gpu01'; pass the inventory host name",
    ),
    (
        "lock_stale 5",
        {"lock_owner": "gpu01", "lock_stale": 5},
        "lock_stale: expected seconds from 30 to 86400; found 5.0",
    ),
    ("reserve_gib inf", {"reserve_gib": "inf"}, "reserve_gib: expected a finite number >= 0; found inf"),
    ("reserve_gib negative", {"reserve_gib": -1}, "reserve_gib: expected a finite number >= 0; found -1.0"),
    (
        "dest an existing file",
        _dest_is_file,
        "dest: expected a directory (or a path to create); found an existing file {tmp}/afile; choose a directory",
    ),
    (
        "dest below a file",
        lambda tmp: _dest_is_file(tmp) | {"dest": str(tmp / "afile" / "model")},
        "dest: expected a path below directories; found {tmp}/afile is a file; choose another path",
    ),
    (
        "dest not writable (read-only file system)",
        _readonly_dest,
        "dest: expected a writable directory; found {tmp}/ro not writable (read-only file system); choose a "
        "writable path or fix it",
    ),
    (
        "dest on /proc",
        {"dest": "/proc/llmops-model"},
        "dest: expected a directory on a disk; found /proc/llmops-model on a pseudo file system without storage "
        "(such as /proc or /sys); choose a directory on a disk",
    ),
    (
        "binary token file",
        _binary_token_file,
        "token_file: expected a text EnvironmentFile with HF_TOKEN=VALUE lines; found binary data in "
        "{tmp}/sglang.env; rewrite it (the model role writes it from model_hf_token)",
    ),
    (
        "token file is a directory",
        lambda tmp: {"token_file": str(tmp)},
        "token_file: expected a file of KEY=VALUE lines; found {tmp} is not a regular file",
    ),
    (
        "token with a space and a newline",
        {"token": TOKEN + " \n"},
        f"token: expected one line of token characters; found {len(TOKEN) + 2} characters (not shown) with a space, "
        "a newline; set the token again (model_hf_token)",
    ),
    (
        "token file value with a space",
        _token_file_with_space,
        "HF_TOKEN in {tmp}/sglang.env: expected one line of token characters; "
        f"found {len(TOKEN) + 2} characters (not shown) with a space; set the token again (model_hf_token)",
    ),
]

FANOUT = "Expected model_fleet_seed to be a host of this play, model_fleet_seed_address an address or host name,"
SHARED = "Expected model_storage local or shared (not shared together with model_fleet_fanout) and"
ACCOUNT = "Expected model_storage_account empty or an account name (lower-case letters, digits, _ and -; not root or"
ROLE_ROWS = [
    # the fan-out's settings: checked with the others, before the firewall table, the adoption or the share start
    ("role: fan-out peer_down 0", {"model_fleet_fanout": True, "model_fleet_peer_down": 0}, FANOUT),
    ("role: fan-out peer_wait negative", {"model_fleet_fanout": True, "model_fleet_peer_wait": -1}, FANOUT),
    ("role: fan-out peer_wait text", {"model_fleet_fanout": True, "model_fleet_peer_wait": "forever"}, FANOUT),
    ("role: fan-out peer_timeout text", {"model_fleet_fanout": True, "model_fleet_peer_timeout": "soon"}, FANOUT),
    (
        "role: fan-out seed address with a newline",
        {"model_fleet_fanout": True, "model_fleet_seed_address": "10.0.0.1\nExecStartPre=+/bin/sh"},
        FANOUT,
    ),
    ("role: fan-out seed not in the play", {"model_fleet_fanout": True, "model_fleet_seed": "gpu99"}, FANOUT),
    (
        "role: fan-out allow-list not a list",
        {"model_fleet_fanout": True, "model_fleet_peer_addresses": "10.0.0.2"},
        FANOUT,
    ),
    (
        "role: fan-out allow-list entry",
        {"model_fleet_fanout": True, "model_fleet_peer_addresses": ["0.0.0.0/0 x"]},
        FANOUT,
    ),
    ("role: model_storage nfs", {"model_storage": "nfs"}, SHARED),
    ("role: shared storage with the fan-out", {"model_storage": "shared", "model_fleet_fanout": True}, SHARED),
    ("role: shared storage lock_stale 5", {"model_storage": "shared", "model_storage_lock_stale": 5}, SHARED),
    # the account that writes on a root_squash share: its name, its uid, where it may be used; then the host's accounts
    ("role: account root", {"model_storage": "shared", "model_storage_account": "root"}, ACCOUNT),
    ("role: account with a space", {"model_storage": "shared", "model_storage_account": "llm ops"}, ACCOUNT),
    ("role: account with a newline", {"model_storage": "shared", "model_storage_account": "daemon\n"}, ACCOUNT),
    ("role: account on local storage", {"model_storage_account": "daemon"}, ACCOUNT),
    (
        "role: account with an offline bundle",
        {"model_storage": "shared", "model_storage_account": "daemon", "llmops_bundle_dir": "/srv/bundle"},
        ACCOUNT,
    ),
    ("role: account uid 65534", {"model_storage": "shared", "model_storage_uid": 65534}, ACCOUNT),
    ("role: account uid text", {"model_storage": "shared", "model_storage_uid": "alice"}, ACCOUNT),
    (
        "role: account missing, no uid to create it with",
        {"model_storage": "shared", "model_storage_account": "llmops-no-such"},
        "localhost: expected the account llmops-no-such (model_storage_account); found no such account. Nothing was "
        "changed; create it with the uid that owns the share on the file server, or set model_storage_uid",
    ),
    (
        "role: account with another uid",
        {"model_storage": "shared", "model_storage_account": "daemon", "model_storage_uid": 4242},
        "localhost: expected the account daemon (model_storage_account) with uid 4242; found it with uid 1. Nothing "
        "was changed",
    ),
    (
        "role: account missing, its uid held by another",
        {"model_storage": "shared", "model_storage_account": "llmops-no-such", "model_storage_uid": 1},
        "localhost: expected the account llmops-no-such (model_storage_account) with uid 1; found uid 1 held by "
        "daemon. Nothing was changed",
    ),
    (
        "role: model_hf_token with a space",
        {"model_hf_token": TOKEN + " x"},
        "model_hf_token: expected one line of token characters (letters, digits and _.~+/=:-); found "
        f"{len(TOKEN) + 2} characters, 1 of them not allowed (a space, quote or newline is typical of a copy-paste); "
        "set it again, the value is not shown",
    ),
    (
        "role: model_hf_token with a plain-HTTP endpoint",
        {"model_hf_token": TOKEN},
        "model_hf_endpoint: expected an https:// URL when model_hf_token is set (every request of the download "
        f"carries the token); found {NOWHERE}. Nothing was changed; use the hub's https URL, or set "
        "model_hf_allow_plain_http to true for a hub mirror on a network you trust",
    ),
    (
        "role: model_hf_token not a string",
        {"model_hf_token": {"a": 1}},
        "model_hf_token: expected a string; found a dict; set it to the token text (from ansible-vault)",
    ),
    (
        "role: llmops_model_repo_id with a space",
        {"model_hf_token": "", "llmops_model_repo_id": "zai-org/GLM 5"},
        "llmops_model_repo_id: expected ORG/NAME made of letters, digits, '.', '_' and '-'; found zai-org/GLM 5; "
        "correct it",
    ),
]


def _cleanup_mounts(tmp):
    ro = tmp / "ro"
    if ro.is_dir() and os.path.ismount(ro):
        subprocess.run(["umount", "-l", str(ro)], check=False)


@pytest.mark.parametrize(
    ("case", "extra", "message"),
    [pytest.param(*r, id=r[0]) for r in MODULE_ROWS + ROLE_ROWS],
)
def test_bad_input_fails_in_one_line_and_changes_nothing(case, extra, message, tmp_path):
    try:
        extra = extra(tmp_path) if callable(extra) else extra
        before = fingerprint(tmp_path)
        expected = message.replace("{tmp}", str(tmp_path))
        if case.startswith("role:"):
            rc, out = run_role(
                {"llmops_model_repo_id": "sim-org/GLM-5-NVFP4", "model_hf_endpoint": NOWHERE, **extra}, tmp_path
            )
            assert rc != 0, out
            assert expected in out, out[-3000:]
            assert "censored" not in out
        else:
            args = {"repo_id": "sim-org/GLM-5-NVFP4", "endpoint": NOWHERE, "dest": str(tmp_path / "model"), **extra}
            rc, res, out = run_module(args)
            assert rc == 1 and res.get("failed"), out
            assert res["msg"] == expected
            assert "\n" not in res["msg"]
        assert "Traceback" not in out
        assert TOKEN not in out
        assert fingerprint(tmp_path) == before
        assert not os.path.exists("/proc/llmops-model")
    finally:
        _cleanup_mounts(tmp_path)


def test_the_fanout_defaults_pass_the_checks(tmp_path):
    """The rows above fail for their value, not because any fan-out fails the check."""
    extra = {"llmops_model_repo_id": "sim-org/GLM-5-NVFP4", "model_hf_endpoint": NOWHERE, "model_fleet_fanout": True}
    rc, out = run_role({**extra, "model_fleet_peer_addresses": ["10.213.0.21", "fd00::2"]}, tmp_path)
    assert rc == 0, out[-3000:]
    assert "Check the fan-out settings" in out and FANOUT not in out


def test_an_existing_account_on_shared_storage_passes_the_checks(tmp_path):
    """The account rows above fail for their value: an account the host has, at its uid, passes."""
    extra = {"llmops_model_repo_id": "sim-org/GLM-5-NVFP4", "model_hf_endpoint": NOWHERE, "model_storage": "shared"}
    rc, out = run_role({**extra, "model_storage_account": "daemon", "model_storage_uid": 1}, tmp_path)
    assert rc == 0, out[-3000:]
    assert "Check that every host of the play knows the account by the same uid" in out and ACCOUNT not in out
