"""An op that returns slightly wrong values: add is off by 0.1% on neuron."""

import torch

from mutants._library import override_neuron_kernel


def _add(self: torch.Tensor, other: torch.Tensor, *, alpha: float = 1) -> torch.Tensor:
    exact = torch.add(
        self.cpu(), other.cpu() if isinstance(other, torch.Tensor) else other, alpha=alpha
    )
    return (exact * 1.001 if exact.is_floating_point() else exact).to(self.device)


override_neuron_kernel("add.Tensor", _add)
