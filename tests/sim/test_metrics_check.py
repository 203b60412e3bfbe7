"""The server role's metrics check against the stand-in's /metrics: it passes with SGLang's real names and fails,
with a one-line message naming what is missing, when a name is wrong or the metrics are off."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
import zipfile
from pathlib import Path

import pytest
import yaml
from real_releases import wheel as release_wheel

ROOT = Path(__file__).resolve().parents[2]
DEFAULTS = yaml.safe_load((ROOT / "roles" / "server" / "defaults" / "main.yml").read_text())
READY = "The server is fired up and ready to roll!"


def run_check(tmp_path: Path, port: int, expected: list[str] | None = None) -> subprocess.CompletedProcess:
    play = [
        {
            "name": "Check the metrics of a running SGLang",
            "hosts": "localhost",
            "gather_facts": False,
            "tasks": [
                {
                    "name": "Run the server role's metrics check",
                    "ansible.builtin.include_role": {"name": "llmops.sglang.server", "tasks_from": "metrics"},
                }
            ],
        }
    ]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    extra = {
        "llmops_server_port": port,
        "llmops_server_host": "127.0.0.1",
        "ansible_python_interpreter": sys.executable,
    }
    if expected is not None:
        extra["server_metrics_expected"] = expected
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_COLLECTIONS_PATH=str(ROOT))
    env.update(SGLANG_REPORT_DIR="", no_proxy="*")
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "ansible-playbook"),
            "-i",
            "localhost,",
            "-c",
            "local",
            str(tmp_path / "play.yml"),
            "-e",
            json.dumps(extra),
        ],
        cwd=ROOT,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def ready_server(launch, models):
    s = launch(["--model-path", str(models["llama3-8b"]), "--enable-metrics", "--served-model-name", "llama-3-8b"])
    assert s.wait_for(READY), s.log
    return s


def test_metrics_check_passes_on_the_standin_with_sglang_names(tmp_path, ready_server):
    res = run_check(tmp_path, ready_server.port)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "failed=0" in res.stdout


def test_metrics_check_fails_and_names_a_wrong_metric(tmp_path, ready_server):
    wrong = DEFAULTS["server_metrics_expected"] + ["sglang:num_running_requests"]
    res = run_check(tmp_path, ready_server.port, wrong)
    assert res.returncode != 0
    out = res.stdout + res.stderr
    assert "found no sglang:num_running_requests among 19 sglang: samples (" in out, out
    assert "Traceback" not in out


def test_metrics_check_fails_when_metrics_are_off(tmp_path, launch, models):
    s = launch(["--model-path", str(models["llama3-8b"])])
    assert s.wait_for(READY), s.log
    res = run_check(tmp_path, s.port)
    assert res.returncode != 0
    assert "found HTTP 404" in res.stdout + res.stderr


def _real_collector() -> str:
    with zipfile.ZipFile(release_wheel("0.5.9")) as z:
        return z.read("sglang/srt/metrics/collector.py").decode()


def test_expected_names_are_sglang_059_metrics(ready_server):
    """Every default expected sample is a metric the real release defines, and the stand-in emits them all."""
    src = _real_collector()
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://127.0.0.1:{ready_server.port}/metrics", timeout=10) as r:
        body = r.read().decode()
    samples = {line.split("{")[0].split(" ")[0] for line in body.splitlines() if line and not line.startswith("#")}
    for name in DEFAULTS["server_metrics_expected"]:
        family = name[: -len("_count")] if name.endswith("_count") else name
        assert f'name="{family}"' in src, f"{family} is not defined in sglang 0.5.9's collector.py"
        assert name in samples, f"the stand-in does not emit {name}"
    for line in body.splitlines():
        if line.startswith("# TYPE "):
            family = line.split()[2]
            assert f'name="{family}"' in src or f'name="{family}_total"' in src, family
