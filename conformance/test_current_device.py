"""The device-dependent calls that take no device index act on the *current* device, with a
device other than 0 current: memory statistics (torch.accelerator's and the device module's),
an index-less ``map_location`` and an index-less device string. Device 0 is current in almost
every other test, so a call that always means device 0 passes them all.
"""

from __future__ import annotations

import gc
import io

import pytest
import torch

from .assertions import reproducer
from .backend import Backend
from .requirements import require, require_accelerator, require_api, require_devices

MiB = 1 << 20


@pytest.fixture
def device_1_current(backend: Backend):
    """Device 1 made current for the test, the previous one restored after it."""
    require_devices(backend)
    require_accelerator(backend)
    previous = torch.accelerator.current_device_index()
    torch.accelerator.set_device_index(1)
    try:
        yield backend.device(1)
    finally:
        torch.accelerator.set_device_index(previous)


STATISTICS = ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved")


@pytest.mark.parametrize("where", ["torch.accelerator", "device module"])
def test_peak_memory_statistics_without_an_index_are_the_current_devices(
    backend, device_1_current, where
):
    """With device 1 current, reset_peak_memory_stats() and the statistics called without an
    index are device 1's: the peak after a 4 MiB tensor on device 1 covers it, and every
    statistic equals the one asked of device 1 by index."""
    require(backend, "memory_stats")
    require_api("torch.accelerator.memory_allocated", since="2.9")
    module = torch.accelerator if where == "torch.accelerator" else backend.module
    missing = [
        name for name in (*STATISTICS, "reset_peak_memory_stats") if not hasattr(module, name)
    ]
    if missing:
        pytest.skip(f"not applicable: {module.__name__} has no {', '.join(missing)}")
    gc.collect()
    module.reset_peak_memory_stats()
    base = module.memory_allocated(1)
    tensor = torch.empty(4 * MiB, dtype=torch.uint8, device=device_1_current)
    del tensor
    how = reproducer(
        f"torch.accelerator.set_device_index(1)\n{module.__name__}.reset_peak_memory_stats()\n"
        f"x = torch.empty({4 * MiB}, dtype=torch.uint8, device='{device_1_current}')\n"
        f"print({module.__name__}.max_memory_allocated(), "
        f"{module.__name__}.max_memory_allocated(1))"
    )
    for name in STATISTICS:
        without, by_index = getattr(module, name)(), getattr(module, name)(1)
        assert without == by_index, (
            f"with device 1 current, {module.__name__}.{name}() is {without}, device 1's is "
            f"{by_index}" + how
        )
    peak = module.max_memory_allocated()
    assert peak >= base + 4 * MiB, (
        f"with device 1 current, {module.__name__}.max_memory_allocated() is {peak} after "
        f"reset_peak_memory_stats() and a 4 MiB tensor on device 1 (allocated before: {base})" + how
    )


@pytest.mark.parametrize("weights_only", [True, False], ids=["weights_only", "full_pickle"])
def test_an_index_less_map_location_loads_onto_the_current_device(
    backend, device_1_current, weights_only
):
    """torch.load(map_location="<type>") puts the tensors on the current device, as CUDA does
    ("cuda" means torch.cuda.current_device()), whichever device they were saved from."""
    require(backend, "serialization")
    buffer = io.BytesIO()
    saved = {"from 0": torch.arange(3.0, device=backend.device(0)), "from cpu": torch.ones(2)}
    torch.save(saved, buffer)
    for map_location in (backend.name, torch.device(backend.name)):
        buffer.seek(0)
        loaded = torch.load(buffer, map_location=map_location, weights_only=weights_only)
        for key, tensor in loaded.items():
            assert tensor.device == device_1_current, (
                f"with device 1 current, torch.load(map_location={map_location!r}) put "
                f"{key!r} on {tensor.device}, not the current device {device_1_current}"
                + reproducer(
                    f"torch.accelerator.set_device_index(1)\nbuffer = io.BytesIO()\n"
                    f"torch.save(torch.ones(2, device='{backend.device(0)}'), buffer)\n"
                    f"buffer.seek(0)\nprint(torch.load(buffer, map_location='{backend.name}'))"
                )
            )
            assert torch.equal(tensor.cpu(), saved[key].cpu()), key


@pytest.mark.parametrize(
    "how",
    ["tensor.to(type)", "factory device=type", "torch.device(type)"],
)
def test_an_index_less_device_means_the_current_device(backend, device_1_current, how):
    source = torch.arange(4.0)
    if how == "tensor.to(type)":
        result = source.to(backend.name)
    elif how == "factory device=type":
        result = torch.ones(4, device=backend.name)
    else:
        result = torch.zeros(4, device=torch.device(backend.name))
    assert result.device == device_1_current, (
        f"with device 1 current, {how} gave a tensor on {result.device}"
    )
