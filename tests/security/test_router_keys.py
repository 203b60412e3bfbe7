"""Issue 25 items 2 and 3 without nodes: the router's keys, keyed replicas behind it, and the stand-in's auth.

Grounded in real artifacts fetched at test time (tests/sim/real_releases.py: the shared wheel cache, else pip):
sglang-router 0.3.2 (the pinned wheel: its own argparse parser, launch_router.py:65-100, decides what an extra argument
sets) and SGLang 0.5.9 (decide_request_auth, sglang/srt/utils/auth.py:74, and the @auth_level marks of
sglang/srt/entrypoints/http_server.py). tests/integration/test_router_rolling_on_nodes.py proves the same on a fleet:
anonymous clients refused by the real router and the stand-in replicas, keys absent from ps, unit and journal."""

from __future__ import annotations

import importlib
import json
import os
import re
import stat
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from ansible_collections.llmops.sglang.plugins.module_utils import inventory_values, sglang_flags

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "sim"))
sys.path.insert(0, str(ROOT / "tests" / "unit"))
from real_releases import wheel  # noqa: E402
from test_router_role_checks import problems as router_problems  # noqa: E402

LAUNCHER = ROOT / "roles" / "router" / "files" / "sglang-router-launch"
ROUTER_VERSION = yaml.safe_load((ROOT / "roles" / "router" / "defaults" / "main.yml").read_text())["router_version"]
SECRET = "Zq7" + "x" * 37  # a key as the controller generates them (40 letters and digits)


# -- the router's own parser decides what an extra argument sets ------------------------------------------------------
@pytest.fixture(scope="module")
def router_parser(tmp_path_factory):
    """parse(argv) -> {dest: value} of the real sglang-router's launcher parser (argparse, allow_abbrev as shipped), or
    {'error': message}; run in a child interpreter on the unpacked wheel (its Rust extension loads on this host)."""
    unpacked = tmp_path_factory.mktemp("router-wheel")
    with zipfile.ZipFile(wheel(ROUTER_VERSION, package="sglang-router")) as z:
        z.extractall(unpacked)
    code = (
        "import argparse, json, sys\n"
        "from sglang_router.router_args import RouterArgs\n"
        "p = argparse.ArgumentParser(exit_on_error=False)\n"  # launch_router.py:65 builds it with the defaults
        "RouterArgs.add_cli_args(p, use_router_prefix=False)\n"
        "try:\n"
        "    ns, extra = p.parse_known_args(json.loads(sys.argv[1]))\n"
        "    print(json.dumps({k: v for k, v in vars(ns).items() if v != p.get_default(k)}))\n"
        "except (argparse.ArgumentError, SystemExit) as e:\n"
        "    print(json.dumps({'error': str(e)}))\n"
    )

    def parse(argv):
        out = subprocess.run(
            [sys.executable, "-c", code, json.dumps(argv)],
            env={**os.environ, "PYTHONPATH": str(unpacked)}, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-2000:]
        return json.loads(out.stdout.strip().splitlines()[-1])

    return parse


# (extra argument words, the router option the real parser sets, the flag our check must name)
PREFIX_ATTACKS = [
    (["--api-key", SECRET], "api_key", "--api-key"),
    (["--api-ke", SECRET], "api_key", "--api-key"),
    ([f"--api-key={SECRET}"], "api_key", "--api-key"),
    (["--control-plane-api-keys", f"x:y:admin:{SECRET}"], "control_plane_api_keys", "--control-plane-api-keys"),
    (["--control-plane-api", f"x:y:admin:{SECRET}"], "control_plane_api_keys", "--control-plane-api-keys"),
    ([f"--control-plane-ap=x:y:admin:{SECRET}"], "control_plane_api_keys", "--control-plane-api-keys"),
    (["--worker-urls", "http://10.9.9.9:30000"], "worker_urls", "--worker-urls"),
    (["--worker-u", "http://10.9.9.9:30000"], "worker_urls", "--worker-urls"),
    (["--jwt-iss", "https://idp.example"], "jwt_issuer", "--jwt-issuer"),
    (["--service-discovery"], "service_discovery", "--service-discovery"),
    (["--host", "10.9.9.9"], "host", "--host"),
    (["--prometheus-ho", "10.9.9.9"], "prometheus_host", "--prometheus-host"),
    (["--log-d", "/tmp/x"], "log_dir", "--log-dir"),
    (["--polic", "random"], "policy", "--policy"),
]


