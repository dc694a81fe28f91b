"""A binary kernel that broadcasts as if every missing or size-1 dimension were a leading one:
mul on neuron tiles the smaller operand's elements in order over the larger, which is right
when only leading dimensions broadcast ((3, 4) * (4,)) and wrong for a size-1 dimension
further in ((2, 3, 4) * (2, 1, 4))."""

import torch

from mutants._library import override_neuron_kernel


def _mul(self, other):
    a = self.cpu()
    b = other.cpu() if isinstance(other, torch.Tensor) else other
    if not isinstance(b, torch.Tensor) or a.shape == b.shape or a.dim() == 0 or b.dim() == 0:
        return torch.mul(a, b).to(self.device)
    shape = torch.broadcast_shapes(a.shape, b.shape)
    numel = 1
    for side in shape:
        numel *= side

    def tiled(t: torch.Tensor) -> torch.Tensor:
        if t.shape == shape or t.numel() == 0 or numel == 0:
            return t.expand(shape)
        flat = t.reshape(-1)
        return flat.repeat(-(-numel // flat.numel()))[:numel].reshape(shape)

    return torch.mul(tiled(a), tiled(b)).to(self.device)


override_neuron_kernel("mul.Tensor", _mul)
