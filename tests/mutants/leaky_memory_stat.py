"""A memory statistic that does not come back after free: memory_allocated reports the peak."""

import torch

_max_memory_allocated = torch.accelerator.max_memory_allocated


def _memory_allocated(device_index=None) -> int:
    return _max_memory_allocated(device_index)


torch.accelerator.memory_allocated = _memory_allocated
torch.neuron.memory_allocated = _memory_allocated