@pytest.mark.parametrize(
    ("words", "dest", "flag"),
    PREFIX_ATTACKS,
    ids=["router extra arg " + " ".join(w)[:28].replace(SECRET, "KEY") for w, _, _ in PREFIX_ATTACKS],
)
def test_an_extra_argument_the_router_reads_as_a_key_or_an_own_flag_is_refused(router_parser, words, dest, flag):
    parsed = router_parser(words)
    assert dest in parsed, (words, parsed)  # the real router would take it as that option
    found = router_problems(router_extra_args=words)
    secret = flag in ("--api-key", "--control-plane-api-keys", "--worker-urls", "--jwt-issuer", "--service-discovery")
    start = f"Expected no {flag}" if secret else f"Expected {flag} to come"
    assert len(found) == 1 and found[0].startswith(start), found
    assert flag in found[0], found[0]
    assert SECRET not in json.dumps(found)


def test_a_harmless_extra_argument_passes_both_the_router_and_the_check(router_parser):
    assert router_parser(["--retry-max-retries", "3"]) == {"retry_max_retries": 3}
    assert router_problems(router_extra_args=["--retry-max-retries", "3"]) == []


def test_the_router_cli_has_no_other_way_to_take_its_keys(router_parser):
    """The keys' options have no environment default (unlike the Oracle password's ATP_PASSWORD): argv or the Python
    API are the only ways in, so the launcher builds the argument list in memory."""
    with zipfile.ZipFile(wheel(ROUTER_VERSION, package="sglang-router")) as z:
        src = z.read("sglang_router/router_args.py").decode()
    for option in ("api-key", "control-plane-api-keys"):
        block = src.split(f'f"--{{prefix}}{option}"', 1)[1].split("auth_group.add_argument", 1)[0]
        assert "os.getenv" not in block and "environ" not in block, option
    assert 'default=os.getenv("ATP_PASSWORD")' in src  # the file does use env defaults elsewhere: the check can fail


# -- keys: bad values are one sentence that never shows them --------------------------------------------------------
BAD_KEYS = {
    "a key with a line break": ("llmops_router_api_key", SECRET + "\nExecStartPre=/bin/sh"),
    "a key ending in a newline (echo into a vault file)": ("llmops_router_api_key", SECRET + "\n"),
    "a key with a space": ("llmops_router_admin_key", SECRET[:20] + " " + SECRET[20:]),
    "a key with a quote": ("llmops_router_api_key", SECRET + '"'),
    "a key with a dollar (systemd and shell expansion)": ("llmops_router_admin_key", "$" + SECRET),
    "a key of 7 characters": ("llmops_router_api_key", "abcdefg"),
    "a key with a non-ASCII letter": ("llmops_router_api_key", SECRET + "é"),
    "a key that is a number (unquoted in YAML)": ("llmops_router_admin_key", 12345678901),
    "an empty router key (the router would accept anyone)": ("llmops_router_api_key", ""),
}


@pytest.mark.parametrize("case", BAD_KEYS, ids=list(BAD_KEYS))
def test_a_bad_router_key_is_one_sentence_without_the_key(case):
    name, value = BAD_KEYS[case]
    found = router_problems(**{name: value})
    assert len(found) == 1 and found[0].startswith(f"Expected {name}"), found
    if isinstance(value, str) and len(value) >= 8:
        assert value.strip() not in found[0] and SECRET not in found[0], found[0]
    assert "\n" not in found[0]


def test_the_client_key_equal_to_the_admin_key_is_refused():
    found = router_problems(llmops_router_api_key=SECRET, llmops_router_admin_key=SECRET)
    assert found == [
        "Expected llmops_router_admin_key and llmops_router_api_key to differ; found the same key in both (the value "
        "is not shown). Give each its own key."
    ]


def test_a_bad_replica_key_behind_the_router_is_refused_by_the_router_checks():
    found = router_problems(llmops_replica_keys={"rr1": {"api_key": "short", "admin_api_key": SECRET}})
    assert found == [
        "Expected llmops_server_api_key of replica rr1 of at least 8 characters (or empty for none); found 5 (the "
        "value is not shown). Use a long random token, e.g. from openssl rand -hex 24."
    ]


