"""A fused-kernel module in the style of Triton kernel packages (unsloth, liger): kernels for
CUDA GPUs, launched when the tensors are on CUDA, with a plain PyTorch fallback everywhere else.
The module is CUDA by design: nothing in it is for the scanner to report."""

import json

import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # no Triton: the fallback only
    triton = None

if triton is not None:

    @triton.jit
    def _swiglu_kernel(e_ptr, g_ptr, h_ptr, n, BLOCK: tl.constexpr):
        offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offsets < n
        e = tl.load(e_ptr + offsets, mask=mask)
        g = tl.load(g_ptr + offsets, mask=mask)
        tl.store(h_ptr + offsets, e * tl.sigmoid(e) * g, mask=mask)


def swiglu(e, g):
    if triton is not None and e.is_cuda and g.device.type == "cuda":  # expect: none
        h = torch.empty(e.shape, dtype=e.dtype, device="cuda")  # expect: none
        n = e.numel()
        _swiglu_kernel[(triton.cdiv(n, 1024),)](e, g, h, n, BLOCK=1024)
        torch.cuda.synchronize()  # expect: none
        return h
    return torch.nn.functional.silu(e) * g


def main():
    torch.manual_seed(0)
    e, g = torch.randn(8), torch.randn(8)
    print(json.dumps({"h": [round(v, 6) for v in swiglu(e, g).tolist()]}))


if __name__ == "__main__":
    main()
