"""Integer limits: sum of an integer tensor on neuron accumulates in the input's own width and
widens only the result to int64, so a sum that leaves int8/int16/int32's range wraps around
where PyTorch (which sums integers in int64) gives the exact value. Values near the dtype's
limits show it."""

import torch

from mutants._library import override_neuron_kernel


def _narrow(host: torch.Tensor, dtype: torch.dtype | None) -> bool:
    integer = not (host.is_floating_point() or host.is_complex() or host.dtype == torch.bool)
    return integer and dtype is None


def _sum(self: torch.Tensor, *, dtype: torch.dtype | None = None) -> torch.Tensor:
    host = self.cpu()
    if _narrow(host, dtype):
        return torch.sum(host, dtype=host.dtype).to(torch.int64).to(self.device)
    return torch.sum(host, dtype=dtype).to(self.device)


def _sum_dim(self, dim=None, keepdim=False, *, dtype=None):
    host = self.cpu()
    if _narrow(host, dtype):
        narrow = torch.sum(host, dim, keepdim, dtype=host.dtype)
        return narrow.to(torch.int64).to(self.device)
    return torch.sum(host, dim, keepdim, dtype=dtype).to(self.device)


override_neuron_kernel("sum", _sum)
override_neuron_kernel("sum.dim_IntList", _sum_dim)
