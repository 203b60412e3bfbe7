"""Helpers for the node-level integration tests (shared by conftest.py and the test modules)."""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from node_ssh import SIM_SSH_VARS, ssh_run

ROOT = Path(__file__).resolve().parents[2]
SIM_NODE = ROOT / "sim" / "node"
SIM_SGLANG = ROOT / "sim" / "sglang"
MAKE_MODEL = ROOT / "sim" / "models" / "make_model.py"
SM120_PATCH = SIM_SGLANG / "patches" / "0001-sm120-extend-attention-block-size.patch"
CALLBACKS = Path(__file__).resolve().parent / "callback_plugins"
VENV_BIN = ROOT / ".venv" / "bin"

NODE_NAME = os.environ.get("IT_NODE_NAME", "it1")
NODE_IP = os.environ.get("IT_NODE_IP", "10.213.0.31")
UNIT = "sglang.service"
LOG = "/var/log/sglang/server.log"
MODEL = "/opt/models/glm5"
SRC_FIXED = "/opt/sglang-src"
SRC_NOFIX = "/opt/sglang-src-nofix"
PORT = 30000
TIME_SCALE = "0.2"
# the reference story's launch that worked: 0.88 with --max-running-requests 64
BASE_ARGS = [
    "--model-path", MODEL, "--tp", "8", "--mem-fraction-static", "0.88", "--max-running-requests", "64",
    "--host", "0.0.0.0",
]  # fmt: skip

BASE_UNIT = f"""[Unit]
Description=SGLang server (llmops.sglang integration test, stand-in)
After=network-online.target

[Service]
Type=simple
Environment=PYTHONPATH={SRC_FIXED}
Environment=SGLANG_SIM_TIME_SCALE={TIME_SCALE}
Environment=SGLANG_LOG_MS=1
Environment=PYTHONUNBUFFERED=1
ExecStart=/usr/bin/python3 -m sglang.launch_server {" ".join(BASE_ARGS)} --port {PORT}
StandardOutput=append:{LOG}
StandardError=inherit
Restart=no
TimeoutStopSec=10

[Install]
WantedBy=multi-user.target
"""

# Rows of the (case, outcome, seconds from event to failure) table printed at the end of the session.
FIGURES: list[tuple[str, str, str, str, str]] = []


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "node tests need root (network namespaces, mounts, systemd-nspawn)"
    if shutil.which("systemd-nspawn") is None:
        return "node tests need systemd-nspawn (apt-get install systemd-container)"
    if not re.fullmatch(r"it[a-z0-9-]{0,10}", NODE_NAME):
        return f"IT_NODE_NAME={NODE_NAME!r}: integration nodes must be named it*"
    if not re.fullmatch(r"10\.213\.0\.3[1-9]", NODE_IP):
        return f"IT_NODE_IP={NODE_IP!r}: integration nodes use 10.213.0.31-39"
    return None


def sim_node(*args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SIM_NODE), *args], capture_output=True, text=True, check=check, timeout=timeout, stdin=subprocess.DEVNULL
    )


def nvidia_packages(name: str) -> dict[str, tuple[str, str, bool]]:
    """{package: (source package, version, held)} of the packages installed on node ``name`` that are built from an
    NVIDIA source package (dpkg-query and dpkg --get-selections)."""
    out = sim_node("ssh", name, "dpkg-query -W -f='${Package} ${source:Package} ${Version} ${db:Status-Abbrev}\\n'")
    selections = (line.split() for line in sim_node("ssh", name, "dpkg --get-selections").stdout.splitlines())
    held = {s[0].split(":")[0] for s in selections if len(s) == 2 and s[1] == "hold"}
    rows = [line.split() for line in out.stdout.splitlines()]
    return {r[0]: (r[1], r[2], r[0] in held) for r in rows if len(r) >= 4 and r[3][1:2] == "i" and "nvidia" in r[1]}


def ssh_key() -> str:
    """The private key every simulated node accepts for root."""
    return sim_node("ssh-key").stdout.strip()