def test_a_replica_whose_admin_key_equals_its_api_key_is_refused():
    found = router_problems(llmops_replica_keys={"rr1": {"api_key": SECRET, "admin_api_key": SECRET}})
    assert len(found) == 1 and "to differ" in found[0] and SECRET not in found[0]


def test_a_server_admin_key_without_an_api_key_is_refused_off_loopback(server_problems):
    found = server_problems(llmops_server_admin_api_key=SECRET, llmops_server_host="0.0.0.0")
    assert len(found) == 1 and found[0].startswith("Expected llmops_server_api_key to be set when"), found
    assert SECRET not in found[0]
    # on loopback the admin key alone is the default: local clients keep the OpenAI routes, the admin routes are keyed
    assert server_problems(llmops_server_admin_api_key=SECRET) == []


def test_a_stand_alone_server_on_loopback_gets_an_admin_key_and_no_api_key(tmp_path, ansible_playbook):
    # Every local account reaches a loopback port: without an admin key, SGLang's admin routes
    # (/update_weights_from_disk, /flush_cache, /configure_logging, ...) answer any of them.
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    inv = {"all": {"vars": local, "children": {"gpu_servers": {"hosts": {"g1": {"ansible_host": "10.9.0.1"}}}}}}
    run = ansible_playbook(tmp_path, inv, PLAN)
    assert run.returncode == 0, run.stdout[-3000:]
    creds = tmp_path / "credentials"
    assert sorted(p.name for p in creds.iterdir()) == ["replica-g1-admin-api-key.txt"]
    assert stat.S_IMODE((creds / "replica-g1-admin-api-key.txt").stat().st_mode) == 0o600


def test_an_abbreviated_admin_key_flag_in_server_extra_args_is_refused(server_problems):
    found = server_problems(server_extra_args=["--admin-api", SECRET])
    assert len(found) == 1 and "--admin-api-key" in found[0] and SECRET not in found[0], found


# -- the keys the controller generates -------------------------------------------------------------------------------
def _fleet(tmp_path, **router_vars):
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    return {
        "all": {
            "vars": local,
            "children": {
                "gpu_servers": {
                    "vars": {"llmops_server_host": "0.0.0.0"},
                    "hosts": {"g1": {"ansible_host": "10.9.0.1"}, "g2": {"ansible_host": "10.9.0.2"}},
                },
                "sglang_routers": {"hosts": {"r1": {"ansible_host": "10.9.0.3", **router_vars}}},
            },
        }
    }


PLAN = ROOT / "playbooks" / "fleet_roll_plan.yml"


def test_the_keys_are_generated_once_per_fleet_0600_in_a_0700_directory_and_never_printed(tmp_path, ansible_playbook):
    first = ansible_playbook(tmp_path, _fleet(tmp_path), PLAN, "-vvv")
    assert first.returncode == 0, first.stdout[-3000:]
    creds = tmp_path / "credentials"
    files = sorted(p.name for p in creds.iterdir())
    assert files == [
        "replica-g1-admin-api-key.txt", "replica-g1-api-key.txt", "replica-g2-admin-api-key.txt",
        "replica-g2-api-key.txt", "router-admin-key.txt", "router-api-key.txt",
    ]  # fmt: skip
    assert stat.S_IMODE(creds.stat().st_mode) == 0o700
    keys = {p.name: p.read_text().strip() for p in creds.iterdir()}
    assert all(stat.S_IMODE((creds / n).stat().st_mode) == 0o600 for n in files)
    assert len(set(keys.values())) == 6 and all(re.fullmatch(r"[A-Za-z0-9]{40}", k) for k in keys.values())
    assert not [n for n, k in keys.items() if k in first.stdout + first.stderr]
    again = ansible_playbook(tmp_path, _fleet(tmp_path), PLAN)
    assert again.returncode == 0 and {p.name: p.read_text().strip() for p in creds.iterdir()} == keys
    # the implicit localhost (no inventory_dir) uses the same directory, not one beside the playbooks
    assert not (ROOT / "playbooks" / "credentials").exists()


