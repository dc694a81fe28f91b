"""A stream that reorders work: on a non-default neuron stream, each in-place op is held back
and run after the next one (so ``x.mul_(2); x.add_(1)`` runs as ``x.add_(1); x.mul_(2)``)."""

from __future__ import annotations

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class _Reorder(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.held: tuple | None = None

    def _on_side_stream(self, args: tuple) -> bool:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if not tensors or tensors[0].device.type != "neuron":
            return False
        return torch.accelerator.current_stream(tensors[0].device.index).stream_id != 0

    def flush(self) -> None:
        if self.held is not None:
            func, args, kwargs = self.held
            self.held = None
            func(*args, **kwargs)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func._schema.is_mutable and self._on_side_stream(args):
            if self.held is None:
                self.held = (func, args, kwargs)
                return args[0]
            result = func(*args, **kwargs)
            self.flush()
            return result
        self.flush()
        return func(*args, **kwargs)


_mode = _Reorder()
_mode.__enter__()

_synchronize = torch.accelerator.synchronize


def _flushing_synchronize(*args, **kwargs):
    # torch.Stream/torch.Event are immutable C types; flushing on device synchronize (and on
    # the next out-of-stream op, above) is enough to hand back results in the wrong order.
    _mode.flush()
    return _synchronize(*args, **kwargs)


torch.accelerator.synchronize = _flushing_synchronize
