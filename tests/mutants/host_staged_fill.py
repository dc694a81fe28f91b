"""A backend that stages fills on the host, as some do (OpenReg's fill runs on host memory): each
fill_ on neuron fills a host tensor of the same size and copies it over, so a host allocation
shadows every device one in the profiler's memory timeline."""

import torch

from mutants._library import override_neuron_kernel


def _fill(self, value):  # noqa: ANN001, ANN202
    staged = torch.empty(self.shape, dtype=self.dtype).fill_(value)
    self.copy_(staged)
    return self


override_neuron_kernel("fill_.Scalar", _fill)