def test_a_credentials_directory_open_to_others_is_closed_and_its_keys_kept(tmp_path, ansible_playbook):
    # A directory made by hand (or by a checkout) 0755 with a key an earlier run left 0644: the run makes both private
    # again and keeps the key (Ansible's password lookup created a missing directory 0700 but left an existing one as
    # it was, and wrote each new key to a file that existed before its mode was set).
    creds = tmp_path / "credentials"
    creds.mkdir(mode=0o755)
    creds.chmod(0o755)
    kept = "K" * 20 + "7" * 20
    (creds / "router-api-key").write_text(kept + "\n")
    (creds / "router-api-key").chmod(0o644)
    run = ansible_playbook(tmp_path, _fleet(tmp_path), PLAN)
    assert run.returncode == 0, run.stdout[-3000:]
    assert stat.S_IMODE(creds.stat().st_mode) == 0o700
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in creds.iterdir()} == dict.fromkeys(
        ["replica-g1-admin-api-key.txt", "replica-g1-api-key.txt", "replica-g2-admin-api-key.txt",
         "replica-g2-api-key.txt", "router-admin-key.txt", "router-api-key.txt"], 0o600)  # fmt: skip
    # the key file of an earlier release (no .txt) is renamed, its key kept
    assert (creds / "router-api-key.txt").read_text().split() == [kept]


def test_keyed_replicas_behind_the_router_are_accepted(tmp_path, ansible_playbook):
    inv = _fleet(tmp_path)
    inv["all"]["children"]["gpu_servers"]["hosts"]["g1"]["llmops_server_api_key"] = SECRET
    run = ansible_playbook(tmp_path, inv, PLAN)
    assert run.returncode == 0, run.stdout[-3000:]
    assert not (tmp_path / "credentials" / "replica-g1-api-key.txt").exists()  # the inventory's key, not generated
    assert SECRET not in run.stdout + run.stderr


@pytest.mark.parametrize(
    ("router_vars", "expected"),
    [
        ({"llmops_router_api_key": "short"}, "Expected llmops_router_api_key of at least 8 characters"),
        ({"router_extra_args": ["--api-ke", SECRET]}, "Expected no --api-key in router_extra_args"),
    ],
    ids=["a short router key", "a key flag prefix in router_extra_args"],
)
def test_a_refusal_stops_the_run_before_any_replica_is_planned_or_started(
    tmp_path, ansible_playbook, router_vars, expected
):
    run = ansible_playbook(tmp_path, _fleet(tmp_path, **router_vars), PLAN)
    assert run.returncode != 0
    assert expected in run.stdout, run.stdout[-3000:]
    assert "Plan the order and the batches" not in run.stdout  # the next play of the plan never ran
    assert SECRET not in run.stdout + run.stderr and "Traceback" not in run.stdout + run.stderr


def _plays(playbook: str) -> list[tuple[str, dict]]:
    """The plays ``playbook`` runs, in order, with every import_playbook followed: [(file, play)]."""
    out = []
    for entry in yaml.safe_load((ROOT / "playbooks" / playbook).read_text()):
        imported = entry.get("ansible.builtin.import_playbook")
        out += _plays(imported) if imported else [(playbook, entry)]
    return out


def _is_router_check(play: dict) -> bool:
    tasks = play.get("tasks", [])
    first = tasks[0].get("ansible.builtin.include_role", {}) if tasks else {}
    return (
        play.get("any_errors_fatal") is True
        and first.get("name") == "llmops.sglang.router"
        and first.get("tasks_from") == "checks"
    )


@pytest.mark.parametrize(
    "playbook", ["server.yml", "rolling_restart.yml", "upgrade.yml", "rollback.yml", "fleet_switch.yml"]
)
def test_the_playbooks_that_put_replicas_behind_the_router_check_first(playbook):
    """The first play each of them runs is the router's settings-and-keys check (fleet_router_settings.yml); a
    refusal there ends the run (test_a_bad_router_key_stops_every_roll_before_its_first_change runs them)."""
    plays = _plays(playbook)
    assert (plays[0][0], _is_router_check(plays[0][1])) == ("fleet_router_settings.yml", True), plays[0]
    assert any("llmops.sglang.server" in json.dumps(p) for _, p in plays[1:])  # it does move replicas


