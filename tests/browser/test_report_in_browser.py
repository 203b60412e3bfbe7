"""The fleet report in a real browser: headless Chromium (Debian's chromium) loads the report of a ready fleet and
of a failed host with no console error and no network request, takes a screenshot, and the DOM shows every host,
every GPU bar and the timeline.

The fixtures are report.json files written by the site.yml callback on a simulated node (tests/fixtures/report/,
see its README); the page is rendered from them by bin/sglang-report, the same code the callback runs.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "report"
sys.path.insert(0, str(ROOT / "scripts"))

import headless_chromium as hc  # noqa: E402

PROBE = """JSON.stringify({
  hosts: [...document.querySelectorAll('section.host')].map(s => ({
    host: s.dataset.host,
    outcome: s.dataset.outcome,
    bars: [...s.querySelectorAll('g.gpu-bar')].map(g => ({
      rank: g.dataset.rank,
      width: [...g.querySelectorAll('rect.seg')].reduce((w, r) => w + r.getBBox().width, 0),
    })),
    timeline: s.querySelectorAll('svg.timeline').length,
    phases: [...s.querySelectorAll('svg.timeline rect.phase')].map(r => r.dataset.phase),
    timelineWidth: s.querySelector('svg.timeline') ? s.querySelector('svg.timeline').getBoundingClientRect().width : 0,
    diagnosis: (s.querySelector('.diagnosis') || {}).textContent || null,
    evidence: (s.querySelector('pre.evidence') || {}).textContent || null,
    logLines: s.querySelector('pre.log') ? s.querySelector('pre.log').textContent.split('\\n').length : 0,
  })),
  scripts: document.scripts.length,
  images: document.images.length,
})"""


@pytest.fixture(scope="module")
def browser():
    if hc.find_chromium() is None:
        pytest.fail("chromium is not installed: make setup installs Debian's chromium package")
    with hc.Browser() as b:
        yield b


def render(tmp_path, fixture):
    out = tmp_path / fixture
    res = subprocess.run(
        [sys.executable, str(ROOT / "bin" / "sglang-report"), "--out", str(out), str(FIXTURES / f"{fixture}.json")],
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 0, res.stderr
    return Path(res.stdout.strip()), json.loads((FIXTURES / f"{fixture}.json").read_text())


def load(browser, page, tmp_path):
    shot = tmp_path / (page.parent.name + ".png")
    result = browser.load(page, probe=PROBE, screenshot=shot)
    assert hc.problems(result) == []
    assert result["requests"] == [page.resolve().as_uri()]  # the page itself, nothing else
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20000
    return json.loads(result["probe"])


def check_hosts(dom, data):
    assert [h["host"] for h in dom["hosts"]] == [h["host"] for h in data["hosts"]]
    for shown, host in zip(dom["hosts"], data["hosts"], strict=False):
        assert shown["outcome"] == host["outcome"]
        assert [b["rank"] for b in shown["bars"]] == [g["rank"] for g in host["gpus"]]
        assert all(b["width"] > 100 for b in shown["bars"])  # drawn, not empty
        assert shown["timeline"] == 1 and shown["timelineWidth"] > 500
        assert shown["phases"] == [p["phase"] for p in host["timeline"]["phases"]]
    assert dom["scripts"] == 0 and dom["images"] == 0


def test_ready_fleet_report_in_chromium(browser, tmp_path):
    page, data = render(tmp_path, "ready")
    dom = load(browser, page, tmp_path)
    check_hosts(dom, data)
    assert {h["outcome"] for h in dom["hosts"]} == {"ready"}
    assert len(dom["hosts"][0]["bars"]) == 8 and "cuda_graph_capturing" in dom["hosts"][0]["phases"]


def test_failed_host_report_in_chromium(browser, tmp_path):
    page, data = render(tmp_path, "failed")
    dom = load(browser, page, tmp_path)
    check_hosts(dom, data)
    failed = [
        (shown, host) for shown, host in zip(dom["hosts"], data["hosts"], strict=True) if host["outcome"] != "ready"
    ]
    assert failed
    for shown, host in failed:
        assert shown["diagnosis"] == host["diagnosis"] and "CUDA out of memory" in shown["diagnosis"]
        assert shown["evidence"] == host["failure_line"]
        assert shown["logLines"] == len(host["log_excerpt"]) == 30


def test_hostile_log_lines_stay_text_in_chromium(browser, tmp_path):
    from ansible_collections.llmops.sglang.plugins.module_utils import sglang_report as R
    from ansible_collections.llmops.sglang.plugins.module_utils.sglang_report_html import render as render_html

    data = json.loads((FIXTURES / "failed.json").read_text())
    host = data["hosts"][0]
    hostile = [
        "</pre><script>console.error('injected')</script>",
        '"><img src="http://203.0.113.9/x.png" onerror="console.error(1)">',
        "<iframe src=//203.0.113.9/></iframe>",
    ]
    host["log_excerpt"] = host["log_excerpt"][:3] + hostile
    host["diagnosis"] = hostile[0]
    host["host"] = hostile[1]
    page = Path(R.write_report(data, render_html(data), str(tmp_path / "hostile")))
    result = browser.load(page, probe=PROBE)
    assert hc.problems(result) == []
    dom = json.loads(result["probe"])
    assert dom["scripts"] == 0 and dom["images"] == 0 and dom["hosts"][0]["host"] == hostile[1]


def test_the_browser_check_sees_requests_and_console_errors(browser, tmp_path):
    """The checks above can fail: a page that fetches and logs an error is caught."""
    page = tmp_path / "bad.html"
    page.write_text(
        "<!DOCTYPE html><html><body><img src='http://127.0.0.1:9/x.png'>"
        "<script>console.error('boom')</script></body></html>"
    )
    found = hc.problems(browser.load(page))
    assert "console error: boom" in found
    assert "request: http://127.0.0.1:9/x.png" in found
