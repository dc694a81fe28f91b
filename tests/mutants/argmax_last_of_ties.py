"""An index-returning op that breaks ties the other way: argmax on neuron returns the index of
the last maximal value (a parallel reduction that keeps the later candidate on equality),
where PyTorch documents the first. Only inputs with ties show it."""

import torch

from mutants._library import override_neuron_kernel


def _argmax(self, dim=None, keepdim=False):
    host = self.cpu()
    if host.dim() == 0 or host.numel() == 0:
        return torch.argmax(host, dim, keepdim).to(self.device)
    if dim is None:
        flat = host.flatten()
        last = flat.numel() - 1 - torch.argmax(flat.flip(0))
        return (last.reshape([1] * host.dim()) if keepdim else last).to(self.device)
    last = host.size(dim) - 1 - torch.argmax(host.flip(dim), dim, keepdim)
    return last.to(self.device)


override_neuron_kernel("argmax", _argmax)
