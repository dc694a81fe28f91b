"""A wrong gradient: tanh's backward on neuron computes grad * (1 - y) instead of
grad * (1 - y**2), while the forward is right. Only gradients compared with the reference's
show it."""

from mutants._library import override_neuron_kernel


def _tanh_backward(grad_output, output):
    return (grad_output.cpu() * (1 - output.cpu())).to(grad_output.device)


override_neuron_kernel("tanh_backward", _tanh_backward)
