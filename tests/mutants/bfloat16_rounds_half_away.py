"""A conversion that rounds halfway values away from zero: float32 to bfloat16 on neuron adds
half a unit in the last place and truncates (a common cheap rounding), where PyTorch rounds to
nearest even. Only values exactly halfway between two bfloat16 neighbours show it."""

import torch

from mutants._library import override_neuron_kernel


def _to_copy(
    self,
    *,
    dtype=None,
    layout=None,
    device=None,
    pin_memory=None,
    non_blocking=False,
    memory_format=None,
):
    target_dtype = dtype if dtype is not None else self.dtype
    target_device = device if device is not None else self.device
    out = torch.empty_like(
        self,
        dtype=target_dtype,
        device=target_device,
        pin_memory=bool(pin_memory),
        memory_format=memory_format or torch.preserve_format,
    )
    source = self
    if self.dtype == torch.float32 and target_dtype == torch.bfloat16:
        bits = self.contiguous().view(torch.int32)
        # + 0x8000 then drop the low 16 bits: half away from zero (sign-magnitude bits)
        rounded = ((bits + 0x8000) & -65536).view(torch.float32)
        source = torch.where(self.isfinite(), rounded, self)
    return out.copy_(source, non_blocking=non_blocking)


override_neuron_kernel("_to_copy", _to_copy)
