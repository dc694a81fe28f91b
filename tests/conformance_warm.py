"""Conformance runs (``python -m pytest ...``) in processes forked from a warm interpreter.

The mutant, plugin and vendor tests start about 70 conformance runs: a fresh interpreter spends
about 2.2 of its 3 CPU-seconds importing torch (and with it the neuron backend), numpy,
hypothesis and pytest before it collects a single test. A server that has imported those four
forks one child per run; the child chdirs, points its stdout and stderr at files and calls
``pytest.main`` with the run's arguments, then leaves as an interpreter does (non-daemon threads
joined, atexit handlers, flushes) with pytest's status. Everything that depends on the run (its
``-p`` mutant plugin, the conformance plugin, the suite's modules, hypothesis' settings) is loaded
in the child, after the fork, exactly as in a fresh run: nothing of the suite is imported before
(pytest could not rewrite the asserts of a module imported before it starts).

Fork safety: the server never starts a thread and touches no device; importing torch with neuron
starts none either (tools/patchqueue/testrun.py forks after the same import). One server per
environment: a run whose environment differs (``NEURON_LAUNCH_BLOCKING`` is read when neuron
loads) gets a server started in that environment.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

# What every conformance run imports before its first test (torch loads neuron).
PRELOAD = ("torch", "numpy", "hypothesis", "pytest")
MARK = "@@warm-conformance@@ "
# Set by pytest for each test of this process: not part of the server's environment (a server
# per test would be a fresh interpreter per run again); each run's child gets it as given.
PER_TEST = ("PYTEST_CURRENT_TEST",)

SERVER = r"""
import json, os, sys
MARK = "@@warm-conformance@@ "
def say(text):
    sys.stdout.write(MARK + text + "\n")
    sys.stdout.flush()
for name in json.loads(sys.argv[1]):
    __import__(name)
say("ready")

def become_the_run(request):
    import atexit, threading
    os.setpgrp()  # the client kills the group on a timeout (the run's own children too)
    os.chdir(request["cwd"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, name in ((1, "stdout"), (2, "stderr")):
        out = os.open(request[name], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(out, fd)
        os.close(out)
    os.environ.clear()
    os.environ.update(request["env"])
    sys.argv = [sys.executable, *request["args"]]
    code = 1
    try:
        import pytest
        code = int(pytest.main(request["args"]))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        import traceback
        traceback.print_exc()
    # The interpreter's exit: join non-daemon threads, run atexit handlers, flush.
    try:
        threading._shutdown()
        atexit._run_exitfuncs()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        os._exit(code & 0xFF)

for line in sys.stdin:
    request = json.loads(line)
    sys.stdout.flush()
    sys.stderr.flush()
    child = os.fork()
    if child == 0:
        try:
            become_the_run(request)
        finally:
            os._exit(70)
    say(f"pid {child}")
    _, status = os.waitpid(child, 0)
    say(f"exit {-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)}")
"""


class WarmServer:
    """One warm interpreter started in ``env``; runs ``python -m pytest ARGS`` in forks of it."""

    def __init__(self, env: dict[str, str]) -> None:
        self._server = subprocess.Popen(
            [sys.executable, "-c", SERVER, json.dumps(PRELOAD)],
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        # A reader thread: a deadline never waits on a line already read into a buffer.
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        answer = self._answer(time.monotonic() + 300)
        if answer != "ready":
            raise RuntimeError(f"the warm conformance server did not start: {answer!r}")

    def _read(self) -> None:
        assert self._server.stdout is not None
        for line in self._server.stdout:
            if line.startswith(MARK):
                self._lines.put(line[len(MARK) :].rstrip("\n"))
        self._lines.put("")  # the server ended

    def _answer(self, deadline: float) -> str:
        """The server's next marked line; "" when it ended or the deadline passed."""
        try:
            return self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return ""

    def run(
        self, args: list[str], env: dict[str, str], output: Path, timeout: float, cwd: Path
    ) -> subprocess.CompletedProcess[str]:
        """``python -m pytest ARGS`` in a fork with the environment ``env``, in ``cwd``; its
        stdout and stderr go through files named after ``output``. Raises TimeoutExpired (after
        killing the run's process group) as subprocess.run does."""
        assert self._server.stdin is not None
        stdout, stderr = output.with_suffix(".stdout"), output.with_suffix(".stderr")
        request = {
            "args": args,
            "env": env,
            "cwd": str(cwd),
            "stdout": str(stdout),
            "stderr": str(stderr),
        }
        deadline = time.monotonic() + timeout
        self._server.stdin.write(json.dumps(request) + "\n")
        self._server.stdin.flush()
        started = self._answer(deadline)
        if not started.startswith("pid "):
            raise RuntimeError(f"the warm conformance server ended (status {self._server.poll()})")
        pid = int(started.split()[1])
        ended = self._answer(deadline)
        if not ended.startswith("exit "):
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self._answer(time.monotonic() + 60)  # the server reaps it
            raise subprocess.TimeoutExpired(["pytest", *args], timeout)
        return subprocess.CompletedProcess(
            ["pytest", *args],
            int(ended.split()[1]),
            stdout.read_text(errors="replace"),
            stderr.read_text(errors="replace"),
        )

    def close(self) -> None:
        if self._server.stdin:
            self._server.stdin.close()
        try:
            self._server.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self._server.kill()
            self._server.wait()


_SERVERS: dict[tuple[tuple[str, str], ...], WarmServer] = {}


def run_pytest(
    args: list[str],
    env: dict[str, str],
    output: Path,
    timeout: float,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python -m pytest ARGS`` in ``env`` and ``cwd`` (by default this process's working
    directory), in a fork of this process's warm server for that
    environment (started on first use, ended when this process exits). The child's environment
    is ``env`` exactly; the server's is ``env`` less what pytest changes per test."""
    stable = {k: v for k, v in env.items() if k not in PER_TEST}
    key = tuple(sorted(stable.items()))
    if key not in _SERVERS:
        _SERVERS[key] = WarmServer(stable)
    return _SERVERS[key].run(args, env, output, timeout, cwd or Path.cwd())


@atexit.register
def _close_servers() -> None:
    for server in _SERVERS.values():
        server.close()
    _SERVERS.clear()
