"""The ``neuron`` backend of ``torch.distributed``: gloo, moving neuron tensors in place.

Importing ``torch.neuron`` registers it, so that on a neuron machine each of these gives neuron
tensors this backend (and CPU tensors gloo)::

    dist.init_process_group("neuron")                        # neuron and CPU tensors
    dist.init_process_group("cpu:gloo,neuron:neuron")        # the same, spelled out
    dist.init_process_group(device_id=torch.device("neuron", rank))   # the accelerator's default

A neuron tensor's bytes are host memory, so the backend (csrc/NeuronProcessGroup.cpp) hands a
``ProcessGroupGloo`` CPU tensors that alias the neuron tensors' storage: results land in the neuron
tensors' own memory, with no copy to the CPU and back. Work objects are gloo's (asynchronous, with
``wait()`` and ``get_future()``), reporting the neuron tensors as their result.
"""

from __future__ import annotations

from datetime import timedelta

import torch.distributed as dist

from . import _C

BACKEND_NAME = "neuron"


def _create_backend(
    store: dist.Store, rank: int, world_size: int, timeout: timedelta
) -> dist.ProcessGroup:
    """The ``register_backend`` creator: a ProcessGroupGloo on the same store, wrapped."""
    gloo = dist.ProcessGroupGloo(store, rank, world_size, timeout)
    # What distributed_c10d does for a gloo it creates itself: agree on the sequence number.
    gloo._set_sequence_number_for_group()
    return _C._make_process_group(gloo)


def _register() -> None:
    """Registers ``neuron`` with torch.distributed for neuron and CPU tensors (idempotent).

    CPU is listed too so that ``init_process_group("neuron")`` alone serves the CPU tensors that
    torch.distributed itself moves (object collectives, DDP's parameter-shape check); the
    default backend of CPU tensors stays gloo.
    """
    if not dist.is_available() or not hasattr(dist, "ProcessGroupGloo"):
        return
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create_backend, devices=["cpu", "neuron"])


__all__ = ["BACKEND_NAME"]
