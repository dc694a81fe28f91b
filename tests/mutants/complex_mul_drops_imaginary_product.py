"""A complex multiply that forgets the product of the imaginary parts: mul on neuron computes
(a + bi)(c + di) as ac + (ad + bc)i, dropping -bd from the real part. Every complex input whose
imaginary parts are zero (complex tensors made from real ones) gives the right answer."""

import torch

from mutants._library import override_neuron_kernel


def _mul(self, other):
    host = other.cpu() if isinstance(other, torch.Tensor) else other
    if not (self.is_complex() or (isinstance(host, torch.Tensor) and host.is_complex())):
        return torch.mul(self.cpu(), host).to(self.device)
    a, b = torch.broadcast_tensors(self.cpu(), torch.as_tensor(host))
    result_dtype = torch.result_type(self.cpu(), host)
    a, b = a.to(result_dtype), b.to(result_dtype)
    real = a.real * b.real
    imag = a.real * b.imag + a.imag * b.real
    return torch.complex(real, imag).to(result_dtype).to(self.device)


override_neuron_kernel("mul.Tensor", _mul)
