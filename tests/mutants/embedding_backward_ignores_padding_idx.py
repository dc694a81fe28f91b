"""An embedding backward that ignores padding_idx: the gradient of the weight on neuron also
accumulates into the padding row, which PyTorch documents as receiving no gradient. The
forward is right, and so is every backward without padding_idx."""

import torch

from mutants._library import override_neuron_kernel


def _embedding_dense_backward(
    grad_output,
    indices,
    num_weights,
    padding_idx,
    scale_grad_by_freq,
):
    grad = torch.ops.aten.embedding_dense_backward(
        grad_output.cpu(), indices.cpu(), num_weights, -1, scale_grad_by_freq
    )
    return grad.to(grad_output.device)


override_neuron_kernel("embedding_dense_backward", _embedding_dense_backward)
