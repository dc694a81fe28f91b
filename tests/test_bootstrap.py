"""scripts/bootstrap, run for real in subprocesses.

Only the up-to-date path runs against the real .venv, and it changes nothing there. The failure
paths run a copy of the script in a temporary directory (its repository root), so even a
misbehaving bootstrap cannot touch the real .venv; they also prove that the prerequisites are
checked before any .venv is created.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.bootstrap

REPO = Path(__file__).resolve().parents[1]
BOOTSTRAP = REPO / "scripts" / "bootstrap"
UP_TO_DATE_LIMIT_S = 20.0


def run_bootstrap(
    script: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``script`` from an unrelated cwd (it must find its root by itself)."""
    return subprocess.run(
        ["bash", str(script), *args],
        cwd="/",
        env=env if env is not None else dict(os.environ),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=600,
    )


def clean_env(**overrides: str) -> dict[str, str]:
    """os.environ without the bootstrap overrides, plus ``overrides``."""
    env = {k: v for k, v in os.environ.items() if k not in {"BOOTSTRAP_PYTHON", "CXX"}}
    env.update(overrides)
    return env


@pytest.fixture
def scratch_repo(tmp_path: Path) -> Path:
    """A repository root holding only a copy of scripts/bootstrap (and no .venv)."""
    (tmp_path / "scripts").mkdir()
    shutil.copy2(BOOTSTRAP, tmp_path / "scripts" / "bootstrap")
    return tmp_path


def assert_failed_before_venv(result: subprocess.CompletedProcess[str], root: Path, *needles: str):
    """Bootstrap exited 1 with a message holding every needle, and created no .venv."""
    assert result.returncode == 1, f"expected exit 1, got {result.returncode}:\n{result.stderr}"
    for needle in needles:
        assert needle in result.stderr, f"{needle!r} not in bootstrap's message:\n{result.stderr}"
    assert not (root / ".venv").exists(), "bootstrap changed .venv before its checks passed"


def test_second_run_with_nothing_changed_is_fast_and_rebuilds_nothing() -> None:
    check = run_bootstrap(BOOTSTRAP, "--check")
    if check.returncode != 0:
        message = f"the real .venv is not up to date; run scripts/bootstrap first:\n{check.stderr}"
        if os.environ.get("DEVICE_AGNOSTIC_BOOTSTRAPPED"):
            # scripts/test bootstrapped just before: the stamps must match now.
            pytest.fail(message)
        pytest.skip(message)
    stamp = REPO / ".venv" / ".bootstrap-build.sha256"
    stamp_mtime = stamp.stat().st_mtime_ns

    start = time.monotonic()
    result = run_bootstrap(BOOTSTRAP)
    elapsed = time.monotonic() - start

    assert result.returncode == 0, result.stderr
    assert elapsed < UP_TO_DATE_LIMIT_S, f"up-to-date bootstrap took {elapsed:.1f} s"
    assert "requirements up to date" in result.stderr, result.stderr
    assert "extension and package up to date" in result.stderr, result.stderr
    assert "building" not in result.stderr, result.stderr
    assert stamp.stat().st_mtime_ns == stamp_mtime, "the build stamp was rewritten"


def test_missing_python_override_fails_with_a_clear_message(scratch_repo: Path) -> None:
    env = clean_env(BOOTSTRAP_PYTHON="/nonexistent/python3.11")
    result = run_bootstrap(scratch_repo / "scripts" / "bootstrap", env=env)
    assert_failed_before_venv(result, scratch_repo, "Python 3.11 is required", "BOOTSTRAP_PYTHON")


def test_no_python311_on_path_fails_with_install_hint(scratch_repo: Path, tmp_path: Path) -> None:
    # python3.11 and python3 on PATH exist but are not Python 3.11; they shadow the real ones.
    fakes = tmp_path / "fake-bin"
    fakes.mkdir()
    for name in ("python3.11", "python3"):
        fake = fakes / name
        fake.write_text("#!/bin/sh\necho 'Python 3.10.0'\nexit 1\n")
        fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    env = clean_env(PATH=f"{fakes}:/usr/bin:/bin")
    result = run_bootstrap(scratch_repo / "scripts" / "bootstrap", env=env)
    assert_failed_before_venv(result, scratch_repo, "Python 3.11 is required", "pyenv install 3.11")


def test_missing_cxx_compiler_fails_with_a_clear_message(scratch_repo: Path) -> None:
    env = clean_env(BOOTSTRAP_PYTHON=sys.executable, CXX="/nonexistent/g++")
    result = run_bootstrap(scratch_repo / "scripts" / "bootstrap", env=env)
    assert_failed_before_venv(result, scratch_repo, "no C++ compiler", "CXX=/nonexistent/g++")


def test_check_reports_out_of_date_without_changing_anything(scratch_repo: Path) -> None:
    (scratch_repo / "requirements.txt").write_text("")
    env = clean_env(BOOTSTRAP_PYTHON=sys.executable)
    result = run_bootstrap(scratch_repo / "scripts" / "bootstrap", "--check", env=env)
    assert_failed_before_venv(result, scratch_repo, "out of date")
