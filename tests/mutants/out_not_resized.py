"""An out= kernel that assumes its out was allocated by the caller at the right size: add.out
on neuron writes the result's elements into out's memory as far as they fit and never resizes
it, where PyTorch resizes an out of the wrong size (warning when it had elements). Only an out=
of the wrong size shows it."""

import torch

from mutants._library import override_neuron_kernel


def _add_out(self, other, *, alpha=1, out):
    result = torch.add(
        self.cpu(), other.cpu() if isinstance(other, torch.Tensor) else other, alpha=alpha
    )
    count = min(out.numel(), result.numel())
    host = out.cpu()
    host.view(-1)[:count] = result.reshape(-1)[:count].to(out.dtype)
    out.copy_(host)
    return out


override_neuron_kernel("add.out", _add_out)
