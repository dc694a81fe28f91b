"""A dropout kernel that draws its mask with a fixed keep probability of one half, whatever p
(a kernel specialised for the common p = 0.5), while scaling by the right 1/(1-p): right at
p = 0.5 alone, and the scale of the kept elements looks correct at every p."""

import torch

from mutants._library import override_neuron_kernel


def _native_dropout(input, p, train):
    if not train or p == 0 or p == 1:
        output, mask = torch.native_dropout(input.cpu(), p, train)
        return output.to(input.device), mask.to(input.device)
    mask = torch.rand(input.shape, device=input.device) >= 0.5
    return input * mask * (1 / (1 - p)), mask


override_neuron_kernel("native_dropout", _native_dropout)