@pytest.mark.parametrize("playbook", ["upgrade.yml", "rollback.yml", "fleet_switch.yml", "rolling_restart.yml"])
def test_a_bad_router_key_stops_every_roll_before_its_first_change(tmp_path, ansible_playbook, playbook):
    """The operator's path: the playbook itself, with a router key the checks refuse. Only the check play runs (no
    probe, no preflight, no build, no plan, no replica moved). No host here has a connection that can run anything
    (ssh_executable /bin/false): a playbook that went past its check fails on them, never acts on this host; and the
    check itself needs no connection (a router host that is down still gets it)."""
    inv = _fleet(tmp_path, llmops_router_api_key="short")
    inv["all"]["vars"] = {"ansible_connection": "ssh", "ansible_ssh_executable": "/bin/false"}
    run = ansible_playbook(tmp_path, inv, ROOT / "playbooks" / playbook)
    assert run.returncode != 0
    refusal = "r1: nothing was changed. Expected llmops_router_api_key of at least 8 characters"
    assert refusal in run.stdout, run.stdout[-3000:]
    plays = re.findall(r"^PLAY \[(.*)\] \*", run.stdout, re.M)
    assert plays == [_plays("fleet_router_settings.yml")[0][1]["name"]], plays
    assert "Traceback" not in run.stdout + run.stderr


UNREACHABLE_SSH = """#!/bin/sh
echo "ssh: connect to host $ROUTER_IP port 22: Connection refused" >&2
exit 255
"""


# the playbooks that import fleet_router_check.yml (fleet_switch.yml has no such check: its plan's first task on the
# router host, "Ask systemd whether the router runs", ends as Ansible's own UNREACHABLE, no replica touched)
@pytest.mark.parametrize("playbook", ["upgrade.yml", "rollback.yml", "rolling_restart.yml"])
def test_a_router_host_that_does_not_answer_stops_every_roll_with_the_router_checks_words(
    tmp_path, ansible_playbook, playbook
):
    """Keys that pass, but no host answers (an ssh that exits 255 saying what OpenSSH says for a refused connection):
    the run stops at the router check with its own diagnosis, before any replica is touched. No task before it may
    end the router host's play on its own (the shared role's package read did, on a branch: the diagnosis was lost)."""
    fake = tmp_path / "ssh"
    fake.write_text(UNREACHABLE_SSH.replace("$ROUTER_IP", "10.9.0.3"))
    fake.chmod(0o755)
    inv = _fleet(tmp_path, router_connect_timeout=2)
    inv["all"]["vars"] = {"ansible_connection": "ssh", "ansible_ssh_executable": str(fake)}
    run = ansible_playbook(tmp_path, inv, ROOT / "playbooks" / playbook)
    assert run.returncode != 0
    assert "The router on r1 (10.9.0.3) does not answer" in run.stdout, run.stdout[-3000:]
    assert "no replica was restarted or taken out of the router" in run.stdout, run.stdout[-3000:]
    plays = re.findall(r"^PLAY \[(.*)\] \*", run.stdout, re.M)
    check = [p for f, p in _plays(playbook) if f == "fleet_router_check.yml"][-1]["name"]
    assert plays[-1] == check, plays  # nothing after the check ran
    assert "Traceback" not in run.stdout + run.stderr


# -- the launcher: keys in memory, never on the command line ----------------------------------------------------------
FAKE_ROUTER = """
import json, os, sys
def parse_router_args(args):
    return list(args)
def launch_router(args):
    with open(os.environ["FAKE_OUT"], "w") as f:
        json.dump({"parsed": args, "argv": sys.argv, "cmdline": open("/proc/self/cmdline").read()}, f)
"""


def _launch(tmp_path, credential):
    pkg = tmp_path / "fake" / "sglang_router"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "launch_router.py").write_text(FAKE_ROUTER)
    creds = tmp_path / "creds"
    creds.mkdir(mode=0o700)
    if credential is not None:
        (creds / "router-keys").write_text(credential)
    env = {
        "PATH": os.environ["PATH"], "PYTHONPATH": str(tmp_path / "fake"), "CREDENTIALS_DIRECTORY": str(creds),
        "FAKE_OUT": str(tmp_path / "out.json"),
    }  # fmt: skip
    argv = [sys.executable, str(LAUNCHER), "--host", "127.0.0.1", "--port", "9", "--policy", "cache_aware"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60, check=False)


