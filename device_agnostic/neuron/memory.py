"""Device memory: the torch.cuda-style names, each a thin call into torch.accelerator.

The statistics come from the neuron caching allocator (csrc/NeuronDeviceAllocator.cpp); their
keys and meaning are those of torch.cuda.memory_stats().
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import torch

from ._device import _DeviceLike, device_index


def memory_stats(device: _DeviceLike = None) -> OrderedDict[str, Any]:
    """Return the allocator's statistics for ``device`` (see torch.cuda.memory_stats)."""
    return torch.accelerator.memory_stats(device_index(device))


def memory_allocated(device: _DeviceLike = None) -> int:
    """Return the bytes occupied by tensors on ``device``."""
    return torch.accelerator.memory_allocated(device_index(device))


def max_memory_allocated(device: _DeviceLike = None) -> int:
    """Return the peak of memory_allocated() since start or the last reset."""
    return torch.accelerator.max_memory_allocated(device_index(device))


def memory_reserved(device: _DeviceLike = None) -> int:
    """Return the bytes the caching allocator holds on ``device`` (allocated or cached)."""
    return torch.accelerator.memory_reserved(device_index(device))


def max_memory_reserved(device: _DeviceLike = None) -> int:
    """Return the peak of memory_reserved() since start or the last reset."""
    return torch.accelerator.max_memory_reserved(device_index(device))


def reset_peak_memory_stats(device: _DeviceLike = None) -> None:
    """Reset the peaks tracked by memory_stats() to their current values."""
    torch.accelerator.reset_peak_memory_stats(device_index(device))


def reset_accumulated_memory_stats(device: _DeviceLike = None) -> None:
    """Reset the accumulated (allocated/freed) counters of memory_stats()."""
    torch.accelerator.reset_accumulated_memory_stats(device_index(device))


def empty_cache() -> None:
    """Release the cached, unused device memory of every neuron device."""
    torch.accelerator.empty_cache()


def mem_get_info(device: _DeviceLike = None) -> tuple[int, int]:
    """Return (free, total) bytes of ``device``: total is its capacity (NEURON_DEVICE_MEMORY)."""
    return torch.accelerator.get_memory_info(device_index(device))
