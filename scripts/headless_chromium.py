#!/usr/bin/env python3
"""Load a local HTML file in headless Chromium and report what happened: console errors, network requests, a DOM
probe and a screenshot.

Chromium is driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``: JSON messages separated by
NUL bytes on file descriptors 3 and 4), with nothing but the standard library: no chromedriver, no websocket client,
no port. Used by the report's browser test and by ``make report-screenshot``.

    scripts/headless_chromium.py PAGE.html --screenshot OUT.png [--probe JS] [--width 1280]
prints a JSON object {console, exceptions, log, requests, probe, screenshot} and exits 0, or 1 on a console error,
exception or a request to anything but the page itself.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# What a root process in a container needs to start headless Chromium without talking to anything.
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--mute-audio",
    "--hide-scrollbars",
    "--remote-debugging-pipe",
)


class ChromiumError(RuntimeError):
    pass


def find_chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class Browser:
    """One Chromium process with a fresh profile, driven over the DevTools pipe."""

    def __init__(self, binary=None, timeout=30.0):
        self.binary = binary or find_chromium()
        if not self.binary:
            raise ChromiumError("expected Debian's chromium package (make setup installs it); found no chromium")
        self.timeout = timeout
        self.profile = tempfile.mkdtemp(prefix="llmops-chromium-")
        cmd_r, self._cmd_w = os.pipe()
        self._res_r, res_w = os.pipe()
        self._stderr = tempfile.TemporaryFile()

        def wire():  # in the child: fd 3 reads our commands, fd 4 carries Chromium's answers
            high_r, high_w = os.dup(cmd_r), os.dup(res_w)  # cmd_r or res_w may themselves be 3 or 4
            os.dup2(high_r, 3)
            os.dup2(high_w, 4)

        self.proc = subprocess.Popen(
            [self.binary, *FLAGS, "--user-data-dir=" + self.profile, "about:blank"],
            pass_fds=(3, 4),
            preexec_fn=wire,  # noqa: PLW1509 - no threads here; the child must put the pipe ends on fds 3 and 4
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
        )
        os.close(cmd_r)
        os.close(res_w)
        self._buf = b""
        self._id = 0
        self.events = []

    def close(self):
        try:
            self.send("Browser.close", timeout=5)
        except (ChromiumError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for fd in (self._cmd_w, self._res_r):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _read_message(self, deadline):
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._res_r], [], [], max(0.0, left))
            if not ready:
                return None
            chunk = os.read(self._res_r, 1 << 20)
            if not chunk:
                self._stderr.seek(0)
                tail = self._stderr.read().decode("utf-8", "replace").strip().splitlines()[-3:]
                raise ChromiumError("chromium exited ({}): {}".format(self.proc.poll(), " | ".join(tail)))
            self._buf += chunk
        raw, self._buf = self._buf.split(b"\0", 1)
        return json.loads(raw)

    def send(self, method, params=None, session=None, timeout=None):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self._cmd_w, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + (timeout or self.timeout)
        while True:
            reply = self._read_message(deadline)
            if reply is None:
                raise ChromiumError(f"no answer to {method} within {timeout or self.timeout} s")
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise ChromiumError("{} failed: {}".format(method, reply["error"].get("message")))
                return reply.get("result") or {}
            self.events.append(reply)

    def wait_event(self, method, session, timeout=None):
        deadline = time.monotonic() + (timeout or self.timeout)
        for ev in self.events:
            if ev.get("method") == method and ev.get("sessionId") == session:
                return ev
        while True:
            ev = self._read_message(deadline)
            if ev is None:
                raise ChromiumError(f"no {method} within {timeout or self.timeout} s")
            self.events.append(ev)
            if ev.get("method") == method and ev.get("sessionId") == session:
                return ev

    def drain(self, seconds):
        deadline = time.monotonic() + seconds
        while True:
            ev = self._read_message(deadline)
            if ev is None:
                return
            self.events.append(ev)

    def load(self, page, probe=None, screenshot=None, width=1280, settle=0.5):
        """Open ``page`` (a local file) in a new tab; return what the page did (see the module docstring)."""
        url = Path(page).resolve().as_uri()
        target = self.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = self.send("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log", "Network"):
            self.send(domain + ".enable", session=session)
        self.send(
            "Emulation.setDeviceMetricsOverride",
            {"width": width, "height": 900, "deviceScaleFactor": 1, "mobile": False},
            session=session,
        )
        self.events = [ev for ev in self.events if ev.get("sessionId") != session]
        self.send("Page.navigate", {"url": url}, session=session)
        self.wait_event("Page.loadEventFired", session)
        self.drain(settle)
        out = {"url": url, "console": [], "exceptions": [], "log": [], "requests": [], "probe": None}
        for ev in self.events:
            if ev.get("sessionId") != session:
                continue
            m, p = ev.get("method"), ev.get("params") or {}
            if m == "Runtime.consoleAPICalled":
                text = " ".join(str(a.get("value", a.get("description", ""))) for a in p.get("args", []))
                out["console"].append({"type": p.get("type"), "text": text})
            elif m == "Runtime.exceptionThrown":
                out["exceptions"].append((p.get("exceptionDetails") or {}).get("text"))
            elif m == "Log.entryAdded":
                entry = p.get("entry") or {}
                out["log"].append(
                    {"level": entry.get("level"), "source": entry.get("source"), "text": entry.get("text")}
                )
            elif m == "Network.requestWillBeSent":
                out["requests"].append((p.get("request") or {}).get("url"))
        if probe:
            res = self.send("Runtime.evaluate", {"expression": probe, "returnByValue": True}, session=session)
            if "exceptionDetails" in res:
                details = res["exceptionDetails"]
                why = (details.get("exception") or {}).get("description") or details.get("text")
                raise ChromiumError(f"the DOM probe failed: {why}")
            out["probe"] = (res.get("result") or {}).get("value")
        if screenshot:
            metrics = self.send("Page.getLayoutMetrics", session=session)
            size = metrics.get("cssContentSize") or metrics.get("contentSize")
            shot = self.send(
                "Page.captureScreenshot",
                {
                    "format": "png",
                    "captureBeyondViewport": True,
                    "clip": {"x": 0, "y": 0, "width": width, "height": min(size["height"], 16000), "scale": 1},
                },
                session=session,
            )
            Path(screenshot).write_bytes(base64.b64decode(shot["data"]))
            out["screenshot"] = str(screenshot)
        self.send("Target.closeTarget", {"targetId": target})
        return out


def problems(result):
    """Console errors, exceptions, error-level log entries and requests to anything but the page itself."""
    found = []
    found += [
        "console {}: {}".format(c["type"], c["text"]) for c in result["console"] if c["type"] in ("error", "assert")
    ]
    found += [f"exception: {e}" for e in result["exceptions"]]
    found += [
        "log {} ({}): {}".format(e["level"], e["source"], e["text"]) for e in result["log"] if e["level"] == "error"
    ]
    found += [f"request: {u}" for u in result["requests"] if u != result["url"]]
    return found


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("page")
    ap.add_argument("--screenshot")
    ap.add_argument("--probe", help="a JavaScript expression evaluated in the page once loaded (its JSON value)")
    ap.add_argument("--width", type=int, default=1280)
    args = ap.parse_args(argv)
    if not Path(args.page).is_file():
        print(f"headless_chromium: expected an HTML file; found no file {args.page}", file=sys.stderr)
        return 2
    try:
        with Browser() as browser:
            result = browser.load(args.page, probe=args.probe, screenshot=args.screenshot, width=args.width)
    except ChromiumError as exc:
        print(f"headless_chromium: {exc}", file=sys.stderr)
        return 2
    result["problems"] = problems(result)
    print(json.dumps(result, indent=2))
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
