"""A dtype beyond float32 computed wrong: neuron's complex64 matrix multiply reads a transposed
operand as conjugate-transposed (BLAS's 'C' where 'T' is meant), so x @ w.t() and F.linear on
complex tensors conjugate the weight, while every real dtype is right. A suite that compares
operators in float32 and bfloat16 only never sees it."""

import torch

from mutants._library import override_neuron_kernel


def _operand(matrix: torch.Tensor) -> torch.Tensor:
    host = matrix.cpu()
    if matrix.is_complex() and not matrix.is_contiguous():
        return host.conj().resolve_conj()  # the bug: a transposed layout taken as conj-transpose
    return host


def _mm(self, other):
    return torch.mm(_operand(self), _operand(other)).to(self.device)


def _addmm(self, mat1, mat2, *, beta=1, alpha=1):
    result = torch.addmm(self.cpu(), _operand(mat1), _operand(mat2), beta=beta, alpha=alpha)
    return result.to(self.device)


override_neuron_kernel("mm", _mm)
override_neuron_kernel("addmm", _addmm)