def test_the_launcher_gives_the_router_its_keys_in_memory_and_not_on_its_command_line(tmp_path, monkeypatch):
    monkeypatch.setattr("os.environ", {**os.environ})  # isolation only; the child gets its own env
    admin = "A" + SECRET[1:]
    cred = json.dumps({"api_key": SECRET, "admin_key": admin})
    run = _launch(tmp_path, cred)
    assert run.returncode == 0, run.stderr
    seen = json.loads((tmp_path / "out.json").read_text())
    assert seen["parsed"][-4:] == [
        "--api-key",
        SECRET,
        "--control-plane-api-keys",
        f"llmops-admin:llmops.sglang:admin:{admin}",
    ]
    assert SECRET not in json.dumps(seen["argv"]) and SECRET not in seen["cmdline"] and admin not in seen["cmdline"]
    assert SECRET not in run.stdout + run.stderr


@pytest.mark.parametrize(
    ("credential", "expected"),
    [(None, "cannot read the credential router-keys"), ("[1, 2]", "is not the role's JSON")],
    ids=["a missing credential", "a credential that is not the role's JSON"],
)
def test_the_launcher_refuses_a_missing_or_foreign_credential_in_one_line(tmp_path, credential, expected):
    run = _launch(tmp_path, credential)
    assert run.returncode == 1 and expected in run.stderr and "Traceback" not in run.stderr, run.stderr
    assert len(run.stderr.strip().splitlines()) == 1


# -- the stand-in decides auth as the real release does ---------------------------------------------------------------
@pytest.fixture(scope="module")
def real_auth(tmp_path_factory):
    """SGLang 0.5.9's own sglang/srt/utils/auth.py (no torch import: its docstring says it is made for unit tests)."""
    d = tmp_path_factory.mktemp("auth")
    with zipfile.ZipFile(wheel("0.5.9")) as z:
        (d / "sglang_real_auth.py").write_bytes(z.read("sglang/srt/utils/auth.py"))
        routes = z.read("sglang/srt/entrypoints/http_server.py").decode()
    sys.path.insert(0, str(d))
    try:
        return importlib.import_module("sglang_real_auth"), routes
    finally:
        sys.path.remove(str(d))


@pytest.fixture(scope="module")
def standin():
    sys.path.insert(0, str(ROOT / "sim" / "sglang" / "python"))
    return importlib.import_module("sglang.srt.entrypoints.http_server")


KEY_SETS = {
    "no keys": (None, None),
    "API key only": ("api-key-123456", None),
    "admin key only": (None, "admin-key-123456"),
    "both keys": ("api-key-123456", "admin-key-123456"),
}
HEADERS = [
    None,
    "Bearer api-key-123456",
    "Bearer admin-key-123456",
    "bearer admin-key-123456",
    "Bearer wrong",
    "Basic x",
]
PATHS = ["/v1/chat/completions", "/flush_cache", "/health_generate", "/metrics"]


@pytest.mark.parametrize("level", ["normal", "admin_optional", "admin_force"])
@pytest.mark.parametrize("keys", KEY_SETS, ids=list(KEY_SETS))
def test_the_standin_answers_each_request_as_the_real_decide_request_auth(real_auth, standin, keys, level):
    auth, _ = real_auth
    api_key, admin_key = KEY_SETS[keys]
    for path in PATHS:
        for header in HEADERS:
            real = auth.decide_request_auth(
                method="POST", path=path, authorization_header=header, api_key=api_key, admin_api_key=admin_key,
                auth_level=auth.AuthLevel(level),
            )  # fmt: skip
            ours = standin.decide_request_auth(
                method="POST", path=path, authorization=header, api_key=api_key, admin_api_key=admin_key, level=level
            )
            assert ours == (0 if real.allowed else real.error_status_code), (path, header)


@pytest.mark.parametrize("route", ["/flush_cache", "/configure_logging"])
def test_the_standins_admin_routes_are_marked_admin_optional_in_the_real_release(real_auth, standin, route):
    _, routes = real_auth
    block = routes.split(f'@app.api_route("{route}"', 1)[1].split("async def", 1)[0]
    assert "@auth_level(AuthLevel.ADMIN_OPTIONAL)" in block
    assert route in standin._ADMIN_OPTIONAL_ROUTES


def test_the_admin_key_flag_is_passed_only_to_releases_that_have_it():
    assert sglang_flags.server_flag("0.5.7", "admin_api_key") is None
    assert sglang_flags.server_flag("0.5.8", "admin_api_key") == "--admin-api-key"
    assert inventory_values.key_problem("k", SECRET) is None
