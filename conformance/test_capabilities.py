"""The manifest tells the truth: each declared capability is probed, and each capability the
backend declares absent must be absent (a backend may not silently compute in a dtype it says
it lacks). A contradiction fails here, naming the manifest line to fix."""

from __future__ import annotations

import io

import pytest
import torch

from .probes import dtype_works, per_device_rng
from .strategies import CORE_DTYPES


def _contradiction(backend, capability: str, declared: bool, observed: str) -> str:
    return (
        f"{backend.manifest.source} declares {capability} = {str(declared).lower()}, but {observed}"
    )


@pytest.mark.parametrize("dtype", CORE_DTYPES, ids=str)
def test_declared_dtypes_match_behaviour(backend, device, dtype):
    # The probe `conformance init` writes the manifest's dtypes from.
    declared = backend.capabilities.supports(dtype)
    works, evidence = dtype_works(device, dtype)
    assert works == declared, _contradiction(
        backend, f"dtypes[{dtype}]", declared, "it works" if works else evidence
    )


def test_multiple_devices(backend):
    if not backend.capabilities.multiple_devices:
        pytest.skip("not applicable: multiple_devices not declared")
    count = backend.device_count
    assert count >= 2, _contradiction(
        backend, "multiple_devices", True, f"the device count is {count}"
    )


def test_streams(backend, device):
    if not backend.capabilities.streams:
        pytest.skip("not applicable: streams not declared")
    stream = torch.Stream(device=device)
    with stream:
        torch.ones(4, device=device).mul_(2)
    stream.synchronize()
    assert stream.query()


def test_event_timing(backend, device):
    if not backend.capabilities.event_timing:
        pytest.skip("not applicable: event_timing not declared")
    start = torch.Event(device=device, enable_timing=True)
    end = torch.Event(device=device, enable_timing=True)
    start.record()
    torch.ones(1000, device=device).sum()
    end.record()
    end.synchronize()
    assert start.elapsed_time(end) >= 0


def test_memory_stats(backend, device):
    if not backend.capabilities.memory_stats:
        pytest.skip("not applicable: memory_stats not declared")
    before = torch.accelerator.memory_allocated(device.index)
    tensor = torch.empty(1 << 20, dtype=torch.uint8, device=device)
    grown = torch.accelerator.memory_allocated(device.index) - before
    del tensor
    assert grown >= 1 << 20, _contradiction(
        backend, "memory_stats", True, f"a 1 MiB tensor grew memory_allocated by {grown} bytes"
    )


def test_memory_capacity(backend, device):
    if not backend.capabilities.memory_capacity:
        pytest.skip("not applicable: memory_capacity not declared")
    free, total = torch.accelerator.get_memory_info(device.index)
    assert 0 <= free <= total and total > 0


def test_pinned_memory(backend):
    declared = backend.capabilities.pinned_memory
    if not declared:
        pytest.skip("not applicable: pinned_memory not declared")
    pinned = torch.ones(16).pin_memory()
    assert pinned.is_pinned(), _contradiction(
        backend, "pinned_memory", True, "is_pinned() is False"
    )


def test_per_device_rng(backend):
    if not backend.capabilities.per_device_rng:
        pytest.skip("not applicable: per_device_rng not declared")
    works, evidence = per_device_rng(backend.device())
    assert works, _contradiction(backend, "per_device_rng", True, evidence)


def test_serialization(backend, device):
    declared = backend.capabilities.serialization
    buffer = io.BytesIO()
    torch.save(torch.arange(3.0, device=device), buffer)
    buffer.seek(0)
    loaded = torch.load(buffer)
    keeps_device = loaded.device.type == device.type
    assert keeps_device == declared, _contradiction(
        backend, "serialization", declared, f"a saved tensor loads onto {loaded.device}"
    )
