"""Extremal values overflow: softmax on neuron computes exp(x) / sum(exp(x)) without
subtracting the maximum first, so a logit whose exp overflows (above 88.7 in float32, 11.1 in
float16) gives inf / inf = NaN where PyTorch gives a probability."""

from mutants._library import override_neuron_kernel


def _softmax(self, dim, half_to_float):
    host = self.cpu().float() if half_to_float else self.cpu()
    exponentials = host.exp()
    return (exponentials / exponentials.sum(dim, keepdim=True)).to(self.device)


override_neuron_kernel("_softmax", _softmax)
