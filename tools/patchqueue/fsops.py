"""Durable file-system writes, each one a numbered fault point.

Every change the patch tools make to a target goes through this module: a file is written to a
temporary file in the same folder, flushed to disk and renamed over the destination, so that a
kill or a power loss leaves either the old or the new bytes, never a truncated file; the folder
is flushed after each rename, create and remove so that the journal and the files it describes
reach the disk in the order they were written.

Fault injection (for the crash-safety tests, and for anyone who wants to see it for themselves):
every operation first calls :func:`checkpoint`, which counts it. With
``DA_PATCHES_FAULT_AT=N`` (or ``N,M,...``) the N-th point kills the process (and the git it may
be running) with SIGKILL, or, with ``DA_PATCHES_FAULT=enospc|eacces``, raises that error
instead, as a full disk or a read-only file would. ``DA_PATCHES_FAULT_TRACE=FILE`` appends
``N label`` for every point reached, which is how the tests learn how many points a command
has.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
from pathlib import Path

FAULT_AT = "DA_PATCHES_FAULT_AT"
FAULT_KIND = "DA_PATCHES_FAULT"
FAULT_TRACE = "DA_PATCHES_FAULT_TRACE"
TMP_SUFFIX = ".da-patches-tmp"
# "0" skips fsync. Only for the tests that kill the tool at every write: a killed process loses
# nothing that fsync would have saved (the kernel keeps its writes), and the 600 points of the
# real series otherwise spend minutes in fsync. A power loss is what fsync is for; keep it on.
FSYNC = "DA_PATCHES_FSYNC"

_count = 0


def checkpoint(label: str) -> None:
    """Count one fault point; kill or fail here when the environment asks for this one."""
    global _count
    _count += 1
    trace = os.environ.get(FAULT_TRACE)
    if trace:
        with open(trace, "a", encoding="utf-8") as handle:
            handle.write(f"{_count} {label}\n")
    wanted = os.environ.get(FAULT_AT)
    if not wanted or _count not in {int(n) for n in wanted.split(",")}:
        return
    kind = os.environ.get(FAULT_KIND, "kill")
    if kind == "enospc":
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), label)
    if kind == "eacces":
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), label)
    # The whole process group when we lead it (the tests start us so): a Ctrl-C or an OOM
    # kill takes the git we are running with us.
    if os.getpgrp() == os.getpid():
        os.killpg(os.getpgrp(), signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)


def temporary_name(path: Path) -> Path:
    """The temporary file :func:`write_file` uses for ``path`` (a leftover is removed on
    recovery)."""
    return path.with_name(f".{path.name}{TMP_SUFFIX}")


def _fsync(fd: int) -> None:
    if os.environ.get(FSYNC) != "0":
        os.fsync(fd)


def sync_dir(folder: Path) -> None:
    """Flush a folder's entries (renames, creates, removes) to disk."""
    if os.environ.get(FSYNC) == "0":
        return
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def default_mode() -> int:
    """The mode a new file gets from open(): 0o666 less the umask."""
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_file(path: Path, data: bytes, mode: int | None = None) -> None:
    """Replace ``path`` with ``data`` atomically and durably; ``mode`` (default: the current
    file's, or a new file's) is set before the rename, so the file is never seen without it."""
    path = Path(path)
    if mode is None:
        try:
            mode = os.stat(path).st_mode & 0o7777
        except FileNotFoundError:
            mode = default_mode()
    tmp = temporary_name(path)
    checkpoint(f"write {path} (temporary file)")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o600)
    try:
        half = len(data) // 2
        os.write(fd, data[:half])
        checkpoint(f"write {path} (half written)")
        view = memoryview(data)[half:]
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fchmod(fd, mode)
        _fsync(fd)
    except BaseException:
        os.close(fd)
        _unlink_quietly(tmp)
        raise
    os.close(fd)
    checkpoint(f"rename over {path}")
    os.replace(tmp, path)
    sync_dir(path.parent)


def _unlink_quietly(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def remove_file(path: Path) -> None:
    """Remove a file (or a link) durably."""
    checkpoint(f"remove {path}")
    os.unlink(path)
    sync_dir(Path(path).parent)


def make_dir(path: Path) -> None:
    """Create one folder durably."""
    checkpoint(f"mkdir {path}")
    os.mkdir(path)
    sync_dir(Path(path).parent)


def remove_dir(path: Path) -> None:
    """Remove one empty folder durably (OSError when it is not empty)."""
    checkpoint(f"rmdir {path}")
    os.rmdir(path)
    sync_dir(Path(path).parent)


def rename(src: Path, dest: Path) -> None:
    """Rename atomically and durably (both folders flushed)."""
    checkpoint(f"rename {src} to {dest}")
    os.replace(src, dest)
    sync_dir(Path(dest).parent)
    if Path(src).parent != Path(dest).parent:
        sync_dir(Path(src).parent)


def remove_tree(path: Path) -> None:
    """Remove a whole folder: first renamed aside in one step (so that a kill leaves either the
    folder or a ``*.trash`` leftover that recovery deletes), then deleted."""
    path = Path(path)
    if not path.exists():
        return
    trash = path.with_name(path.name + ".trash")
    if trash.exists():
        shutil.rmtree(trash)
    rename(path, trash)
    checkpoint(f"delete {trash}")
    shutil.rmtree(trash)
