"""plugins/module_utils/private_files.py write_whole and copy_whole, the one way modules write a file whole
(deployment records, build-set markers, benchmark state, bundle manifests and files, modprobe settings): the file has
its final mode from its first byte, a link planted at its name is replaced and never followed, and a failed write
leaves the old file and no temporary file behind."""

from __future__ import annotations

import os

import pytest

from ansible_collections.llmops.sglang.plugins.module_utils.private_files import write_whole


@pytest.mark.parametrize("mode", [0o600, 0o644])
def test_the_file_is_whole_with_its_mode_and_nothing_else_is_left(tmp_path, mode):
    path = tmp_path / "deployment.json"
    write_whole(str(path), '{"a": 1}\n', mode)
    assert path.read_text() == '{"a": 1}\n' and oct(path.stat().st_mode & 0o777) == oct(mode)
    write_whole(str(path), b"\x00bytes", mode)
    assert path.read_bytes() == b"\x00bytes" and sorted(os.listdir(tmp_path)) == ["deployment.json"]


def test_a_link_planted_at_the_name_is_replaced_not_followed(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    path = tmp_path / "server-bench.json"
    path.symlink_to(victim)
    write_whole(str(path), "{}\n", 0o644)
    assert victim.read_text() == "untouched\n" and not path.is_symlink() and path.read_text() == "{}\n"


def test_the_mode_is_set_before_the_first_byte(tmp_path, monkeypatch):
    """What the temporary file's mode is when the text is written: the final one, never the umask's."""
    seen = []
    real_fdopen = os.fdopen

    def fdopen(fd, *args, **kwargs):
        seen.append(os.fstat(fd).st_mode & 0o777)
        return real_fdopen(fd, *args, **kwargs)

    monkeypatch.setattr(os, "fdopen", fdopen)
    write_whole(str(tmp_path / "record.json"), "secretless\n", 0o600)
    assert seen == [0o600]


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary_file(tmp_path):
    path = tmp_path / "manifest.json"
    path.write_text("old\n")
    with pytest.raises(TypeError):
        write_whole(str(path), object(), 0o644)  # neither text nor bytes: fails after the file was created
    assert path.read_text() == "old\n" and sorted(os.listdir(tmp_path)) == ["manifest.json"]


def test_a_copy_is_whole_with_its_mode_and_a_planted_link_is_replaced(tmp_path):
    """copy_whole, the same for a file's bytes (bundle package files and wheels), streamed from the source."""
    from ansible_collections.llmops.sglang.plugins.module_utils.private_files import copy_whole

    src = tmp_path / "src.whl"
    src.write_bytes(os.urandom(3 << 20))
    victim = tmp_path / "victim"
    victim.write_text("untouched\n")
    dest = tmp_path / "out" / "x.whl"
    dest.parent.mkdir()
    dest.symlink_to(victim)
    copy_whole(str(src), str(dest), 0o644, prefix=".bundle-")
    assert dest.read_bytes() == src.read_bytes() and not dest.is_symlink()
    assert oct(dest.stat().st_mode & 0o777) == "0o644" and victim.read_text() == "untouched\n"
    with pytest.raises(OSError):
        copy_whole(str(tmp_path / "missing"), str(dest), 0o644, prefix=".bundle-")
    assert sorted(os.listdir(dest.parent)) == ["x.whl"] and dest.read_bytes() == src.read_bytes()
