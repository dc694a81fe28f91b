"""The patch-queue CLI in processes forked from a server that has already imported it.

A kill test of the real series runs the tool once per write point (600 of them): a fresh
interpreter costs about 0.3 CPU-seconds to start, import the tool and parse the series; a fork of
a server that holds all three costs a few milliseconds. Each run is still a process of its own,
leading its own process group (as the tests start the tool, ``start_new_session``), killed by the
tool's own SIGKILL at the chosen point, as a fresh ``python -m tools.patchqueue`` would be.

The server is a plain single-threaded interpreter (``SERVER``), not multiprocessing's: that one
re-imports the parent's main module (pytest, or a script) in every child.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SERVER = r"""
import json, os, sys
from pathlib import Path

from tools.patchqueue.cli import main
from tools.patchqueue.series import load_series

load_series(Path(sys.argv[1]))  # kept in the process (by content): every child starts with it
for line in sys.stdin:
    request = json.loads(line)
    child = os.fork()
    if child == 0:
        code = 70
        try:
            os.setpgrp()
            os.environ.update(request["env"])
            quiet = os.open(os.devnull, os.O_WRONLY)
            os.dup2(quiet, 1)
            os.dup2(quiet, 2)
            code = main(request["argv"])
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
        finally:
            os._exit(code)
    _, status = os.waitpid(child, 0)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    print(code, flush=True)
"""


class ForkServer:
    """Runs the CLI in forks of one server process; ``close()`` ends the server."""

    def __init__(self, series: Path) -> None:
        environment = {k: v for k, v in os.environ.items() if not k.startswith("DA_PATCHES_")}
        self._server = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(series)],
            cwd=ROOT,
            env=environment,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )

    def run(self, argv: list[str], environment: dict[str, str]) -> int:
        """The tool's exit status for ``argv`` with ``environment`` added (``-9``: killed)."""
        assert self._server.stdin and self._server.stdout
        self._server.stdin.write(json.dumps({"argv": argv, "env": environment}) + "\n")
        self._server.stdin.flush()
        answer = self._server.stdout.readline()
        if not answer:
            raise RuntimeError(f"the fork server ended (status {self._server.wait()})")
        return int(answer)

    def close(self) -> None:
        if self._server.stdin:
            self._server.stdin.close()
        self._server.wait(timeout=60)
