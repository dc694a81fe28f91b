"""A known failure that crashes the interpreter is recorded as known (conformance/isolation.py):
the test runs again in a child pytest, and the child's crash becomes the expected failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import conformance

TESTS = Path(__file__).parent
PACKAGE = Path(conformance.__file__).parent


def test_a_known_crash_runs_in_a_child_and_is_recorded_as_known(tmp_path):
    manifests = tmp_path / "manifests"
    manifests.mkdir()
    (manifests / "cpu.toml").write_text((PACKAGE / "backends" / "cpu.toml").read_text())
    capabilities = (PACKAGE / "backends" / "neuron.toml").read_text().split("[[known_failures]]")[0]
    (manifests / "neuron.toml").write_text(
        capabilities
        + "\n[[known_failures]]\n"
        + 'test = "test_operators.py::test_opinfo[sum-float32]"\n'
        + 'reason = "sum aborts the interpreter (a crash)"\n'
        + 'link = "tests/mutants/crash_on_sum.py"\n'
    )
    report = tmp_path / "run.json"
    command = [
        sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
        "--conformance-backend=neuron", "--conformance-profile=quick",
        f"--conformance-manifest-dir={manifests}", f"--conformance-json={report}",
        "-p", "mutants.crash_on_sum",
        f"{PACKAGE / 'test_operators.py'}::test_opinfo[sum-float32]",
    ]  # fmt: skip
    env = dict(os.environ, PYTHONPATH=str(TESTS))
    completed = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    output = completed.stdout[-3000:] + completed.stderr[-2000:]
    assert report.exists(), f"the run itself crashed:\n{output}"
    outcomes = [r["outcome"] for r in json.loads(report.read_text())["results"]]
    # In-process, the abort would have ended the run before any report was written.
    assert outcomes == ["known"], output
    assert completed.returncode == 0, output
