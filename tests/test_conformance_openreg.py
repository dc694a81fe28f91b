"""The suite on a backend it was not written with: OpenReg, PyTorch's own PrivateUse1 test backend
(torch 2.13 reconstruction in ../shared/openreg-2.13). The suite's wheel is installed beside it,
`conformance init openreg` writes the manifest and the quick profile runs from an unrelated
folder; the outcome is compared with the recorded triage (tests/conformance_runs/
openreg-quick.json): OpenReg's known departures stay failures, torch's own faults are labelled
torch's, the wrong verdicts the suite once gave stay fixed, and the failures read as about 20
causes.

Opt-in: the run takes about 4 minutes on 2 cores (5 with the build), over the budget of CI's
tests. Set CONFORMANCE_OPENREG=1 to run it. OpenReg's interpreter: CONFORMANCE_OPENREG_PYTHON
(a venv where `import torch` autoloads openreg and pytest, pytest-xdist, pytest-timeout,
hypothesis and expecttest are installed), else build/openreg-venv, built here from
../shared/openreg-2.13 when that folder exists (its README's steps; pip resolves torch through
the machine's pip configuration).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conformance import report

REPO = Path(__file__).resolve().parents[1]
RECORDED = Path(__file__).parent / "conformance_runs" / "openreg-quick.json"
SHARED = REPO.parent / "shared" / "openreg-2.13"
BUILT = REPO / "build" / "openreg-venv"
TOOLS = ["pytest", "pytest-xdist", "pytest-timeout", "hypothesis", "expecttest", "numpy"]

# The verdicts the suite once got wrong on OpenReg (issue 25): none may fail again.
ONCE_WRONG = [
    "test_distributed.py::test_powerSGD_synchronizes_the_device",
    "test_autocast.py::test_autocast_results_match_the_reference[torch.bfloat16]",
    "test_autocast.py::test_autocast_results_match_the_reference[torch.float16]",
    "test_autocast.py::test_autocast_gradients_keep_the_parameters_dtype[torch.bfloat16]",
    "test_autocast.py::test_autocast_gradients_keep_the_parameters_dtype[torch.float16]",
    "test_autocast.py::test_precision_sensitive_ops_run_in_float32[cdist-torch.bfloat16]",
    "test_autocast.py::test_precision_sensitive_ops_run_in_float32[cdist-torch.float16]",
]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not os.environ.get("CONFORMANCE_OPENREG"),
        reason="opt-in (about 4 min): set CONFORMANCE_OPENREG=1 to run the suite on OpenReg",
    ),
]


def _run(command: list, cwd: Path, env: dict | None = None, timeout: float = 900):
    return subprocess.run(
        [str(c) for c in command],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=timeout,
    )


def _build(tmp: Path) -> Path:
    """build/openreg-venv from ../shared/openreg-2.13, following its README."""
    python = BUILT / "bin" / "python"
    if python.exists():
        return python
    if not SHARED.is_dir():
        pytest.skip(f"no OpenReg: {SHARED} does not exist and CONFORMANCE_OPENREG_PYTHON is unset")
    if shutil.which("cmake") is None and not (Path(sys.executable).parent / "cmake").exists():
        pytest.skip("no OpenReg: building it needs CMake")
    staging = BUILT.with_name("openreg-venv.partial")
    shutil.rmtree(staging, ignore_errors=True)
    source = REPO / "build" / "openreg-src"
    shutil.rmtree(source, ignore_errors=True)
    shutil.copytree(SHARED / "torch_openreg", source)
    steps = [
        [sys.executable, "-m", "venv", staging],
        [staging / "bin/pip", "install", "-q", f"torch=={torch.__version__}", *TOOLS, "cmake"],
        [staging / "bin/pip", "install", "-q", "--no-build-isolation", "--no-deps", "-e", source],
    ]
    for step in steps:
        done = _run(step, tmp, dict(os.environ, MAX_JOBS="2"), timeout=1800)
        if done.returncode != 0:
            pytest.skip(f"could not build OpenReg ({step[:3]}): {done.stderr[-1500:]}")
    staging.rename(BUILT)  # a venv records its path: build in place, then only rename the folder
    return python


def _wheel(tmp: Path) -> Path:
    out = tmp / "dist"
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps"]
    done = _run([*pip_wheel, "-w", out, REPO / "packaging" / "conformance"], tmp)
    assert done.returncode == 0, done.stderr[-2000:]
    (wheel,) = out.glob("*.whl")
    return wheel


def test_openreg_quick_matches_the_recorded_triage(tmp_path: Path) -> None:
    python = Path(os.environ.get("CONFORMANCE_OPENREG_PYTHON") or _build(tmp_path))
    site = tmp_path / "site"  # the suite's wheel beside OpenReg, its venv left as it was
    pip = [python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target", site]
    installed = _run([*pip, _wheel(tmp_path)], tmp_path)
    assert installed.returncode == 0, installed.stderr[-2000:]
    project = tmp_path / "vendor-ci"  # an unrelated folder
    project.mkdir()
    env = dict(os.environ, PYTHONPATH=str(site))
    init = _run(
        [python, "-m", "conformance", "init", "openreg", "-o", "m/openreg.toml"], project, env
    )
    assert init.returncode == 0, init.stdout[-2000:] + init.stderr[-2000:]
    start = time.monotonic()
    command = [python, "-m", "conformance", "--backend", "openreg", "--manifest-dir", "m"]
    command += ["--profile", "quick", "--json", "run.json", "--markdown", "run.md"]
    done = _run(command, project, env, timeout=1800)
    seconds = time.monotonic() - start
    run = json.loads((project / "run.json").read_text())
    recorded = json.loads(RECORDED.read_text())
    outcomes = {r["nodeid"].split("/", 1)[1]: r["outcome"] for r in run["results"]}
    counts = {o: list(outcomes.values()).count(o) for o in sorted(set(outcomes.values()))}
    groups = report.failure_groups(run["results"], "openreg")
    print(f"\nOpenReg quick: {seconds:.0f} s, {counts}, {len(groups)} causes")
    tail = done.stdout[-3000:]

    wrong = [test for test in ONCE_WRONG if outcomes.get(test) in ("failed", "error")]
    assert not wrong, f"wrong verdicts again: {wrong}\n{tail}"
    expected = {
        r["nodeid"].split("/", 1)[1]
        for r in recorded["results"]
        if r["outcome"] in ("failed", "error")
    }
    still = {test for test in expected if outcomes.get(test) in ("failed", "error", "timeout")}
    # A crash or a drawn example may move between runs; OpenReg's departures may not vanish.
    assert len(still) >= 0.95 * len(expected), sorted(expected - still)
    torch_faults = {
        r["nodeid"].split("/", 1)[1] for r in recorded["results"] if r["outcome"] == "torch fault"
    }
    assert {t for t, o in outcomes.items() if o == "torch fault"} == torch_faults, tail
    assert all(r["torch_fault"].startswith("torch's fault (") for r in run["results"]
               if r["outcome"] == "torch fault")  # fmt: skip
    assert len(groups) <= 22, [key for key, _ in groups]
    assert done.returncode == 1  # OpenReg's own failures make the run red, torch's do not
