"""An allocator that ignores record_stream: like CUDA's caching allocator, it takes a block
back when the host frees the tensor and hands it to the next allocation of the same size, and
record_stream, which should keep the block out of reuse until the recorded stream's pending work
is done, tells it nothing. A tensor freed on one stream while another stream still has work to
read it is then overwritten by the next tensor made on the first stream. Invisible while the
backend runs every operation before returning (the read is done before the free); caught once
it is asynchronous (neuron with NEURON_LAUNCH_BLOCKING=0).

neuron's own allocator never reuses memory that queued work holds, so the mutant keeps its own
free list: the storage of a tensor passed to record_stream goes onto it when the host drops the
tensor, and ``empty.memory_format`` (what ``torch.empty``, ``torch.full``, ``torch.zeros`` and
``*_like`` allocate through) serves a request of the same size from it.
"""

from __future__ import annotations

import weakref

import torch

from mutants._library import override_neuron_kernel

# (device index, bytes) -> storages the host has freed, reusable at once
_free: dict[tuple[int, int], list[torch.UntypedStorage]] = {}


def _release(storage: torch.UntypedStorage) -> None:
    _free.setdefault((storage.device.index, storage.nbytes()), []).append(storage)


def _record_stream(self: torch.Tensor, stream: torch.Stream) -> None:
    # The recorded stream is dropped: the block is free as soon as the host frees the tensor.
    weakref.finalize(self, _release, self.untyped_storage())


def _empty(
    size: list[int],
    dtype: torch.dtype | None = None,
    layout: torch.layout | None = None,
    device: torch.device | None = None,
    pin_memory: bool | None = None,
    memory_format: torch.memory_format | None = None,
) -> torch.Tensor:
    dtype = dtype or torch.get_default_dtype()
    device = torch.device(device)
    index = device.index if device.index is not None else torch.accelerator.current_device_index()
    strides = [1] * len(size)
    for dim in range(len(size) - 2, -1, -1):
        strides[dim] = strides[dim + 1] * max(size[dim + 1], 1)
    numel = 1
    for extent in size:
        numel *= extent
    reusable = _free.get((index, numel * dtype.itemsize))
    if not reusable or memory_format not in (None, torch.contiguous_format):
        return torch.empty_strided(size, strides, dtype=dtype, device=device)
    shell = torch.empty_strided((0,), (1,), dtype=dtype, device=device)
    return shell.set_(reusable.pop(), 0, size, strides)


override_neuron_kernel("record_stream", _record_stream)
override_neuron_kernel("empty.memory_format", _empty)
