"""Memory statistics without an index that always mean device 0: the neuron device module's
max_memory_allocated() (and reset_peak_memory_stats()) default to device 0 rather than the
current device. Right whenever device 0 is current."""

import torch

_max_memory_allocated = torch.neuron.max_memory_allocated
_reset_peak_memory_stats = torch.neuron.reset_peak_memory_stats


def _device_0_by_default(function):
    def wrapper(device=None):
        return function(0 if device is None else device)

    return wrapper


torch.neuron.max_memory_allocated = _device_0_by_default(_max_memory_allocated)
torch.neuron.reset_peak_memory_stats = _device_0_by_default(_reset_peak_memory_stats)
