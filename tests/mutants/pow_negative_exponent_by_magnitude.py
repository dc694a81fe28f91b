"""An integer-power fast path that uses the exponent's magnitude: pow(x, n) on neuron with an
integer scalar n < -1 computes x ** |n| by repeated multiplication and forgets the reciprocal.
Exponents 2, 0.5 and -1 (the common ones, with their own kernels) are right."""

import torch

from mutants._library import override_neuron_kernel


def _pow(self, exponent):
    host = self.cpu()
    if isinstance(exponent, int) and exponent < -1 and host.is_floating_point():
        return torch.pow(host, -exponent).to(self.device)
    return torch.pow(host, exponent).to(self.device)


override_neuron_kernel("pow.Tensor_Scalar", _pow)
