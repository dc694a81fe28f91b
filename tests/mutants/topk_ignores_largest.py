"""A selection kernel that ignores a non-default option: topk on neuron always returns the
largest k (largest=False is dropped), as a kernel written for the common call would. Only a
call with largest=False shows it."""

import torch

from mutants._library import override_neuron_kernel


def _topk(self, k, dim=-1, largest=True, sorted=True):
    values, indices = torch.topk(self.cpu(), k, dim, True, sorted)
    return values.to(self.device), indices.to(self.device)


override_neuron_kernel("topk", _topk)
