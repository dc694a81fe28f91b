"""A process group that loses its results: all_reduce of device tensors reduces a staging copy
and never writes it back, so the caller's tensor keeps its own rank's values (a backend that
stages through host buffers and forgets the copy-back). CPU tensors (gloo) are untouched."""

from __future__ import annotations

import torch
from torch._C._distributed_c10d import ProcessGroup

_allreduce = ProcessGroup.allreduce


def _allreduce_on_a_copy(self: ProcessGroup, tensors: object, *args: object, **kwargs: object):
    single = isinstance(tensors, torch.Tensor)
    listed = [tensors] if single else list(tensors)
    if listed and listed[0].device.type != "cpu":
        staged = [t.clone() for t in listed]
        return _allreduce(self, staged[0] if single else staged, *args, **kwargs)
    return _allreduce(self, tensors, *args, **kwargs)


ProcessGroup.allreduce = _allreduce_on_a_copy