@contextlib.contextmanager
def booted_nodes(
    nodes: dict[str, tuple[str, ...]], *, driver: str = "580.95.05", mirrors: bool = False, bind: str = ""
):
    """Boot simulated nodes ({name: (ip, GPU profile)}, or (ip, profile, os) for another operating system's identity,
    sim/os/README.md) for a test module and power off exactly those nodes afterwards, also on failure. ``bind``
    (HOSTDIR:NODEDIR): a host directory every one of these nodes mounts, as a shared file system.

    A node of ours left by an interrupted run is powered off first (it would keep its old state). ``mirrors``: serve
    the local mirrors on the bridge first. The teardown is never --all: other engineers' nodes stay up (and under
    make test's other stream, `sim/node hold` keeps the mirrors up).
    """
    for name in nodes:
        sim_node("down", name, check=False)
    try:
        if mirrors:
            sim_node("mirrors", "up", timeout=900)
        for name, (ip, profile, *os_name) in nodes.items():
            extra = (("--os", os_name[0]) if os_name else ()) + (("--bind", bind) if bind else ())
            up = sim_node("up", name, ip, "--profile", profile, "--driver", driver, *extra, check=False, timeout=600)
            assert up.returncode == 0, f"sim/node up {name} {ip} failed:\n{up.stderr}"
        yield
    finally:
        for name in nodes:
            sim_node("down", name, check=False)
        sim_node("teardown", check=False)


def booted(name: str, ip: str, *, profile: str = "rtx-pro-6000-x8", driver: str = "580.95.05", mirrors: bool = False):
    """One node: booted_nodes({name: (ip, profile)})."""
    return booted_nodes({name: (ip, profile)}, driver=driver, mirrors=mirrors)


def fleet_inventory(directory: Path, groups: dict[str, dict], *, sim_group_vars: bool = True) -> Path:
    """``directory``/hosts.yml with the given groups ({group: {"hosts": {name: ip}, "vars": {...}}}) and root over
    SSH with the nodes' key; with ``sim_group_vars`` the simulation inventory's group_vars beside it (the same stage
    variables as make demo and the molecule scenarios). Returns ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    children = {
        group: {
            "hosts": {n: {"ansible_host": ip} for n, ip in g["hosts"].items()},
            **({"vars": g["vars"]} if g.get("vars") else {}),
        }
        for group, g in groups.items()
    }
    common = {"ansible_user": "root", "ansible_ssh_private_key_file": ssh_key(), **SIM_SSH_VARS}
    common["ansible_python_interpreter"] = "/usr/bin/python3"
    (directory / "hosts.yml").write_text(json.dumps({"all": {"vars": common, "children": children}}, indent=1))
    if sim_group_vars:
        (directory / "group_vars").symlink_to(ROOT / "inventories" / "sim" / "group_vars")
    return directory


def one_host_inventory(directory: Path, name: str, ip: str) -> Path:
    """fleet_inventory with one node in gpu_servers."""
    return fleet_inventory(directory, {"gpu_servers": {"hosts": {name: ip}}})


def stage_env() -> dict[str, str]:
    """The environment for ansible-playbook of the stage tests: this checkout's ansible.cfg and venv, no colour."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    env["PATH"] = f"{VENV_BIN}:{env.get('PATH', '')}"
    return env


def guarded_run(cmd: list[str], *, nodes=(), timeout: float, **kw) -> subprocess.CompletedProcess:
    """``subprocess.run(cmd, capture_output=True, text=True, **kw)`` whose hang guard keeps the evidence: past
    ``timeout`` the command's process group is killed and the AssertionError carries what it printed until then and
    each node's processes (what the run was waiting on), instead of a bare TimeoutExpired."""
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True, **kw
    )  # fmt: skip
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        seen = {
            node.name: node.sh("ps -eo pid,etimes,stat,args --sort=start_time | tail -40", check=False, timeout=30)
            for node in nodes
        }
        os.killpg(proc.pid, 9)
        out, err = proc.communicate()
        raise AssertionError(
            f"{shlex.join(map(str, cmd[:3]))} ... ran past its hang guard of {timeout:.0f} s; its output's tail:\n"
            + out[-6000:] + err[-2000:]
            + "".join(f"\n--- processes on {name}:\n{ps}" for name, ps in seen.items())
        ) from None  # fmt: skip
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


