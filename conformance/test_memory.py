"""Memory accounting through torch.accelerator: allocated memory grows with a tensor and comes
back when it is freed, the peak holds until reset, the cache is reserved and released, the
capacity is reported, and allocating past it raises torch.OutOfMemoryError and harms nothing.

Measurements are deltas on this process's (xdist worker's) devices: each test collects the
garbage of earlier tests once, then measures with the garbage collector paused, so that nothing
is freed behind its back; memory that earlier tests left cached does not matter.
"""

from __future__ import annotations

import gc

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from .assertions import reproducer
from .backend import Backend
from .requirements import require, require_accelerator, require_api, require_devices

MiB = 1 << 20
MEMORY_API_SINCE = "2.9"
MEMORY_INFO_SINCE = "2.10"


def _require_memory(backend: Backend, capability: str = "memory_stats") -> None:
    require(backend, capability)
    require_accelerator(backend)
    require_api("torch.accelerator.memory_allocated", since=MEMORY_API_SINCE)
    if capability == "memory_capacity":
        require_api("torch.accelerator.get_memory_info", since=MEMORY_INFO_SINCE)


@pytest.fixture
def memory_backend(backend: Backend) -> Backend:
    """The backend, once it is known to report memory (skips before hypothesis starts)."""
    _require_memory(backend)
    return backend


@pytest.fixture(autouse=True)
def _garbage_collector_paused(backend: Backend):
    """Free what earlier tests dropped, once per test (a collection takes a good 0.1 s), then
    keep the collector from freeing anything while the test measures."""
    if not backend.capabilities.memory_stats:
        yield
        return
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _allocate(nbytes: int, device: torch.device) -> torch.Tensor:
    return torch.empty(nbytes, dtype=torch.uint8, device=device)


@given(nbytes=st.integers(1, 16 * MiB))
@example(nbytes=1)
@example(nbytes=MiB + 1)
def test_memory_allocated_grows_by_the_tensor_and_comes_back_after_del(
    memory_backend, device, nbytes
):
    before = torch.accelerator.memory_allocated(device)
    tensor = _allocate(nbytes, device)
    grown = torch.accelerator.memory_allocated(device) - before
    assert grown >= nbytes, f"allocating {nbytes} bytes raised memory_allocated by only {grown}"
    del tensor
    after = torch.accelerator.memory_allocated(device)
    assert after == before, (
        f"memory_allocated was {before} before a {nbytes}-byte tensor and is {after} after del"
    )


def test_max_memory_allocated_keeps_the_peak_until_reset(memory_backend, device):
    torch.accelerator.reset_peak_memory_stats(device)
    base = torch.accelerator.memory_allocated(device)
    assert torch.accelerator.max_memory_allocated(device) == base, (
        "right after reset_peak_memory_stats the peak must equal memory_allocated"
    )
    first, second = _allocate(3 * MiB, device), _allocate(4096, device)
    peak = torch.accelerator.memory_allocated(device)
    assert peak >= base + 3 * MiB + 4096
    del first, second
    assert torch.accelerator.max_memory_allocated(device) == peak, (
        f"max_memory_allocated is {torch.accelerator.max_memory_allocated(device)} after the "
        f"tensors were freed; the peak was {peak}"
    )
    assert torch.accelerator.max_memory_reserved(device) >= torch.accelerator.memory_reserved(
        device
    ), "max_memory_reserved is below memory_reserved"
    torch.accelerator.reset_peak_memory_stats(device)
    assert torch.accelerator.max_memory_allocated(device) == base, (
        f"after reset_peak_memory_stats the peak is "
        f"{torch.accelerator.max_memory_allocated(device)}, memory_allocated is {base}"
    )


def test_memory_reserved_is_at_least_memory_allocated(memory_backend, device):
    tensors = [_allocate(nbytes, device) for nbytes in (1, 700_000, MiB + 1, 9 * MiB)]
    allocated = torch.accelerator.memory_allocated(device)
    reserved = torch.accelerator.memory_reserved(device)
    assert reserved >= allocated, f"memory_reserved {reserved} < memory_allocated {allocated}"
    stats = torch.accelerator.memory_stats(device)
    assert stats.get("allocated_bytes.all.current") == allocated, (
        "memory_stats()['allocated_bytes.all.current'] disagrees with memory_allocated()"
    )
    del tensors


def test_empty_cache_releases_the_cached_memory(memory_backend, device):
    nbytes = 32 * MiB
    tensor = _allocate(nbytes, device)
    holding = torch.accelerator.memory_reserved(device)
    del tensor
    torch.accelerator.empty_cache()
    released = holding - torch.accelerator.memory_reserved(device)
    assert released >= nbytes, (
        f"empty_cache released {released} bytes after a {nbytes}-byte tensor was freed"
    )


