"""Fused attention: F.scaled_dot_product_attention on neuron takes the CPU's kernel, bit for bit.

Neuron registers the CPU's choice function as its ``_fused_sdp_choice_stub``
(``csrc/NeuronAttention.cpp``): the flash-attention kernel where the CPU takes it, the math path
where the CPU does (dropout, unsupported shapes). Every result is compared with ``torch.equal``.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn


def attention_inputs(
    batch: int = 2,
    heads: int = 4,
    kv_heads: int = 4,
    length: int = 16,
    source: int = 16,
    dim: int = 8,
    dtype: torch.dtype = torch.float32,
    seed: int = 0,
) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    shapes = [(batch, heads, length, dim), (batch, kv_heads, source, dim)]
    return [
        torch.randn(shapes[min(i, 1)], generator=generator, dtype=torch.float32).to(dtype)
        for i in range(3)
    ]


def run_on(device: str, fn, inputs: list[torch.Tensor], extra: dict | None = None):
    """Forward and backward of ``fn`` on ``device``: the output, the grad_fn's name, the grads."""
    leaves = [t.to(device, copy=True).requires_grad_() for t in inputs]
    kwargs = {
        k: (v.to(device) if isinstance(v, torch.Tensor) else v) for k, v in (extra or {}).items()
    }
    out = fn(*leaves, **kwargs)
    grad_fn = type(out.grad_fn).__name__
    out.backward(torch.ones_like(out))
    return out.detach().cpu(), grad_fn, [t.grad.cpu() for t in leaves if t.grad is not None]


def assert_bitwise_same_as_cpu(fn, inputs: list[torch.Tensor], extra: dict | None = None) -> str:
    cpu_out, cpu_path, cpu_grads = run_on("cpu", fn, inputs, extra)
    neuron_out, neuron_path, neuron_grads = run_on("neuron", fn, inputs, extra)
    assert neuron_path == cpu_path, f"neuron took {neuron_path}, the CPU {cpu_path}"
    assert torch.equal(neuron_out, cpu_out), (neuron_out - cpu_out).abs().max()
    assert len(neuron_grads) == len(cpu_grads)
    for neuron_grad, cpu_grad in zip(neuron_grads, cpu_grads, strict=True):
        assert torch.equal(neuron_grad, cpu_grad), (neuron_grad - cpu_grad).abs().max()
    return cpu_path


FLASH = "ScaledDotProductFlashAttentionForCpuBackward0"

