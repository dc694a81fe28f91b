"""Run one upstream-style test file (a ``test/*.py`` that calls ``run_tests()``) and classify it.

Two ways to run it, with the same result:

- ``run_test_file``: ``python FILE`` in a fresh interpreter, as PyTorch's CI and a reviewer run it;
- ``WarmRunners``: a fork of a warm interpreter per file. Each of verify's four configurations
  (stock or patched torch, with or without neuron) keeps interpreters started in that
  configuration's environment that have imported torch and torch.testing's two common modules
  (``PRELOAD``); a test file then runs in a fork of one, as ``__main__`` with ``sys.argv``,
  ``sys.path[0]``, the working directory and its output set as ``python FILE`` sets them, and at
  its end the interpreter's own exit steps (non-daemon threads joined, atexit handlers, flushes).
  The import is about 4 of the 6 CPU-seconds a small test file takes in a fresh interpreter, and
  verify runs 4 per test file. A configuration whose interpreter cannot import ``PRELOAD`` runs
  its files fresh (a half-imported torch would make the forks differ from a fresh run).

docs/patchqueue-verify.md compares the two over the whole series.
"""

from __future__ import annotations

import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

_RAN_RE = re.compile(r"^Ran (\d+) tests? in ", re.M)
_OK_RE = re.compile(r"^OK(?: \((.*)\))?\s*$", re.M)
_FAILED_RE = re.compile(r"^FAILED \((.*)\)\s*$", re.M)
_CASE_RE = re.compile(r"^(FAIL|ERROR): (\S+)(?: \(([^)]*)\))?", re.M)

# What every test file of the series imports first (run_tests, instantiate_device_type_tests).
PRELOAD = (
    "torch",
    "torch.testing._internal.common_utils",
    "torch.testing._internal.common_device_type",
)


@dataclass
class Run:
    """One run of one test file."""

    outcome: str  # "passed", "failed" (tests ran, some failed), "error" (no result), "timeout"
    returncode: int | None
    ran: int
    skipped: int
    seconds: float
    summary: str
    failing: list[str] = field(default_factory=list)
    tail: str = ""


def failing_class(failing: str) -> str:
    """``TestXMock`` for a failing entry ``FAIL: TestXMock.test_y`` (the class names the mock or
    the device)."""
    test_id = failing.split(": ", 1)[-1]
    parts = test_id.split(".")
    return parts[-2] if len(parts) >= 2 else test_id


def is_mock(failing: str) -> bool:
    """Whether a failing entry belongs to a ``...Mock`` class (the series' name for a test that
    pretends a trait rather than running on the process's device: it fails on any build)."""
    return failing_class(failing).endswith("Mock")


def classify(returncode: int, text: str, seconds: float) -> Run:
    """The Run of a test file that exited with ``returncode`` after printing ``text``."""
    ran_match = _RAN_RE.search(text)
    ran = int(ran_match.group(1)) if ran_match else 0
    ok = _OK_RE.search(text)
    failed = _FAILED_RE.search(text)
    detail = (ok or failed).group(1) if (ok or failed) else None
    skipped = int(m.group(1)) if detail and (m := re.search(r"skipped=(\d+)", detail)) else 0
    failing = [
        f"{kind}: {test_id.removeprefix('__main__.') or name}"
        for kind, name, test_id in _CASE_RE.findall(text)
    ]
    if returncode == 0 and ok and ran_match:
        outcome, summary = "passed", f"OK ({ran - skipped} passed, {skipped} skipped)"
    elif returncode != 0 and failed and ran_match:
        outcome, summary = "failed", f"FAILED ({detail})"
    else:
        outcome, summary = "error", f"exit {returncode}, no unittest result"
    return Run(outcome, returncode, ran, skipped, seconds, summary, failing, text[-2000:])


def _timed_out(timeout: float, text: str, seconds: float) -> Run:
    return Run("timeout", None, 0, 0, seconds, f"timeout {timeout:g}s", tail=text[-2000:])


