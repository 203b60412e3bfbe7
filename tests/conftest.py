"""Shared pytest setup: make the collection importable as ansible_collections.llmops.sglang.

The repository root holds a checked-in symlink ansible_collections/llmops/sglang -> ../.., so putting the root on
sys.path lets tests import plugins exactly as Ansible does (ansible_collections.llmops.sglang.plugins...).
"""

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _interrupted(signum, frame):
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config):
    # make test's concurrent streams (scripts/test-streams) end a stream with SIGTERM when they are interrupted (a
    # stream runs in its own session, so Ctrl-C does not reach it): as KeyboardInterrupt, pytest still runs the
    # finalizers that power off the nodes this session booted.
    import signal

    signal.signal(signal.SIGTERM, _interrupted)
    # The sglang_progress callback writes its reports to the user's state directory (~/.local/state) by default; the
    # plays of the tests write theirs under this session's temporary directory instead, unless the caller chose one.
    if "SGLANG_REPORT_DIR" not in os.environ:
        os.environ["SGLANG_REPORT_DIR"] = tempfile.mkdtemp(prefix="llmops-test-reports-")
