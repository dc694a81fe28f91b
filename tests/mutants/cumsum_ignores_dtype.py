"""A scan that accumulates in the input's dtype when ``dtype=`` is given: cumsum on neuron adds
an int8 input in int8 and converts the sums to the requested dtype at the end, so
cumsum(x, dim, dtype=torch.int64) wraps around where PyTorch accumulates in int64. Without
dtype= (integers promoted to int64 as documented) it is right."""

import torch

from mutants._library import override_neuron_kernel


def _cumsum(self, dim, *, dtype=None):
    host = self.cpu()
    if dtype is None or host.is_floating_point():
        return torch.cumsum(host, dim, dtype=dtype).to(self.device)
    in_input_width = torch.cumsum(host, dim, dtype=torch.int64).to(host.dtype)
    return in_input_width.to(dtype).to(self.device)


override_neuron_kernel("cumsum", _cumsum)
