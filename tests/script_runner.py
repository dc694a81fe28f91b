"""Run Python scripts as ``python SCRIPT`` would, each in a child forked after ``import torch``.

    python tests/script_runner.py PARALLEL < jobs.json

Why: a corpus script's own work takes a fraction of a second, its interpreter start with
``import torch`` (and the ``torch._dynamo`` import ``torch.optim`` triggers) about four. Here torch
is imported once, in this process, with this process's environment (set
``TORCH_DEVICE_BACKEND_AUTOLOAD`` when starting it), and nothing of the scripts runs before the
fork. Each child then runs its script as ``__main__``: ``sys.argv``, ``sys.path[0]`` and the
working directory as for ``python SCRIPT``, stdin empty, stdout and stderr to the given files, and
the exit status the interpreter would give (``SystemExit``'s code; 1 after an uncaught exception,
printed by ``sys.excepthook``). What a fresh interpreter would do differently: code a script runs
before its own ``import torch`` (environment variables set for torch's import) no longer
precedes it.

Input: a JSON list of ``{"script", "stdout", "stderr", "timeout"}`` (absolute paths, seconds).
Output: one JSON line per job as it ends, ``{"index", "returncode", "seconds", "timed_out"}``;
at most PARALLEL children run at once, and one past its timeout is killed (SIGKILL).
"""

from __future__ import annotations

import atexit
import json
import os
import runpy
import signal
import sys
import time
from typing import NoReturn

import torch  # the point of this runner: imported once, before any fork
import torch._dynamo  # noqa: F401  (torch.optim imports it on first use)


def _exit_code(exc: SystemExit) -> int:
    """The status ``python`` exits with for ``SystemExit(code)``."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def run_child(job: dict) -> NoReturn:
    script = job["script"]
    folder = os.path.dirname(script)
    os.chdir(folder)
    stdin = os.open(os.devnull, os.O_RDONLY)
    out = os.open(job["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    err = os.open(job["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    for source, target in ((stdin, 0), (out, 1), (err, 2)):
        os.dup2(source, target)
        os.close(source)
    sys.argv = [script]
    sys.path[0] = folder
    code = 0
    try:
        runpy.run_path(script, run_name="__main__")
    except SystemExit as exc:
        code = _exit_code(exc)
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    try:
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        os._exit(code)


def main() -> None:
    parallel = max(1, int(sys.argv[1]))
    pending = list(enumerate(json.load(sys.stdin)))
    running: dict[int, tuple[int, float, float]] = {}  # pid -> (index, start, timeout)
    killed: set[int] = set()
    while pending or running:
        while pending and len(running) < parallel:
            index, job = pending.pop(0)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                run_child(job)
            running[pid] = (index, time.monotonic(), float(job["timeout"]))
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            now = time.monotonic()
            for child, (_, start, timeout) in running.items():
                if now - start > timeout and child not in killed:
                    os.kill(child, signal.SIGKILL)
                    killed.add(child)
            time.sleep(0.005)
            continue
        index, start, _ = running.pop(pid)
        report = {
            "index": index,
            "returncode": os.waitstatus_to_exitcode(status),
            "seconds": time.monotonic() - start,
            "timed_out": pid in killed,
        }
        print(json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