def run_test_file(
    path: Path, env: dict[str, str], cwd: Path, timeout: float, python: str = sys.executable
) -> Run:
    """Run ``python path`` in a fresh interpreter (``python``: this one by default) and classify
    its result.

    On a timeout the file's whole process group is killed: a process it started would otherwise
    hold the output pipes open.
    """
    start = time.monotonic()
    proc = subprocess.Popen(
        [python, str(path)],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        text, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(proc.pid)
        text, _ = proc.communicate()
        return _timed_out(timeout, text or "", time.monotonic() - start)
    return classify(proc.returncode, text, time.monotonic() - start)


# The warm interpreter. It answers on its stdout only with lines starting with the marker (an
# import may print). Per request (a JSON line: path, cwd, output file) it forks; the child becomes
# `python FILE` and the server answers "pid N" at once, then "exit N" (negative: a signal) when
# the child has ended. Fork safety: the server never starts a thread, and touches no device.
_SERVER = r"""
import json, os, sys
MARK = "@@warm@@ "
def say(text):
    sys.stdout.write(MARK + text + "\n")
    sys.stdout.flush()
try:
    for name in json.loads(sys.argv[1]):
        __import__(name)
except BaseException as exc:
    say("cold " + json.dumps(f"{type(exc).__name__}: {exc}"))
    raise SystemExit(0)
say("ready")

def become_the_test_file(request):
    import runpy, threading, atexit
    os.setpgrp()  # the client kills the group on a timeout (the file's own children too)
    os.chdir(request["cwd"])
    out = os.open(request["output"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(out)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    path = request["path"]
    sys.argv = [path]
    sys.path[0] = os.path.dirname(path)  # as `python FILE` sets it
    code = 0
    try:
        runpy.run_path(path, run_name="__main__")
    except SystemExit as exc:
        if exc.code is None:
            code = 0
        elif isinstance(exc.code, int):
            code = exc.code
        else:
            print(exc.code, file=sys.stderr)
            code = 1
    except BaseException:
        import traceback
        traceback.print_exc()
        code = 1
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
            become_the_test_file(request)
        finally:
            os._exit(70)
    say(f"pid {child}")
    _, status = os.waitpid(child, 0)
    say(f"exit {-os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)}")
"""
_MARK = "@@warm@@ "


class ColdInterpreter(Exception):
    """The configuration's interpreter could not import PRELOAD: run its files fresh."""


class WarmInterpreter:
    """One warm interpreter in one environment; runs one test file at a time."""

    def __init__(self, env: dict[str, str], cwd: Path) -> None:
        self._server = subprocess.Popen(
            [sys.executable, "-c", _SERVER, json.dumps(PRELOAD)],
            env=env,
            cwd=cwd,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        # A reader thread, so that a timeout never waits on a line already read into a buffer.
        self._lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        answer = self._answer(None)
        if answer != "ready":
            self.close()
            raise ColdInterpreter(answer)

    def _read(self) -> None:
        assert self._server.stdout is not None
        for line in self._server.stdout:
            if line.startswith(_MARK):
                self._lines.put(line[len(_MARK) :].rstrip("\n"))
        self._lines.put("")  # the server ended

    def _answer(self, deadline: float | None) -> str:
        """The server's next answer; "" when it ended or the deadline passed."""
        try:
            if deadline is None:
                return self._lines.get()
            return self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            return ""

    def run(self, path: Path, cwd: Path, timeout: float) -> Run:
        """Run ``path`` as ``python path`` would in this interpreter's environment."""
        assert self._server.stdin is not None
        start = time.monotonic()
        with tempfile.NamedTemporaryFile(prefix="testrun-", suffix=".out") as output:
            request = {"path": str(path), "cwd": str(cwd), "output": output.name}
            self._server.stdin.write(json.dumps(request) + "\n")
            self._server.stdin.flush()
            pid_line = self._answer(None)
            if not pid_line.startswith("pid "):
                raise RuntimeError(f"the warm interpreter ended ({self._server.wait()})")
            pid = int(pid_line.split()[1])
            exit_line = self._answer(start + timeout)
            if not exit_line:
                _kill_group(pid)
                exit_line = self._answer(time.monotonic() + 30)
                text = Path(output.name).read_text(errors="replace")
                if not exit_line.startswith("exit "):
                    self.close()
                    raise RuntimeError("the warm interpreter did not reap a killed test file")
                return _timed_out(timeout, text, time.monotonic() - start)
            text = Path(output.name).read_text(errors="replace")
        return classify(int(exit_line.split()[1]), text, time.monotonic() - start)

    @property
    def alive(self) -> bool:
        return self._server.poll() is None

    def close(self) -> None:
        if self._server.stdin and not self._server.stdin.closed:
            self._server.stdin.close()
        try:
            self._server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self._server.kill()
            self._server.wait()


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


class WarmRunners:
    """Warm interpreters per environment, started on demand and reused; thread-safe.

    ``run`` takes an idle interpreter of ``env`` (starting one when none is idle, so ``jobs``
    threads use at most ``jobs`` per environment) and falls back to ``run_test_file`` for an
    environment whose interpreter is cold. ``close()`` ends them all.
    """

    def __init__(self, cwd: Path) -> None:
        self._cwd = cwd
        self._lock = threading.Lock()
        self._idle: dict[str, list[WarmInterpreter]] = {}
        self._all: list[WarmInterpreter] = []
        self.cold: dict[str, str] = {}  # environment key -> why it runs fresh

    def run(self, path: Path, env: dict[str, str], cwd: Path, timeout: float) -> Run:
        key = json.dumps(env, sort_keys=True)
        with self._lock:
            cold = key in self.cold
            idle = self._idle.setdefault(key, [])
            interpreter = idle.pop() if idle and not cold else None
        if cold:
            return run_test_file(path, env, cwd, timeout)
        if interpreter is None:
            try:
                interpreter = WarmInterpreter(env, self._cwd)
            except ColdInterpreter as exc:
                with self._lock:
                    self.cold[key] = str(exc)
                return run_test_file(path, env, cwd, timeout)
            with self._lock:
                self._all.append(interpreter)
        try:
            return interpreter.run(path, cwd, timeout)
        finally:
            if interpreter.alive:
                with self._lock:
                    self._idle[key].append(interpreter)

    def close(self) -> None:
        for interpreter in self._all:
            interpreter.close()
        self._all.clear()
        self._idle.clear()