class Node:
    """A booted simulated node: ssh helpers and the sglang.service set-up."""

    def __init__(self, name: str, ip: str, key: str, control_dir: Path):
        self.name, self.ip, self.key = name, ip, key
        # one connection per node for the session's commands (ControlMaster), as ansible keeps its own
        self.ssh_opts = ("-o", "ControlMaster=auto", "-o", f"ControlPath={control_dir}/%C", "-o", "ControlPersist=120")
        self.control_dir = control_dir
        self.tz_offset = 0.0

    # -- ssh ------------------------------------------------------------------------------------------------------
    def run(self, cmd: str, *, check: bool = True, timeout: float = 60, input: bytes | None = None):
        return ssh_run(
            self.key, self.ip, cmd, check=check, timeout=timeout, input=input, opts=self.ssh_opts, name=self.name
        )

    def sh(self, cmd: str, **kw) -> str:
        return self.run(cmd, **kw).stdout.decode(errors="replace")

    def put_tree(self, src: Path, dst: str) -> None:
        tar = subprocess.run(
            ["tar", "-C", str(src), "--exclude=__pycache__", "-cf", "-", "."], capture_output=True, check=True
        )
        self.run(f"rm -rf {dst} && mkdir -p {dst} && tar -C {dst} -xf -", input=tar.stdout)

    def put_file(self, path: str, text: str) -> None:
        self.run(f"mkdir -p {shlex.quote(os.path.dirname(path))} && cat > {shlex.quote(path)}", input=text.encode())

    def close(self) -> None:
        """Stop the ssh ControlMaster processes of this session: ours and ansible's (ControlPersist=60s)."""
        for sock in sorted(p for p in self.control_dir.rglob("*") if p.is_socket()):
            subprocess.run(
                ["ssh", "-o", f"ControlPath={sock}", "-O", "exit", f"root@{self.ip}"],
                check=False,
                capture_output=True,
                stdin=subprocess.DEVNULL,
                timeout=10,
            )

    # -- the unit -------------------------------------------------------------------------------------------------
    def configure(
        self,
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
        *,
        src: str = SRC_FIXED,
        port: int = PORT,
        service: list[str] | None = None,
    ) -> None:
        """Stop the unit and write the case drop-in: ExecStart with ``args`` (default BASE_ARGS), extra Environment."""
        full = [*(args if args is not None else BASE_ARGS), "--port", str(port)]
        lines = ["[Service]", f"Environment=PYTHONPATH={src}"]
        # SGLANG_SIM_FAULT set (even empty) overrides any fault file on the node
        merged = {"SGLANG_SIM_FAULT": "", **(env or {})}
        lines += [f'Environment="{k}={v}"' for k, v in merged.items()]
        lines += service or []  # further [Service] settings, e.g. StandardOutput=journal
        lines += ["ExecStart=", "ExecStart=/usr/bin/python3 -m sglang.launch_server " + " ".join(full)]
        self.put_file(f"/etc/systemd/system/{UNIT}.d/10-case.conf", "\n".join(lines) + "\n")
        self.run(f"systemctl stop {UNIT}; systemctl reset-failed {UNIT} 2>/dev/null; systemctl daemon-reload")

    def log_size(self) -> int:
        return int(self.sh(f"stat -c %s {LOG} 2>/dev/null || echo 0").strip() or 0)

    def log_since(self, offset: int) -> str:
        return self.sh(f"tail -c +{offset + 1} {LOG} 2>/dev/null || true")

    def unit_state(self) -> dict[str, str]:
        out = self.sh(f"systemctl show {UNIT} -p ActiveState,SubState,ExecMainStatus,MainPID", check=False)
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def epoch_of(self, stamp: str) -> float:
        """Epoch seconds of a log timestamp 'YYYY-mm-dd HH:MM:SS[.mmm]' written in the node's local time."""
        fmt = "%Y-%m-%d %H:%M:%S.%f" if "." in stamp else "%Y-%m-%d %H:%M:%S"
        naive = dt.datetime.strptime(stamp, fmt)
        return naive.replace(tzinfo=dt.timezone(dt.timedelta(seconds=self.tz_offset))).timestamp()


# -- log timestamps -----------------------------------------------------------------------------------------------
_STAMP_RE = re.compile(r"\[(\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d{1,6})?)(?: [A-Z][A-Z_]*\d+)*\]")


def stamped_lines(node: Node, text: str) -> list[tuple[float | None, str]]:
    """(epoch of the line's own timestamp, or of the last stamped line before it for tracebacks; line)."""
    out, last = [], None
    for line in re.split(r"[\r\n]", text):
        if not line.strip():
            continue
        m = _STAMP_RE.search(line)
        if m:
            last = node.epoch_of(m.group(1))
        out.append((last, line))
    return out


def event_time(node: Node, text: str, pattern: str) -> tuple[float, str]:
    """Time of the first line matching ``pattern`` (from the log's millisecond timestamps)."""
    rx = re.compile(pattern)
    for t, line in stamped_lines(node, text):
        if rx.search(line) and t is not None:
            return t, line
    raise AssertionError(f"no line matching {pattern!r} in this launch's log:\n{text[-3000:]}")


def last_line_time(node: Node, text: str) -> float:
    times = [t for t, _ in stamped_lines(node, text) if t is not None]
    assert times, "no timestamped line in this launch's log"
    return times[-1]


