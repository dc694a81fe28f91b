"""A reduction that ignores the strides of a view: sum on neuron reads a non-contiguous input
as if it were contiguous (its elements in storage order from the view's offset), as a kernel
written for the contiguous tensors that ``.to(device)`` makes would. Only a view taken on the
device (a slice with steps, a transpose) shows it."""

import torch

from mutants._library import override_neuron_kernel


def _as_if_contiguous(self: torch.Tensor) -> torch.Tensor:
    """The bug: the view's shape over its storage read linearly from its offset (where that
    stays inside the storage; an expanded view is read correctly)."""
    if self.is_contiguous():
        return self.cpu()
    storage_numel = self.untyped_storage().nbytes() // self.element_size()
    if self.storage_offset() + self.numel() > storage_numel:
        return self.cpu()
    linear = torch.empty(0, dtype=self.dtype, device=self.device)
    linear.set_(self.untyped_storage(), self.storage_offset(), self.shape)
    return linear.cpu()


def _sum(self: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    return torch.sum(_as_if_contiguous(self), dtype=dtype).to(self.device)


def _sum_dim(self, dim=None, keepdim=False, *, dtype=None):
    return torch.sum(_as_if_contiguous(self), dim, keepdim, dtype=dtype).to(self.device)


override_neuron_kernel("sum", _sum)
override_neuron_kernel("sum.dim_IntList", _sum_dim)
