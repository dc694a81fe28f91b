"""The patch-queue CLI in processes forked from a server that has already imported it.

A kill test of the real series runs the tool once per write point (600 of them): a fresh
interpreter costs about 0.3 s to start and import the tool, a fork of a server holding the
imported tool about a hundredth of that. Each run is still a process of its own, killed by the
tool's own SIGKILL at the chosen point, as a fresh ``python -m tools.patchqueue`` would be; it
leads its own process group, as the tests start the tool (``start_new_session``).
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from pathlib import Path

from tools.patchqueue.series import load_series

# The server parses the repository's series once (series.py keeps what it parsed, by content):
# every forked run then starts with it parsed, as the in-process runs do.
load_series(Path(__file__).resolve().parents[1] / "patches")

_SERVER = multiprocessing.get_context("forkserver")
_SERVER.set_forkserver_preload(["tools.patchqueue.cli", "patchqueue_forked"])


def _run(argv: list[str], environment: dict[str, str]) -> None:
    os.setpgrp()
    os.environ.update(environment)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    from tools.patchqueue.cli import main

    sys.exit(main(argv))


def run_forked(argv: list[str], environment: dict[str, str], timeout: float = 120) -> int:
    """The tool's exit status for ``argv`` with ``environment`` added (``-9``: killed)."""
    process = _SERVER.Process(target=_run, args=(argv, environment))
    process.start()
    process.join(timeout)
    if process.exitcode is None:
        process.kill()
        process.join()
        raise TimeoutError(f"the tool did not finish in {timeout} s: {argv}")
    return process.exitcode
