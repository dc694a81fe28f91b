"""A drawn scalar argument: clamp on neuron applies max before min, so with min > max every
element becomes min where PyTorch (min(max(x, min), max)) makes it max. Only bounds with
min > max show it."""

import torch

from mutants._library import override_neuron_kernel


def _clamp(self, low=None, high=None):
    host = self.cpu()
    if high is not None:
        host = torch.clamp(host, max=high)
    if low is not None:
        host = torch.clamp(host, min=low)
    return host.to(self.device)


override_neuron_kernel("clamp", _clamp)
