"""plugins/module_utils/hf_lock.py: the lock of one commit's download on shared storage. Time comes from an injected
clock and from the lock file's modification time set by the test, never from waiting."""

import json
import os
import time

from ansible_collections.llmops.sglang.plugins.module_utils import hf_lock
from ansible_collections.llmops.sglang.plugins.module_utils.hf_lock import OWNER, SharedLock, lock_path, read_owner

COMMIT = "c" * 40


def later(seconds):
    return lambda: time.time() + seconds


def age_lock(root, seconds):
    """Set the holder's heartbeat ``seconds`` into the past (what a killed holder leaves)."""
    path = os.path.join(lock_path(root, COMMIT), OWNER)
    t = time.time() - seconds
    os.utime(path, (t, t))


def test_one_host_holds_the_lock_the_others_see_it_and_its_calls_keep_it(tmp_path):
    a = SharedLock(tmp_path, COMMIT, "gpu01")
    assert a.acquire() is None
    holder = SharedLock(tmp_path, COMMIT, "gpu02").acquire()
    assert holder["owner"] == "gpu01" and 0 <= holder["age"] < 300
    assert SharedLock(tmp_path, COMMIT, "gpu01").acquire() is None  # gpu01's next call of its loop
    assert json.loads((tmp_path / (".llmops-lock-" + COMMIT) / OWNER).read_text())["owner"] == "gpu01"


def test_a_release_lets_the_next_host_take_it_and_only_the_holder_releases(tmp_path):
    a, b = SharedLock(tmp_path, COMMIT, "gpu01"), SharedLock(tmp_path, COMMIT, "gpu02")
    assert a.acquire() is None and b.acquire() is not None
    b.release()  # not the holder: nothing happens
    assert read_owner(lock_path(tmp_path, COMMIT))[0]["owner"] == "gpu01"
    a.release()
    assert read_owner(lock_path(tmp_path, COMMIT)) == (None, None)
    assert b.acquire() is None


def test_a_stale_lock_is_taken_over_and_a_fresh_one_never(tmp_path):
    assert SharedLock(tmp_path, COMMIT, "gpu01").acquire() is None
    age_lock(tmp_path, 299)
    assert SharedLock(tmp_path, COMMIT, "gpu02").acquire()["owner"] == "gpu01"  # not yet stale
    age_lock(tmp_path, 301)
    assert SharedLock(tmp_path, COMMIT, "gpu02").acquire() is None
    assert read_owner(lock_path(tmp_path, COMMIT))[0]["owner"] == "gpu02"
    assert [p.name for p in tmp_path.iterdir()] == [".llmops-lock-" + COMMIT]  # the stale one is gone, not left aside


def test_of_two_hosts_that_saw_the_lock_stale_only_one_takes_it_over(tmp_path):
    assert SharedLock(tmp_path, COMMIT, "gpu01").acquire() is None
    age_lock(tmp_path, 1000)
    seen, _ = read_owner(lock_path(tmp_path, COMMIT))
    b, c = SharedLock(tmp_path, COMMIT, "gpu02"), SharedLock(tmp_path, COMMIT, "gpu03")
    assert b._take_over(seen) is True  # gpu02 first
    assert c._take_over(seen) is False  # gpu03 moved gpu02's fresh lock aside, saw it, and put it back
    assert read_owner(lock_path(tmp_path, COMMIT))[0]["owner"] == "gpu02"
    assert c.acquire()["owner"] == "gpu02"
    assert [p.name for p in tmp_path.iterdir()] == [".llmops-lock-" + COMMIT]


def test_a_lock_without_its_owner_file_ages_by_its_directory(tmp_path):
    os.mkdir(lock_path(tmp_path, COMMIT))  # a holder killed between mkdir and its owner file
    holder = SharedLock(tmp_path, COMMIT, "gpu02").acquire()
    assert holder["age"] < 300 and "owner" not in holder
    assert SharedLock(tmp_path, COMMIT, "gpu02", clock=later(301)).acquire() is None


def test_an_unreadable_owner_file_is_a_holder_without_a_name(tmp_path):
    os.mkdir(lock_path(tmp_path, COMMIT))
    (tmp_path / (".llmops-lock-" + COMMIT) / OWNER).write_text("{not json")
    assert SharedLock(tmp_path, COMMIT, "gpu02").acquire().get("owner") is None


def test_the_heartbeat_is_refreshed_at_most_every_given_seconds(tmp_path):
    now = [time.time()]
    a = SharedLock(tmp_path, COMMIT, "gpu01", clock=lambda: now[0])
    assert a.acquire() is None
    age_lock(tmp_path, 100)
    a.beat(every=10)  # the first beat of this process: refreshed
    assert SharedLock(tmp_path, COMMIT, "gpu02").acquire()["age"] < 100
    age_lock(tmp_path, 100)
    now[0] += 5
    a.beat(every=10)  # 5 s after the last one: left as it is
    assert SharedLock(tmp_path, COMMIT, "gpu02").acquire()["age"] >= 99
    now[0] += 6
    a.beat(every=10)
    assert SharedLock(tmp_path, COMMIT, "gpu02").acquire()["age"] < 99


def test_the_lock_appears_with_its_holders_name_already_in_it(tmp_path, monkeypatch):
    """No host can see the lock without owner.json (it would report "another host" as the holder): the lock's name
    appears only by the rename of a directory that already holds the record."""
    seen = []
    real_rename = os.rename

    def rename(src, dst):
        seen.append(os.path.exists(os.path.join(src, OWNER)) and not os.path.exists(dst))
        return real_rename(src, dst)

    monkeypatch.setattr(hf_lock.os, "rename", rename)
    assert SharedLock(tmp_path, COMMIT, "gpu01").acquire() is None
    assert seen == [True]
    assert sorted(p.name for p in tmp_path.iterdir()) == [".llmops-lock-" + COMMIT]


def test_a_host_that_loses_the_race_for_the_lock_leaves_nothing_and_waits(tmp_path, monkeypatch):
    assert SharedLock(tmp_path, COMMIT, "gpu01").acquire() is None
    # gpu02 looked before gpu01's lock appeared: its own directory's rename onto the lock fails
    monkeypatch.setattr(hf_lock.os.path, "lexists", lambda p: False)
    assert SharedLock(tmp_path, COMMIT, "gpu02")._make() is False
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == [".llmops-lock-" + COMMIT]
    assert read_owner(lock_path(tmp_path, COMMIT))[0]["owner"] == "gpu01"
