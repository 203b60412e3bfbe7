"""A share exported with root_squash, for tests: sim/share/root_squash.py serving a fresh backing directory (owned by
a given uid and gid, 0755) at a mount point beside it, unmounted and stopped by PID when the block ends, also on
failure. Both live in a 0755 directory under /var/tmp, so an account other than root can reach them."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from events import stop_process, wait_until

SQUASH = Path(__file__).resolve().parents[1] / "sim" / "share" / "root_squash.py"


@contextlib.contextmanager
def root_squashed_share(uid: int, gid: int):
    """(backing, mountpoint): what the file server holds, and what its clients see."""
    top = Path(tempfile.mkdtemp(prefix="llmops-squash-", dir="/var/tmp"))
    top.chmod(0o755)
    backing, mnt = top / "export", top / "mnt"
    backing.mkdir(mode=0o755)
    mnt.mkdir()
    os.chown(backing, uid, gid)
    log = (top / "root_squash.log").open("w")
    proc = subprocess.Popen([sys.executable, SQUASH, backing, mnt], stdout=log, stderr=subprocess.STDOUT)
    try:
        wait_until(lambda: os.path.ismount(mnt) or proc.poll() is not None, "the root-squash mount")
        assert proc.poll() is None, (top / "root_squash.log").read_text()
        yield backing, mnt
    finally:
        if os.path.ismount(mnt):
            subprocess.run(["umount", mnt], check=False, capture_output=True, timeout=30)
        if os.path.ismount(mnt):  # still in use: detach it, so that nothing is left mounted
            subprocess.run(["umount", "-l", mnt], check=False, capture_output=True, timeout=30)
        stop_process(proc, 15)
        log.close()
        shutil.rmtree(top, ignore_errors=True)