def decode_resume(token: str) -> dict:
    assert token.startswith("sgl1."), token
    body = token[5:] + "=" * (-len(token[5:]) % 4)
    return json.loads(base64.urlsafe_b64decode(body))


# -- running the module -------------------------------------------------------------------------------------------
@dataclass
class ModuleRun:
    result: dict  # the task result (module return values + the callback's _it_* times)
    stdout: str
    stderr: str
    rc: int
    t0: float  # controller time.time() before / after ansible-playbook
    t1: float

    @property
    def launch(self) -> float:
        return decode_resume(self.result["resume"])["launch"]

    @property
    def offset(self) -> int:
        return int(decode_resume(self.result["resume"]).get("offset") or 0)

    @property
    def decided(self) -> float:
        """When the module ended its wait (epoch): launch time + the elapsed seconds it reported."""
        return self.launch + self.result["elapsed"]


def run_sglang_server(node: Node, tmp_path: Path, params: dict, *, timeout: float = 600) -> ModuleRun:
    """Run llmops.sglang.sglang_server against ``node`` through ansible-playbook; returns the parsed task result."""
    return run_playbook(node, tmp_path, [{"name": "sglang_server", "llmops.sglang.sglang_server": params}], timeout)


def run_playbook(node: Node, tmp_path: Path, tasks: list[dict], timeout: float = 600) -> ModuleRun:
    """Run ``tasks`` on ``node``; returns the result of the last task that produced one for the node."""
    inv = tmp_path / "inventory.ini"
    inv.write_text(
        "[sim]\n"
        f"{node.name} ansible_host={node.ip} ansible_user=root ansible_ssh_private_key_file={node.key} "
        "ansible_python_interpreter=/usr/bin/python3 ansible_host_key_checking=false "
        f"ansible_ssh_timeout={SIM_SSH_VARS['ansible_ssh_timeout']} "
        f"ansible_ssh_retries={SIM_SSH_VARS['ansible_ssh_retries']} "
        f"ansible_ssh_common_args='{SIM_SSH_VARS['ansible_ssh_common_args']}'\n"
    )
    play = [
        {
            "name": "sglang_server integration",
            "hosts": "sim",
            "gather_facts": False,
            "tasks": tasks,
        }
    ]
    pb = tmp_path / "playbook.yml"
    pb.write_text(json.dumps(play, indent=2))  # JSON is YAML
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    env.update(
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_CALLBACK_PLUGINS=str(CALLBACKS),
        ANSIBLE_STDOUT_CALLBACK="it_json",
        # the collection's progress callback must keep stdout valid JSON (it writes to stderr when the stdout
        # callback's name contains "json"). This replaces ansible.cfg's list (ansible.builtin.profile_tasks, which
        # ansible-core 2.19 routes to the uninstalled ansible.posix: it would only warn).
        ANSIBLE_CALLBACKS_ENABLED="llmops.sglang.sglang_progress",
        ANSIBLE_SSH_CONTROL_PATH_DIR=str(node.control_dir / "ansible"),
        PATH=f"{VENV_BIN}:{env.get('PATH', '')}",
    )
    playbook_bin = shutil.which("ansible-playbook", path=env["PATH"]) or "ansible-playbook"
    t0 = time.time()
    p = subprocess.run(
        [playbook_bin, "-i", str(inv), str(pb)],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )
    t1 = time.time()
    try:
        doc = json.loads(p.stdout)
    except ValueError as exc:
        raise AssertionError(
            f"ansible-playbook stdout is not one JSON document ({exc}); rc={p.returncode}\n"
            f"stdout:\n{p.stdout[-3000:]}\nstderr:\n{p.stderr[-3000:]}"
        ) from None
    results = [t["hosts"][node.name] for t in doc["plays"][0]["tasks"] if node.name in t["hosts"]]
    assert results, f"no result for {node.name}: {p.stdout[-2000:]}\n{p.stderr[-2000:]}"
    res = results[-1]
    assert "outcome" in res, f"module did not run: {json.dumps(res)[:2000]}\nstderr:\n{p.stderr[-2000:]}"
    return ModuleRun(res, p.stdout, p.stderr, p.returncode, t0, t1)


def record(case: str, outcome: str, decided: float | None, returned: float | None = None, note: str = "") -> None:
    """A row of the summary table: seconds from the event to the module's decision / to the task result."""

    def fmt(x):
        return "-" if x is None else f"{x:.2f}"

    FIGURES.append((case, outcome, fmt(decided), fmt(returned), note))
