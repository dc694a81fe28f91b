"""A data-dependent output size left on the host: masked_select on neuron counts the selected
elements on the host and returns its result there (a CPU tensor from a neuron op), where
PyTorch returns it on the input's device."""

import torch

from mutants._library import override_neuron_kernel


def _masked_select(self, mask):
    return torch.masked_select(self.cpu(), mask.cpu())


override_neuron_kernel("masked_select", _masked_select)
