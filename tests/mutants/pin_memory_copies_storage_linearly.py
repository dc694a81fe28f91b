"""pin_memory of a non-contiguous tensor that copies its elements in logical order into a
pinned buffer and then lays the source's strides over that buffer (a pinned copy written for
contiguous tensors). Contiguous sources, which nearly every pinned test uses, pin correctly."""

import torch

_pin_memory = torch.Tensor.pin_memory


def _pin_memory_linearly(self, device=None):
    if self.is_contiguous():
        return _pin_memory(self)
    span = 1 + sum(
        (size - 1) * stride for size, stride in zip(self.shape, self.stride(), strict=True)
    )
    buffer = torch.empty(max(span, self.numel()), dtype=self.dtype, pin_memory=True)
    buffer[: self.numel()] = self.reshape(-1)
    return buffer.as_strided(self.shape, self.stride())


torch.Tensor.pin_memory = _pin_memory_linearly
