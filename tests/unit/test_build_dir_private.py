"""The build tree is root's alone (plugins/module_utils/host_paths.py private_dir_problem, through path_probe's
private_dirs in roles/preflight/tasks/build_dir.yml, which preflight runs before the first change): root runs
the scripts and installs the wheels it finds there, so no other account may create it first or swap it."""

from __future__ import annotations

import os
import stat
import uuid
from types import SimpleNamespace

import pytest
from _localhost_play import PASSED, run_tasks_from

from ansible_collections.llmops.sglang.plugins.module_utils.host_paths import private_dir_problem

DIR, LINK, FILE = stat.S_IFDIR, stat.S_IFLNK, stat.S_IFREG


def fake_fs(entries: dict[str, tuple[int, int, int]]):
    """lstat over {path: (type, mode, uid)}; every other path is missing."""

    def lstat(path):
        if path not in entries:
            raise FileNotFoundError(path)
        kind, mode, uid = entries[path]
        return SimpleNamespace(st_mode=kind | mode, st_uid=uid)

    return lstat


ROOTFS = {"/": (DIR, 0o755, 0), "/var": (DIR, 0o755, 0), "/var/lib": (DIR, 0o755, 0), "/var/tmp": (DIR, 0o1777, 0),
          "/tmp": (DIR, 0o1777, 0), "/home": (DIR, 0o755, 0), "/home/ann": (DIR, 0o755, 1000)}  # fmt: skip


@pytest.mark.parametrize(
    ("path", "extra", "expected"),
    [
        ("/var/lib/llmops-sglang-build", {}, None),  # the default, not there yet: root creates it
        ("/var/lib/llmops-sglang-build", {"/var/lib/llmops-sglang-build": (DIR, 0o700, 0)}, None),
        ("/var/lib/llmops-sglang-build", {"/var/lib/llmops-sglang-build": (DIR, 0o755, 1000)}, "owned by uid 1000"),
        ("/var/lib/llmops-sglang-build", {"/var/lib/llmops-sglang-build": (LINK, 0o777, 0)}, "is a symlink"),
        ("/var/lib/llmops-sglang-build", {"/var/lib/llmops-sglang-build": (FILE, 0o644, 0)}, "not a directory"),
        (
            "/var/tmp/llmops-sglang-build",
            {},
            "inside /var/tmp, which accounts other than root can write to (mode 1777)",
        ),
        ("/tmp/b/c", {}, "inside /tmp, which"),
        ("/home/ann/build", {}, "inside /home/ann, owned by uid 1000"),
        ("/var/lib/x/y", {"/var/lib/x": (DIR, 0o775, 0)}, "inside /var/lib/x, which accounts other than root"),
        ("build", {}, "not an absolute path"),
    ],
)
def test_who_could_put_a_directory_in_place_of_the_build_tree(path, extra, expected):
    found = private_dir_problem(path, lstat=fake_fs({**ROOTFS, **extra}), realpath=lambda p: p)
    if expected is None:
        assert found is None
    else:
        assert found is not None and expected in found, found


def test_a_symlinked_parent_is_judged_where_it_leads(tmp_path):
    # /var/run -> /run style links above the tree are followed (realpath); the link itself is root's on real hosts
    lstat = fake_fs({**ROOTFS, "/srv": (DIR, 0o755, 0), "/srv/shared": (DIR, 0o777, 0)})
    found = private_dir_problem("/opt/build", lstat=lstat, realpath=lambda p: "/srv/shared" if p == "/opt" else p)
    assert found is not None and "inside /srv/shared" in found


@pytest.mark.skipif(os.geteuid() != 0, reason="the check is about root's build tree: run as root")
def test_preflight_and_the_build_stage_refuse_a_build_tree_under_var_tmp_before_any_change(tmp_path):
    where = f"/var/tmp/llmops-test-{uuid.uuid4().hex[:8]}"
    rc, out = run_tasks_from(tmp_path, "llmops.sglang.preflight", "build_dir", {"llmops_build_dir": where})
    assert rc != 0 and PASSED not in out, out
    assert f"Expected llmops_build_dir ({where}) to be a directory only root can create or change" in out, out
    assert "inside /var/tmp, which accounts other than root can write to (mode 1777)" in out
    assert not os.path.exists(where)


@pytest.mark.skipif(os.geteuid() != 0, reason="the check is about root's build tree: run as root")
def test_the_default_build_tree_passes_the_check(tmp_path):
    rc, out = run_tasks_from(tmp_path, "llmops.sglang.preflight", "build_dir", {})
    assert rc == 0 and PASSED in out, out


# The account the builds run as: refused first, before any task reaches the host (the rule:
# tests/security/test_inventory_injection.py).
@pytest.mark.parametrize("value", ["llmops-build\n", "root", "Build User"])
def test_the_build_account_is_refused_first_in_the_python_env_role(tmp_path, value):
    rc, out = run_tasks_from(tmp_path, "llmops.sglang.python_env", "main", {"python_env_build_user": value})
    assert rc != 0 and PASSED not in out, out[-2000:]
    assert "Expected python_env_build_user to be a system account name other than root" in out, out[-2000:]
    assert "Nothing was changed." in out
