"""The node tests' ssh (tests/node_ssh.py) tries again only when ssh itself did not reach the node.

A fake `ssh` first on PATH plays both cases: for the first N calls it does what OpenSSH does when it cannot reach a
node (its words in the -E log file, as measured with the real client against a closed port and a silent listener on
loopback: "ssh: connect to host 127.0.0.1 port 1: Connection refused", "Connection timed out during banner
exchange"; exit 255), then it runs the command. Nothing here touches a network.
"""

from __future__ import annotations

import os
import stat

import pytest
from node_ssh import ssh_run

FAKE = """#!/bin/bash
n=$(($(cat "$COUNT" 2>/dev/null || echo 0) + 1)); echo "$n" >"$COUNT"
[ "$1" = -E ] || exit 2
if [ "$n" -le "$FAILS" ]; then echo "$FAILURE" >"$2"; exit 255; fi
eval "${@: -1}"
"""


@pytest.fixture
def fake_ssh(tmp_path, monkeypatch):
    (tmp_path / "ssh").write_text(FAKE)
    (tmp_path / "ssh").chmod(stat.S_IRWXU)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("COUNT", str(tmp_path / "count"))
    monkeypatch.setattr("node_ssh.time.sleep", lambda s: None)

    def calls() -> int:
        return int((tmp_path / "count").read_text())

    return calls


def test_a_banner_exchange_that_timed_out_is_tried_again_and_the_command_runs_once(fake_ssh, monkeypatch, capsys):
    monkeypatch.setenv("FAILS", "1")
    monkeypatch.setenv("FAILURE", "Connection timed out during banner exchange")
    p = ssh_run("key", "10.213.0.111", "echo ran", text=True)
    assert (p.returncode, p.stdout, fake_ssh()) == (0, "ran\n", 2)
    assert "attempt 1 of 3" in capsys.readouterr().out


def test_a_node_that_never_answers_fails_after_the_attempts_naming_the_node_and_ssh_words(fake_ssh, monkeypatch):
    monkeypatch.setenv("FAILS", "99")
    monkeypatch.setenv("FAILURE", "ssh: connect to host 10.213.0.111 port 22: Connection refused")
    with pytest.raises(AssertionError, match=r"`true` on rr1 \(10\.213\.0\.111\) exited 255: .*Connection refused"):
        ssh_run("key", "10.213.0.111", "true", name="rr1")
    assert fake_ssh() == 3


def test_a_command_that_ran_and_failed_is_not_run_again(fake_ssh, monkeypatch):
    monkeypatch.setenv("FAILS", "0")
    monkeypatch.setenv("FAILURE", "")
    p = ssh_run("key", "10.213.0.111", "echo 'Connection refused' >&2; exit 255", check=False, text=True)
    assert (p.returncode, fake_ssh()) == (255, 1)  # exit 255 and ssh-like words, but from the command: once
