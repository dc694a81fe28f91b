"""The two ways a patch-queue command fails, each with its exit status."""

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
