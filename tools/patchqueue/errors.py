"""The ways a patch-queue command fails, each with its exit status.

0 done; 1 a patch conflicts; 2 bad input; 3 the target is busy (another command holds it);
4 a file-system error while writing (the message says whether the target was rolled back or
``recover`` must finish the job); 5 a git command the tool ran was killed by a signal (the OOM
killer, a signal sent to git alone; rolled back as for 4); 130 interrupted (Ctrl-C; rolled back
as for 4).
"""

from __future__ import annotations


class PatchQueueError(Exception):
    """A failure the user can act on; ``exit_status`` is what the command line returns."""

    exit_status = 2


class BadInput(PatchQueueError):
    """Bad input (exit status 2): a wrong torch version, a dirty checkout, a missing or corrupted
    patch file, an unusable target. The target was not changed."""

    exit_status = 2


class Conflict(PatchQueueError):
    """A patch does not apply to the target (exit status 1). The target was not changed."""

    exit_status = 1


class Busy(PatchQueueError):
    """Another patches command holds the target (exit status 3). Nothing was done."""

    exit_status = 3


class WriteFailed(PatchQueueError):
    """The file system refused a write (full disk, read-only or immutable file; exit status 4).
    The message says whether the target was rolled back, or what ``recover`` needs."""

    exit_status = 4


class Interrupted(PatchQueueError):
    """Ctrl-C (exit status 130); the target was rolled back (or the message says otherwise)."""

    exit_status = 130


class GitKilled(PatchQueueError):
    """A git command the tool ran died of a signal while the tool lived (the OOM killer, a
    SIGINT or SIGKILL sent to git alone; exit status 5). Not a conflict and not bad input: the
    message says what was rolled back, or what ``recover`` finishes."""

    exit_status = 5