def test_empty_cache_keeps_the_values_of_live_tensors(backend, device):
    # Not tied to memory_stats: every accelerator has empty_cache, and whatever it releases must
    # be memory no tensor uses. Freed neighbours of every size class put blocks in the cache
    # next to the live ones, a view keeps its base's block alive, and the live tensors are read
    # back after the release and used again (an allocator that released a live block hands it
    # out to the next allocation).
    require_accelerator(backend)
    require_api("torch.accelerator.empty_cache", since=MEMORY_API_SINCE)
    expected, live, freed = [], [], []
    for index, nbytes in enumerate((4, 700_000, MiB + 4, 9 * MiB)):
        host = torch.arange(nbytes // 4, dtype=torch.float32) * (index + 1) - 7
        expected.append(host)
        live.append(host.to(device))
        freed.append(torch.ones(nbytes // 4, device=device))
    view = live[2][1:]
    del freed
    torch.accelerator.empty_cache()
    reused = [torch.zeros(t.numel(), device=device) for t in live]
    for host, tensor in zip(expected, live, strict=True):
        assert torch.equal(tensor.cpu(), host), (
            f"a live {host.numel() * 4}-byte tensor changed its values across "
            "torch.accelerator.empty_cache(): the cache released memory a tensor still uses"
            + reproducer(
                f"x = torch.arange({host.numel()}.0, device='{device}')\n"
                f"y = torch.ones({host.numel()}, device='{device}'); del y\n"
                "torch.accelerator.empty_cache()\nprint(torch.equal(x.cpu(), "
                f"torch.arange({host.numel()}.0)))"
            )
        )
    assert torch.equal(view.cpu(), expected[2][1:]), (
        "a live view changed its values across torch.accelerator.empty_cache()"
    )
    assert all(torch.count_nonzero(t).item() == 0 for t in reused)


OPERATORS = {
    "matmul": lambda x: x @ x,
    "cat": lambda x: torch.cat([x, x]),
    "sort": lambda x: torch.sort(x, dim=1).values,
    "nonzero": lambda x: torch.nonzero(x > 0),
    "transpose.contiguous": lambda x: x.t().contiguous(),
}


@pytest.mark.parametrize("operator", sorted(OPERATORS))
def test_operator_results_count_in_memory_allocated_and_come_back(memory_backend, device, operator):
    source = torch.randn(128, 128, device=device)
    before = torch.accelerator.memory_allocated(device)
    result = OPERATORS[operator](source)
    nbytes = result.untyped_storage().nbytes()
    grown = torch.accelerator.memory_allocated(device) - before
    assert grown >= nbytes, (
        f"{operator} made a {nbytes}-byte result, but memory_allocated grew by only {grown}"
    )
    del result
    after = torch.accelerator.memory_allocated(device)
    assert after == before, (
        f"memory_allocated was {before} before {operator} and is {after} after its result was "
        "freed: the operator leaks device memory"
    )


def test_memory_statistics_are_per_device(backend):
    _require_memory(backend)
    require_devices(backend)
    before = torch.accelerator.memory_allocated(0)
    tensor = _allocate(2 * MiB, backend.device(1))
    assert torch.accelerator.memory_allocated(1) >= 2 * MiB
    assert torch.accelerator.memory_allocated(0) == before, (
        "allocating on device 1 changed memory_allocated of device 0"
    )
    del tensor


# ---- capacity ------------------------------------------------------------------------------------


def test_get_memory_info_reports_free_at_most_total(backend, device):
    _require_memory(backend, "memory_capacity")
    free, total = torch.accelerator.get_memory_info(device)
    assert 0 <= free <= total and total > 0, f"get_memory_info() is (free={free}, total={total})"
    reserved = torch.accelerator.memory_reserved(device)
    assert reserved <= total, f"memory_reserved {reserved} exceeds the total memory {total}"


# Ways to ask for more than the device holds: a bare allocation, a factory that writes, and an
# operator whose result is bigger than its input.
PAST_CAPACITY = {
    "torch.empty": lambda n, device: torch.empty(n, dtype=torch.uint8, device=device),
    "torch.zeros": lambda n, device: torch.zeros(n, dtype=torch.uint8, device=device),
    "expand.contiguous": lambda n, device: (
        torch.ones(1, dtype=torch.uint8, device=device).expand(n).contiguous()
    ),
}


@pytest.mark.parametrize("way", sorted(PAST_CAPACITY))
def test_allocating_past_the_capacity_raises_out_of_memory_and_harms_nothing(backend, device, way):
    _require_memory(backend, "memory_capacity")
    _, total = torch.accelerator.get_memory_info(device)
    before = torch.accelerator.memory_allocated(device)
    nbytes = total + 2 * MiB
    with pytest.raises(torch.OutOfMemoryError):
        PAST_CAPACITY[way](nbytes, device)
    after = torch.accelerator.memory_allocated(device)
    assert after == before, (
        f"memory_allocated went from {before} to {after} across a failed {nbytes}-byte {way}"
    )
    values = torch.arange(4.0, device=device) + 1
    assert values.cpu().tolist() == [1.0, 2.0, 3.0, 4.0], "the device fails after an OOM"
