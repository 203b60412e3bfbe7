# -*- coding: utf-8 -*-
# Copyright: llmops.sglang contributors
# Apache License 2.0 (see LICENSE)
"""Reports and records written private and whole, and any file a module writes whole (``write_whole``).

* the directory is 0700 and a real directory (a planted symlink in its place is refused, never followed);
* each file is 0600, written to a temporary file in the same directory (O_CREAT|O_EXCL|O_NOFOLLOW, so a planted
  file or symlink is never opened) and renamed into place with os.replace, which replaces a symlink at the final name
  instead of following it; all files of one report are renamed only after every one was written in full, so a
  failure leaves no half-written report.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import os
import shutil
import stat
import tempfile

DIR_MODE = 0o700
FILE_MODE = 0o600


def private_dir(path):
    """Create ``path`` (and missing parents) 0700, or check an existing one is a real directory; return an fd to it."""
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        os.makedirs(parent, mode=DIR_MODE)
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        pass
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)  # ELOOP/ENOTDIR on a planted symlink
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid():
            raise OSError(
                errno.EPERM, "owned by another user (uid %d); refusing to write a report there" % st.st_uid, path
            )
        if stat.S_IMODE(st.st_mode) != DIR_MODE:
            os.fchmod(fd, DIR_MODE)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_private_files(out_dir, files):
    """Write ``files`` ({name: text}) into ``out_dir`` as described above; return the paths in the order given."""
    fd = private_dir(out_dir)
    temps = []
    try:
        for name, text in files.items():
            if os.sep in name or name in ("", ".", ".."):
                raise ValueError("a file name without a directory, found %r" % name)
            tmp = ".%s.%d.tmp" % (name, os.getpid())
            try:
                os.unlink(tmp, dir_fd=fd)  # our own leftover of an interrupted run (never followed: unlink)
            except FileNotFoundError:
                pass
            handle = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE, dir_fd=fd)
            temps.append((tmp, name))
            with os.fdopen(handle, "w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
        for tmp, name in temps:
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        temps = []
    finally:
        for tmp, _name in temps:
            try:
                os.unlink(tmp, dir_fd=fd)
            except OSError:
                pass
        os.close(fd)
    return [os.path.join(out_dir, name) for name in files]


def _replace_with(path, mode, prefix, write):
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=prefix, dir=directory)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as fh:
            fd = None
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        if fd is not None:
            os.close(fd)
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_whole(path, text, mode=0o644, prefix=".llmops-"):
    """The file at ``path`` holds ``text`` (str or bytes) with ``mode``, or is left as it was: written to a new
    temporary file in the same directory (a random name created with O_EXCL, so no planted file or link is opened),
    given its mode before its first byte, flushed to disk, and renamed over ``path`` (which replaces a link there
    instead of following it). Owned by whoever writes it (no chown: on a root-squashed NFS mount root may not give a
    file to root). The temporary file is removed on any failure."""
    data = text.encode("utf-8") if isinstance(text, str) else text
    _replace_with(path, mode, prefix, lambda fh: fh.write(data))


def copy_whole(src, path, mode=0o644, prefix=".llmops-"):
    """The file at ``path`` holds the bytes of the file ``src``, streamed and put in place as write_whole does."""

    def write(fh):
        with open(src, "rb") as f:
            shutil.copyfileobj(f, fh, 1 << 20)

    _replace_with(path, mode, prefix, write)


KEY_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
KEY_LENGTH = 40
# A key's file is NAME.txt: the credentials directory lies in the inventory's directory by default, and Ansible reads
# every file of an inventory directory, its subdirectories included, as an inventory source - a file holding one word
# became a host named by the key (seen in a run's output as "<key>: Name or service not known"). Ansible skips files
# ending in .txt there (INVENTORY_IGNORE_EXTS, and its REJECT_EXTS default); a key file of an earlier release (NAME)
# is renamed to NAME.txt the first time it is read.
KEY_SUFFIX = ".txt"


def key_file(name):
    """The file name of the key ``name`` in the credentials directory."""
    return name + KEY_SUFFIX


def fleet_key(directory, name, length=KEY_LENGTH, value=None, create=True):
    """The key kept in ``directory``/``name``.txt, generated once (``length`` letters and digits) when the file is
    absent (``create``: False returns "" instead).

    The directory is made (or made again) 0700 as ``private_dir`` does; a new key is written to a 0600 temporary file
    created with O_EXCL|O_NOFOLLOW and linked to its name, which fails if another process linked one first: that one
    is then read, so two forks never hand out different keys and no reader ever sees a partial file. An existing key
    file that is not a regular file of this user is refused; one readable by others is made 0600. Returns the key (the
    first word of the file's first line, as Ansible's password lookup writes it).

    ``value``: the key to keep when the file is absent, instead of a new one (a key the running fleet already holds,
    taken from its hosts by a control node that had none); an existing file is never replaced."""
    import secrets

    if os.sep in name or name in ("", ".", ".."):
        raise ValueError("a key name without a directory, found %r" % name)
    if value is not None and (
        not isinstance(value, str) or not value or len(value.split()) != 1 or value != value.strip()
    ):
        raise ValueError("a key to keep is one word without spaces or line breaks (its value is not shown)")
    fd = private_dir(directory)
    fname, old = key_file(name), name
    try:
        try:
            ost = os.stat(old, dir_fd=fd, follow_symlinks=False)
            if stat.S_ISREG(ost.st_mode) and ost.st_uid == os.geteuid():
                try:
                    os.stat(fname, dir_fd=fd, follow_symlinks=False)
                except FileNotFoundError:
                    os.rename(old, fname, src_dir_fd=fd, dst_dir_fd=fd)  # an earlier release's name
        except FileNotFoundError:
            pass
        for _attempt in range(2):
            try:
                handle = os.open(fname, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=fd)  # a FIFO: no wait
            except FileNotFoundError:
                if not create:
                    return ""
                key = value if value is not None else "".join(secrets.choice(KEY_CHARS) for _ in range(length))
                tmp = ".%s.%d.tmp" % (fname, os.getpid())
                try:
                    os.unlink(tmp, dir_fd=fd)
                except FileNotFoundError:
                    pass
                out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE, dir_fd=fd)
                with os.fdopen(out, "w", encoding="ascii") as fh:
                    fh.write(key + "\n")
                    fh.flush()
                    os.fsync(fh.fileno())
                try:
                    os.link(tmp, fname, src_dir_fd=fd, dst_dir_fd=fd, follow_symlinks=False)
                    return key
                except FileExistsError:
                    continue  # another process wrote it first: read theirs
                finally:
                    os.unlink(tmp, dir_fd=fd)
            with os.fdopen(handle, "r", encoding="utf-8") as fh:
                st = os.fstat(fh.fileno())
                if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                    raise OSError(errno.EPERM, "not a regular file of this user; refusing to read a key from it", fname)
                if stat.S_IMODE(st.st_mode) & 0o077:
                    os.fchmod(fh.fileno(), FILE_MODE)
                words = fh.readline().split()
            if not words:
                raise ValueError(
                    "%s/%s is empty: remove it to generate a new key, or write the key into it" % (directory, fname)
                )
            return words[0]
        raise OSError(errno.EEXIST, "could not read or create the key", fname)
    finally:
        os.close(fd)


def held_keys(text, wanted):
    """The keys a host holds, from the text of its key file: ``wanted`` maps a key's name on the control node to its
    field in the file - an environment file's variable (``SGLANG_API_KEY``, from ``NAME=value`` lines) or a JSON
    object's member (``api_key``). Returns {name: key} for the fields present and non-empty; a file that is neither
    gives {}."""
    import json

    fields = {}
    stripped = (text or "").strip()
    if stripped.startswith("{"):
        try:
            doc = json.loads(stripped)
        except ValueError:
            doc = {}
        if isinstance(doc, dict):
            fields = dict((k, v) for k, v in doc.items() if isinstance(v, str))
    else:
        for line in stripped.splitlines():
            name, sep, value = line.partition("=")
            if sep and name.strip() and not name.lstrip().startswith("#"):
                fields[name.strip()] = value.strip().strip("'\"")
    out = {}
    for name, field in (wanted or {}).items():
        value = fields.get(field)
        if isinstance(value, str) and value and len(value.split()) == 1:
            out[name] = value
    return out
