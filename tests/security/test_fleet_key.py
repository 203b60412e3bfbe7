"""Keys the controller keeps for the fleet (plugins/module_utils/private_files.py fleet_key, the lookup
llmops.sglang.fleet_key): generated once, 0600 from their creation in a 0700 directory, never handed out twice
different, never read from a planted file."""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils import private_files
from ansible_collections.llmops.sglang.plugins.module_utils.private_files import fleet_key


def mode(path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_a_new_key_is_40_letters_and_digits_in_a_0600_file_of_a_new_0700_directory(tmp_path):
    d = tmp_path / "inv" / "credentials"
    key = fleet_key(str(d), "router-api-key")
    assert re.fullmatch(r"[A-Za-z0-9]{40}", key)
    assert (d / "router-api-key.txt").read_text() == key + "\n"
    assert (mode(d), mode(d / "router-api-key.txt")) == (0o700, 0o600)
    assert fleet_key(str(d), "router-api-key") == key  # kept: the same key at every later run
    assert sorted(p.name for p in d.iterdir()) == ["router-api-key.txt"]  # no temporary file left


def test_the_key_file_is_whole_and_0600_before_it_has_its_name(tmp_path, monkeypatch):
    seen = []
    real_link = os.link

    def link(src, dst, *, src_dir_fd=None, dst_dir_fd=None, follow_symlinks=True):
        st = os.stat(src, dir_fd=src_dir_fd, follow_symlinks=False)
        with os.fdopen(os.open(src, os.O_RDONLY, dir_fd=src_dir_fd)) as fh:
            seen.append((stat.S_IMODE(st.st_mode), fh.read()))
        return real_link(src, dst, src_dir_fd=src_dir_fd, dst_dir_fd=dst_dir_fd, follow_symlinks=follow_symlinks)

    monkeypatch.setattr(private_files.os, "link", link)
    old = os.umask(0)  # the widest umask: only the code's own mode keeps the file private
    try:
        key = fleet_key(str(tmp_path / "c"), "k")
    finally:
        os.umask(old)
    assert seen == [(0o600, key + "\n")]


def test_an_existing_directory_and_key_open_to_others_are_closed_and_the_key_kept(tmp_path):
    d = tmp_path / "credentials"
    d.mkdir()
    d.chmod(0o755)
    (d / "k.txt").write_text(
        "abcdefghijABCDEFGHIJ0123456789abcdefghij salt=xyz\n"
    )  # as ansible.builtin.password writes
    (d / "k.txt").chmod(0o644)
    assert fleet_key(str(d), "k") == "abcdefghijABCDEFGHIJ0123456789abcdefghij"
    assert (mode(d), mode(d / "k.txt")) == (0o700, 0o600)


@pytest.mark.parametrize("planted", ["symlink to a file", "symlink to a directory", "fifo"])
def test_a_planted_key_file_is_refused_and_not_followed(tmp_path, planted):
    d = tmp_path / "credentials"
    d.mkdir(mode=0o700)
    target = tmp_path / "elsewhere"
    if planted == "symlink to a file":
        target.write_text("attacker-chosen-key-0123456789abcdefghij\n")
        (d / "k.txt").symlink_to(target)
    elif planted == "symlink to a directory":
        target.mkdir()
        (d / "k.txt").symlink_to(target)
    else:
        os.mkfifo(d / "k.txt")
    with pytest.raises(OSError):
        fleet_key(str(d), "k")


def test_a_symlink_in_place_of_the_directory_is_refused(tmp_path):
    real = tmp_path / "real"
    real.mkdir(mode=0o755)
    (tmp_path / "credentials").symlink_to(real)
    with pytest.raises(OSError):
        fleet_key(str(tmp_path / "credentials"), "k")
    assert list(real.iterdir()) == [] and mode(real) == 0o755


@pytest.mark.parametrize("name", ["", ".", "..", "a/b"])
def test_a_name_with_a_directory_part_is_refused(tmp_path, name):
    with pytest.raises(ValueError):
        fleet_key(str(tmp_path), name)


def test_an_empty_key_file_is_refused_in_one_sentence(tmp_path):
    (tmp_path / "k.txt").write_text("")
    with pytest.raises(ValueError, match="is empty: remove it"):
        fleet_key(str(tmp_path), "k")


def _generate(directory, barrier, out):
    barrier.wait(timeout=60)
    out.put(fleet_key(directory, "replica-r1-api-key"))


def test_processes_generating_the_same_key_at_once_all_get_the_one_kept(tmp_path):
    n = 6
    ctx = multiprocessing.get_context("fork")
    barrier, out = ctx.Barrier(n), ctx.Queue()
    procs = [ctx.Process(target=_generate, args=(str(tmp_path / "c"), barrier, out)) for _ in range(n)]
    for p in procs:
        p.start()
    keys = [out.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    assert [p.exitcode for p in procs] == [0] * n
    assert len(set(keys)) == 1
    assert (tmp_path / "c" / "replica-r1-api-key.txt").read_text().split() == [keys[0]]


def test_a_key_file_of_an_earlier_release_is_renamed_and_kept(tmp_path):
    (tmp_path / "router-api-key").write_text("Old0" + "o" * 36 + "\n")
    assert fleet_key(str(tmp_path), "router-api-key", create=False) == "Old0" + "o" * 36
    assert sorted(p.name for p in tmp_path.iterdir()) == ["router-api-key.txt"]
    assert fleet_key(str(tmp_path), "router-admin-key", create=False) == ""  # asked, not generated
    assert sorted(p.name for p in tmp_path.iterdir()) == ["router-api-key.txt"]


def test_keys_in_an_inventory_directory_are_not_read_as_hosts(tmp_path):
    # The default credentials directory is INVENTORY/credentials, and ansible-playbook -i INVENTORY reads every file
    # of an inventory directory (subdirectories included) as an inventory source: a key file without .txt became a
    # host named by the key, which a play on "all" then tried to reach (its name in DNS lookups and in the output).
    inv = tmp_path / "inventory"
    inv.mkdir()
    (inv / "hosts.yml").write_text("all:\n  hosts:\n    g1: {}\n")
    key = fleet_key(str(inv / "credentials"), "router-api-key")
    out = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-inventory")), "-i", str(inv), "--list"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout  # fmt: skip
    assert key not in out and json.loads(out)["_meta"]["hostvars"].keys() <= {"g1"}
    assert "g1" in out
