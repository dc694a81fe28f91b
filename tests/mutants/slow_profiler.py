"""A profiler that stalls the device: while a profiler is recording, every operator on neuron
waits a millisecond (a runtime that reads its device timer back synchronously per event)."""

from __future__ import annotations

import time

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class _StallWhileProfiling(TorchDispatchMode):
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if torch.autograd._profiler_enabled() and any(
            isinstance(a, torch.Tensor) and a.device.type == "neuron" for a in args
        ):
            time.sleep(0.001)
        return func(*args, **(kwargs or {}))


_mode = _StallWhileProfiling()
_mode.__enter__()
