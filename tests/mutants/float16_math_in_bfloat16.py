"""A dtype beyond float32 computed wrong: neuron's float16 transcendental kernels run in
bfloat16 (a unit without float16 math), losing 3 bits of mantissa, while float32 and bfloat16
are right. A suite that compares operators in float32 only never sees it."""

import torch

from mutants._library import override_neuron_kernel

OPS = ("exp", "log", "sqrt", "rsqrt", "sin", "tanh", "sigmoid", "erf", "pow.Tensor_Scalar")


def _kernel(name: str):  # noqa: ANN202
    function = getattr(torch, name.split(".")[0])

    def kernel(self, *args):  # noqa: ANN001, ANN002, ANN202
        host = self.cpu()
        if host.dtype == torch.float16:
            return function(host.to(torch.bfloat16), *args).to(torch.float16).to(self.device)
        return function(host, *args).to(self.device)

    return kernel


for _name in OPS:
    override_neuron_kernel(_name, _kernel(_name))
