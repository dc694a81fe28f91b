"""Random operators that draw from the CPU's default generator and copy the numbers over:
uniform_ and normal_ (so rand, randn, normal) on neuron ignore the device's generator when
none is passed, which exists, seeds and round-trips as before but is never drawn from.
torch.manual_seed seeds both, so every test that seeds through it passes."""

import torch

from mutants._library import override_neuron_kernel


def _uniform_(self, from_=0.0, to=1.0, *, generator=None):
    host = torch.empty(self.shape, dtype=torch.float32)
    if generator is None:
        host.uniform_(from_, to)
    else:
        host.uniform_(from_, to, generator=torch.Generator().manual_seed(generator.seed()))
    return self.copy_(host)


def _normal_(self, mean=0.0, std=1.0, *, generator=None):
    host = torch.empty(self.shape, dtype=torch.float32)
    if generator is None:
        host.normal_(mean, std)
    else:
        host.normal_(mean, std, generator=torch.Generator().manual_seed(generator.seed()))
    return self.copy_(host)


override_neuron_kernel("uniform_", _uniform_)
override_neuron_kernel("normal_", _normal_)