CASES = {
    "plain": ({}, {}),
    "causal": ({}, {"is_causal": True}),
    "scale": ({}, {"scale": 0.3}),
    "cross_lengths": ({"length": 8, "source": 24}, {}),
    "bool_mask": (
        {},
        {"attn_mask": torch.rand(16, 16, generator=torch.Generator().manual_seed(1)) > 0.3},
    ),
    "float_mask": (
        {},
        {"attn_mask": torch.randn(2, 1, 16, 16, generator=torch.Generator().manual_seed(2))},
    ),
    "bfloat16": ({"dtype": torch.bfloat16}, {"is_causal": True}),
    "float16": ({"dtype": torch.float16}, {}),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_sdpa_takes_the_cpus_flash_kernel_and_matches_it_bit_for_bit(case):
    shape, extra = case
    path = assert_bitwise_same_as_cpu(
        F.scaled_dot_product_attention, attention_inputs(**shape), extra
    )
    assert path == FLASH  # the case exercises the fused kernel, not the math path


def test_grouped_query_attention_takes_the_cpus_flash_kernel():
    # enable_gqa with fewer key/value heads than query heads: the CPU's flash kernel takes it.
    path = assert_bitwise_same_as_cpu(
        F.scaled_dot_product_attention,
        attention_inputs(heads=8, kv_heads=2),
        {"enable_gqa": True, "is_causal": True},
    )
    assert path == FLASH


def test_a_strided_last_dimension_takes_the_math_path_on_both_devices():
    # The CPU's flash kernel needs a unit stride in the last dimension; the choice must fall back
    # to the math path on neuron exactly as on the CPU.
    def strided_attention(q, k, v):
        return F.scaled_dot_product_attention(q.mT.contiguous().mT, k, v)

    path = assert_bitwise_same_as_cpu(strided_attention, attention_inputs(), {})
    assert path != FLASH


def test_disabling_flash_sends_both_devices_to_the_math_path():
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        path = assert_bitwise_same_as_cpu(F.scaled_dot_product_attention, attention_inputs(), {})
    assert path != FLASH


@pytest.mark.parametrize("p", [0.1, 0.5])
def test_dropout_takes_the_math_path_with_the_cpus_random_stream(p):
    # Dropout is outside the CPU's flash kernel: math path on both devices. With the same seed the
    # neuron generator draws the CPU's numbers, so even the dropped entries agree.
    inputs = attention_inputs()
    results = []
    for device in ("cpu", "neuron"):
        torch.manual_seed(1234)
        results.append(run_on(device, F.scaled_dot_product_attention, inputs, {"dropout_p": p}))
    (cpu_out, cpu_path, cpu_grads), (neuron_out, neuron_path, neuron_grads) = results
    assert neuron_path == cpu_path != FLASH
    assert torch.equal(neuron_out, cpu_out)
    for neuron_grad, cpu_grad in zip(neuron_grads, cpu_grads, strict=True):
        assert torch.equal(neuron_grad, cpu_grad)


def test_the_choice_operator_answers_as_on_the_cpu():
    q, k, v = attention_inputs()
    for kwargs in ({}, {"dropout_p": 0.2}, {"is_causal": True}):
        cpu_choice = torch._fused_sdp_choice(q, k, v, **kwargs)
        neuron_choice = torch._fused_sdp_choice(q.neuron(), k.neuron(), v.neuron(), **kwargs)
        assert neuron_choice == cpu_choice


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    first, second = x.chunk(2, dim=-1)
    return torch.cat((-second, first), dim=-1)


class LlamaStyleAttention(nn.Module):
    """Attention as Hugging Face's Llama writes its SDPA path: q/k/v projections, rotary
    embeddings, grouped key/value heads repeated to the query heads, an additive float causal
    mask, ``F.scaled_dot_product_attention`` and an output projection."""

    def __init__(self, hidden: int = 32, heads: int = 4, kv_heads: int = 2) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, hidden // heads
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        q = self.q_proj(x).view(batch, length, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(batch, length, self.kv_heads, self.head_dim).transpose(1, 2)
        inv_freq = 1.0 / (
            10000 ** (torch.arange(0, self.head_dim, 2, device=x.device) / self.head_dim)
        )
        angles = torch.outer(torch.arange(length, device=x.device, dtype=torch.float32), inv_freq)
        cos, sin = torch.cat((angles, angles), -1).cos(), torch.cat((angles, angles), -1).sin()
        q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
        groups = self.heads // self.kv_heads
        k = k[:, :, None].expand(batch, self.kv_heads, groups, length, self.head_dim)
        v = v[:, :, None].expand(batch, self.kv_heads, groups, length, self.head_dim)
        k = k.reshape(batch, self.heads, length, self.head_dim)
        v = v.reshape(batch, self.heads, length, self.head_dim)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, -1))


def test_a_llama_style_attention_trains_bit_identically_to_the_cpu():
    torch.manual_seed(0)
    reference = LlamaStyleAttention()
    x = torch.randn(2, 12, 32)
    mask = torch.full((12, 12), float("-inf")).triu(1)[None, None]
    params = {}
    for device in ("cpu", "neuron"):
        model = LlamaStyleAttention().to(device)
        model.load_state_dict(reference.state_dict())
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
        for _ in range(4):
            optimizer.zero_grad()
            loss = model(x.to(device), mask.to(device)).square().mean()
            loss.backward()
            optimizer.step()
        params[device] = {name: p.detach().cpu() for name, p in model.named_parameters()}
    for name, cpu_param in params["cpu"].items():
        assert torch.equal(params["neuron"][name], cpu_param), name
