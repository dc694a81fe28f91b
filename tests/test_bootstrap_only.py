"""`scripts/bootstrap --only` sets up one product without a compiler, and the entry points that
need .venv say how to make it.

Each test runs copies of the scripts in a scratch repository root (the files a clone has for
that product), so the real .venv is never touched. The install is offline, from build/wheelhouse
(scripts/bootstrap fills it), with a compiler that does not exist: the scanner's setup must not
look for one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
WHEELHOUSE = REPO / "build" / "wheelhouse"
JUNK = shutil.ignore_patterns("__pycache__", "*.pyc", "build", "*.egg-info")
ONLY_SCAN_LIMIT_S = 120.0  # loose: venv creation and one offline install


def scratch_root(root: Path, *paths: str) -> Path:
    for path in ("scripts/bootstrap", "scripts/patches", "requirements.txt", *paths):
        source, target = REPO / path, root / path
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=JUNK)
        else:
            shutil.copy2(source, target)
    return root


def offline_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON"))}
    env.update(
        PIP_CONFIG_FILE=os.devnull,
        PIP_NO_INDEX="1",
        PIP_FIND_LINKS=str(WHEELHOUSE),
        PIP_DISABLE_PIP_VERSION_CHECK="1",
        BOOTSTRAP_PYTHON=shutil.which("python3.11") or sys.executable,
        CXX="/nonexistent/c++",
    )
    env.update(extra)
    return env


def run(args: list, env: dict[str, str], cwd: Path = Path("/")) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(a) for a in args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_only_scan_installs_da_scan_without_compiler_or_torch(tmp_path: Path) -> None:
    if not list(WHEELHOUSE.glob("libcst-*.whl")):
        message = "build/wheelhouse is missing; run scripts/bootstrap"
        if os.environ.get("DEVICE_AGNOSTIC_BOOTSTRAPPED"):
            pytest.fail(message)
        pytest.skip(message)
    root = scratch_root(tmp_path / "clone", "packaging/da-scan", "device_agnostic/scan")
    env = offline_env()
    bootstrap = root / "scripts" / "bootstrap"

    assert run(["bash", bootstrap, "--only", "scan", "--check"], env).returncode == 1
    start = time.monotonic()
    first = run(["bash", bootstrap, "--only", "scan"], env)
    seconds = time.monotonic() - start
    assert first.returncode == 0, first.stderr
    print(f"\nscripts/bootstrap --only scan: {seconds:.1f} s")
    assert seconds < ONLY_SCAN_LIMIT_S
    assert "compiler" not in first.stderr, first.stderr

    python = root / ".venv" / "bin" / "python"
    probe = "import importlib.util as u; print(u.find_spec('torch') is None)"
    assert run([python, "-I", "-c", probe], env).stdout == "True\n"
    (project := tmp_path / "project").mkdir()
    (project / "train.py").write_text("import torch\nx = torch.zeros(2).cuda()\n")
    scanned = run([root / ".venv" / "bin" / "da-scan", "train.py"], env, cwd=project)
    assert scanned.returncode == 1 and "DA102" in scanned.stdout, scanned.stdout + scanned.stderr

    again = run(["bash", bootstrap, "--only", "scan"], env)
    assert again.returncode == 0 and "scan up to date" in again.stderr, again.stderr
    assert run(["bash", bootstrap, "--only", "scan", "--check"], env).returncode == 0
    # The whole development install is still out of date: --only did not pretend otherwise.
    whole = run(["bash", bootstrap, "--check"], offline_env(CXX=shutil.which("g++") or "g++"))
    assert whole.returncode == 1 and "out of date" in whole.stderr, whole.stderr


def test_unknown_product_is_refused_before_anything_is_made(tmp_path: Path) -> None:
    root = scratch_root(tmp_path)
    for product, needle in (("backend", "without --only"), ("docs", "choose from patches")):
        result = run(["bash", root / "scripts" / "bootstrap", "--only", product], offline_env())
        assert result.returncode == 1 and needle in result.stderr, result.stderr
    assert not (root / ".venv").exists()


def test_patches_without_venv_says_how_to_make_it(tmp_path: Path) -> None:
    root = scratch_root(tmp_path)
    result = run([root / "scripts" / "patches", "check", "/nowhere"], offline_env())
    assert result.returncode == 2, result.stderr
    assert "scripts/bootstrap --only patches" in result.stderr, result.stderr
    assert "No such file" not in result.stderr
