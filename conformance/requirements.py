"""What a test needs before its expectation means anything: a declared capability, the backend
being torch's current accelerator, or an API newer than the oldest torch the suite supports.

Each helper skips with a reason that starts "not applicable:", which the reports count as such.
"""

from __future__ import annotations

import pytest
import torch

from .backend import Backend


def require(backend: Backend, capability: str) -> None:
    """Skip unless the backend's manifest declares ``capability``.

    Use it only where the missing capability has no defined behaviour to test instead.
    """
    if not getattr(backend.capabilities, capability):
        pytest.skip(f"not applicable: {capability} not declared")


def require_devices(backend: Backend, count: int = 2) -> None:
    """Skip unless the backend declares multiple_devices and has at least ``count`` devices."""
    require(backend, "multiple_devices")
    if backend.device_count < count:
        pytest.skip(
            f"not applicable: needs {count} devices, {backend.name} has {backend.device_count}"
        )


def require_accelerator(backend: Backend) -> None:
    """Skip on the CPU; fail if an accelerator backend is not the one torch.accelerator drives
    (every torch.accelerator call would then judge another backend)."""
    if backend.is_cpu:
        pytest.skip(
            "not applicable: the CPU is not an accelerator (torch.accelerator does not drive it)"
        )
    current = torch.accelerator.current_accelerator()
    assert current is not None and current.type == backend.name, (
        f"torch.accelerator.current_accelerator() is {current}, not {backend.name}: the "
        f"{backend.name} backend must be torch's accelerator to be judged through torch.accelerator"
    )


def require_api(qualified_name: str, since: str) -> None:
    """Skip on a torch that predates ``qualified_name`` (e.g. "torch.accelerator.device_index"),
    which arrived in torch ``since``. Tests then call the API by its full name at run time."""
    owner: object = torch
    for part in qualified_name.split(".")[1:]:
        owner = getattr(owner, part, None)
        if owner is None:
            pytest.skip(f"not applicable: needs torch >= {since} ({qualified_name})")
