"""Shared fixtures for the project's own tests."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest
import torch


@pytest.fixture
def run_python() -> Callable[..., subprocess.CompletedProcess[str]]:
    """Run a Python snippet in a fresh interpreter (for environment-dependent behaviour).

    ``run_python(code, env={...}, timeout=60)`` returns the CompletedProcess; the snippet's
    environment is this one plus ``env`` (a value of None removes the variable).
    """

    def run(
        code: str, env: dict[str, str | None] | None = None, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        full_env = dict(os.environ)
        for key, value in (env or {}).items():
            if value is None:
                full_env.pop(key, None)
            else:
                full_env[key] = value
        return subprocess.run(
            [sys.executable, "-c", textwrap.dedent(code)],
            env=full_env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


@pytest.fixture
def restore_device() -> object:
    """Restore the current neuron device after the test, whatever it did."""
    previous = torch.accelerator.current_device_index()
    try:
        yield
    finally:
        torch.accelerator.set_device_index(previous)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The tests marked ``slow`` first (a stable sort): xdist hands out tests in collection
    order, and a 2-minute test handed out last would keep one worker busy while the other idles.
    """
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)
