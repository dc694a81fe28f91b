"""Known failures that crash the interpreter are run again in a child pytest.

A backend bug can be a crash (a segfault in a kernel) rather than a wrong result. In-process, a
crash takes the worker, or the whole run, down with it; pytest-xdist then reports a failure that
no manifest entry can mark as known. Tests that exercise such behaviour call
:func:`run_known_failure_in_child` first: for a test whose manifest entry says it crashes (its
reason mentions a crash, a segfault or an abort) it runs the test in a child pytest and turns
the child's failure, or its crash, into an AssertionError here, which the manifest's strict
xfail then expects. Other known failures run in-process, as usual: a child costs seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

CHILD_ENV = "CONFORMANCE_ISOLATED_CHILD"


CRASH_WORDS = ("crash", "segfault", "abort")


def is_known_crash(item: pytest.Item) -> bool:
    """True if the plugin marked ``item`` as a manifest known failure whose reason says that it
    crashes the interpreter."""
    marker = item.get_closest_marker("xfail")
    reason = str(marker.kwargs.get("reason", "")) if marker is not None else ""
    return reason.startswith("known failure") and any(w in reason.lower() for w in CRASH_WORDS)


def _plugin_arguments(config: pytest.Config) -> list[str]:
    """The parent's ``-p NAME`` plugins (a mutant backend, say), without xdist and no:NAME."""
    args = list(config.invocation_params.args)
    plugins = []
    for flag, value in zip(args, args[1:], strict=False):
        if flag == "-p" and not value.startswith("no:") and value != "xdist":
            plugins += ["-p", value]
    return plugins


def _child_command(request: pytest.FixtureRequest, report: Path) -> list[str]:
    item, config = request.node, request.config
    command = [sys.executable, "-m", "pytest", f"{item.path}::{item.name}", "-q"]
    command += ["-p", "no:cacheprovider", "-p", "no:xdist", "--runxfail"]
    command += ["--conformance-backend", request.getfixturevalue("backend").name]
    command += ["--conformance-reference", request.getfixturevalue("reference").name]
    command += ["--conformance-profile", config.getoption("conformance_profile")]
    # a failure is a failure in the child: the parent attributes it
    command += [f"--conformance-json={report}", "--conformance-strict-torch"]
    if config.getoption("conformance_manifest_dir"):
        command += ["--conformance-manifest-dir", config.getoption("conformance_manifest_dir")]
    return command + _plugin_arguments(config)


def run_known_failure_in_child(request: pytest.FixtureRequest) -> bool:
    """For a known failure that crashes: run this test in a child pytest, raise its failure here.

    Returns False (run the test in this process) for any other test and in the child itself;
    True when the child passed, so that the caller returns and the strict xfail reports the
    manifest entry as no longer failing.
    """
    item = request.node
    if os.environ.get(CHILD_ENV) or not is_known_crash(item):
        return False
    timeout_marker = item.get_closest_marker("timeout")
    timeout = float(timeout_marker.args[0]) * 0.9 if timeout_marker else 300.0
    with tempfile.TemporaryDirectory(prefix="conformance-child-") as directory:
        report = Path(directory) / "run.json"
        try:
            completed = subprocess.run(
                _child_command(request, report),
                cwd=item.config.rootpath,
                env={**os.environ, CHILD_ENV: "1"},
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as error:
            message = f"{item.name} did not finish in {timeout:.0f}s in a child process"
            raise AssertionError(message) from error
        results = json.loads(report.read_text())["results"] if report.exists() else []
    outcome = next((r for r in results if r["nodeid"].endswith("::" + item.name)), None)
    if outcome is None:
        code = completed.returncode
        name = signal.Signals(-code).name if code < 0 else f"exit code {code}"
        output = completed.stdout + completed.stderr
        # Python's fault handler names the crashing line at the top of its report.
        start = output.find("Fatal Python error")
        output = output[start : start + 2000] if start >= 0 else output[-2000:]
        raise AssertionError(f"{item.name} crashed the child interpreter ({name}):\n{output}")
    if outcome["outcome"] == "not applicable":
        pytest.skip(outcome["detail"] or "not applicable (in the child)")
    if outcome["outcome"] != "passed":
        raise AssertionError(f"{item.name} failed in a child process:\n{outcome['detail']}")
    return True
