"""A dropout kernel that scales the kept elements by 1/p instead of 1/(1-p) (the keep and drop
probabilities mixed up in the scale): right at p = 0.5 alone, where the two are equal, which is
the p that most tests use."""

import torch

from mutants._library import override_neuron_kernel


def _native_dropout(input, p, train):
    if not train or p == 0 or p == 1:
        output, mask = torch.native_dropout(input.cpu(), p, train)
        return output.to(input.device), mask.to(input.device)
    mask = torch.rand(input.shape, device=input.device) >= p
    return input * mask * (1 / p), mask


override_neuron_kernel("native_dropout", _native_dropout)
