"""One command at a time on a target: an advisory lock held for the whole command.

The lock is ``flock`` on the target folder itself (the torch package, or the checkout's git
folder): nothing is created in the target, and the kernel releases the lock when the holder
dies, however it dies, so a killed command never leaves the target locked. A second command
waits a little, then says who holds it (the pid and command line, read from ``/proc/locks``).
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tools.patchqueue.errors import Busy

DEFAULT_WAIT = 10.0


def _holder(folder: Path) -> str:
    """``pid N: command line`` of the process holding a flock on ``folder`` (Linux), or ''."""
    try:
        inode = os.stat(folder).st_ino
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return ""
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].endswith(f":{inode}"):
            pid = fields[4]
            try:
                raw = Path(f"/proc/{pid}/cmdline").read_bytes()
                command = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()
            except OSError:
                command = "?"
            return f"pid {pid}: {command}"
    return ""


@contextmanager
def hold(folder: Path, wait: float = DEFAULT_WAIT) -> Iterator[None]:
    """Hold the lock of the target ``folder`` for the block; waits up to ``wait`` seconds for
    another holder, then raises Busy naming it."""
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise Busy(f"{folder}: cannot open it to lock it: {exc.strerror}") from exc
    try:
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise Busy(
                        f"{folder}: another patches command holds it "
                        f"({_holder(folder) or 'holder unknown'}); waited {wait:g} s; run "
                        "again when it has finished"
                    ) from None
                time.sleep(0.1)
        yield
    finally:
        os.close(fd)  # releases the lock
