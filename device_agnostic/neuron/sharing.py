"""Neuron tensors shared between processes, through ``torch.multiprocessing``.

``tensor.share_memory_()`` (so ``module.share_memory()``) moves a neuron storage's bytes into
shared device memory, keeping the storage, its device and every tensor viewing it; putting a
neuron tensor on a ``torch.multiprocessing`` queue, or passing it to a process it starts, does
the same first, as torch does for CPU tensors. The receiving process maps the same memory and
gets a neuron tensor on the same device index, with the same geometry and ``requires_grad``: a
write in either process is seen by the other. The memory lives until no process holds it.

How: the shareable allocation is the driver's (``csrc/driver/neuron_driver_ipc.h``), whose
handle is a file descriptor; a storage pickles as that handle (``multiprocessing``'s ``DupFd``,
which passes it over a Unix socket), its size and its device index, and rebuilds through
``rebuild_storage``; a tensor pickles as its storage and geometry, rebuilt by torch's own
``rebuild_tensor``. The reducers are registered with ``multiprocessing``'s ``ForkingPickler``
for the classes torch registers its own for (``torch.Tensor``, ``Parameter``,
``torch.UntypedStorage``), in their place, and hand everything not on neuron to torch's. The
tensor reducer is neuron's too, not torch's ``reduce_tensor``: with the patch series (0026)
torch's refuses every device it cannot share itself, naming ``tensor.cpu()``. Neuron storages
always use file descriptors, whatever ``torch.multiprocessing.get_sharing_strategy()`` says
("file_system" concerns CPU storages).

Ordering across processes is the user's, as on CUDA: in the asynchronous mode
(``NEURON_LAUNCH_BLOCKING=0``) call ``torch.neuron.synchronize()`` before telling another
process that a tensor is ready.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from multiprocessing.reduction import DupFd, ForkingPickler
from typing import Any

import torch
from torch.multiprocessing import reductions as torch_reductions

from . import _C

DEVICE_TYPE = "neuron"


def _carrier(storage: torch.UntypedStorage) -> torch.Tensor:
    """A uint8 tensor over ``storage``: how the C++ side receives a storage."""
    return torch.empty(0, dtype=torch.uint8, device=storage.device).set_(storage)


def share_storage(storage: torch.UntypedStorage) -> None:
    """Move a neuron storage into shared device memory (a no-op if it already is, or is empty)."""
    _C._share_storage(_carrier(storage))


def is_shared(storage: torch.UntypedStorage) -> bool:
    """Whether a neuron storage is in shared device memory."""
    return _C._is_shared_storage(_carrier(storage))


def _cache_key(fd: int) -> tuple[str, int, int]:
    # The shared memory's identity, as torch keys CPU storages shared by file descriptor: a
    # storage received twice (a tensor and its view, two parameters of one storage) rebuilds
    # as one storage, and a storage sent back to its owner is the owner's own.
    return (DEVICE_TYPE, *torch_reductions.fd_id(fd))


def reduce_storage(storage: torch.UntypedStorage) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """The ``ForkingPickler`` reducer of ``torch.UntypedStorage``: neuron storages travel as a
    handle to shared device memory; every other storage goes to torch's reducer."""
    if storage.device.type != DEVICE_TYPE:
        return torch_reductions.reduce_storage(storage)
    if storage.nbytes() == 0:
        # Nothing to map (as torch's CPU path, which cannot mmap an empty storage either).
        return (rebuild_empty_storage, (storage.device.index,))
    handle, nbytes = _C._shared_storage_handle(_carrier(storage))
    torch_reductions.shared_cache[_cache_key(handle)] = torch_reductions.StorageWeakRef(storage)
    return (rebuild_storage, (DupFd(handle), nbytes, storage.device.index))


def rebuild_storage(handle: Any, nbytes: int, device_index: int) -> torch.UntypedStorage:
    """The receiving side of ``reduce_storage``: a neuron storage on ``neuron:device_index``
    mapping the sender's shared memory."""
    fd = handle.detach()
    key = _cache_key(fd)
    cached = torch_reductions.storage_from_cache(torch.UntypedStorage, key)
    if cached is not None:
        os.close(fd)
        return cached
    # _open_shared_storage owns fd from here on (closed with the storage, or on failure).
    storage = _C._open_shared_storage(fd, nbytes, device_index).untyped_storage()
    torch_reductions.shared_cache[key] = torch_reductions.StorageWeakRef(storage)
    return storage


def reduce_tensor(tensor: torch.Tensor) -> tuple[Callable[..., Any], tuple[Any, ...]]:
    """The ``ForkingPickler`` reducer of tensors: a dense neuron tensor travels as its storage
    (``reduce_storage``) and geometry, as torch sends a CPU tensor; every other tensor goes to
    torch's reducer."""
    if tensor.device.type != DEVICE_TYPE or tensor.layout != torch.strided or tensor.is_nested:
        return torch_reductions.reduce_tensor(tensor)
    if tensor.requires_grad and not tensor.is_leaf:
        raise RuntimeError(
            "Cowardly refusing to serialize non-leaf tensor which requires_grad, since autograd "
            "does not support crossing process boundaries. If you just want to transfer the "
            "data, call detach() on the tensor before serializing (e.g., putting it on the "
            "queue)."
        )  # torch's own refusal, word for word
    torch.utils.hooks.warn_if_has_hooks(tensor)
    metadata = (tensor.storage_offset(), tensor.size(), tensor.stride(), tensor.requires_grad)
    return (torch_reductions.rebuild_tensor, (type(tensor), tensor._typed_storage(), metadata))


def rebuild_empty_storage(device_index: int) -> torch.UntypedStorage:
    return torch.UntypedStorage(0, device=torch.device(DEVICE_TYPE, device_index))


def install() -> None:
    """Register the reducers with ``ForkingPickler`` (and torch's typed-storage reducer for
    torch.neuron's legacy storage classes, created after torch registered its own), and make
    ``share_memory_()``/``is_shared()`` act on neuron storages (stock_torch.py)."""
    from torch.nn.parameter import Parameter

    from . import stock_torch

    for tensor_class in (torch.Tensor, Parameter, *torch._tensor_classes):
        ForkingPickler.register(tensor_class, reduce_tensor)
    ForkingPickler.register(torch.UntypedStorage, reduce_storage)
    for storage_class in torch._storage_classes:
        if storage_class.__module__ == f"torch.{DEVICE_TYPE}":
            ForkingPickler.register(storage_class, torch_reductions.reduce_typed_storage_child)
    stock_torch.share_storages_of_device(DEVICE_TYPE, share_storage, is_shared)
