"""An empty_cache that releases the blocks of live tensors too, whose memory the runtime then
reuses: every live neuron tensor's storage reads back as 0xFF bytes (what the next owner of
the memory wrote) after torch.accelerator.empty_cache()."""

import gc

import torch

_empty_cache = torch.accelerator.empty_cache


def _empty_cache_releasing_live_blocks() -> None:
    _empty_cache()
    storages = {}
    for obj in gc.get_objects():
        if isinstance(obj, torch.Tensor) and obj.device.type == "neuron":
            storage = obj.untyped_storage()
            storages[storage.data_ptr()] = (storage, obj.device)
    for storage, device in storages.values():
        torch.empty(0, dtype=torch.uint8, device=device).set_(storage).fill_(0xFF)


torch.accelerator.empty_cache = _empty_cache_releasing_live_blocks
torch.neuron.empty_cache = _empty_cache_releasing_live_blocks
