"""Parameters survive `module.to("neuron")`: their data is swapped in place, as on CUDA.

`Module._apply` swaps a Parameter's data (`param.data = moved`) only when
`torch._has_compatible_shallow_copy_type(param, moved)` is true; otherwise it replaces the
Parameter object, which silently unties shared weights and leaves an optimizer built before the
move holding stale CPU tensors. Neuron registers that operator for its dense tensors.
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn


def test_the_future_flag_is_off_so_these_tests_prove_the_in_place_swap():
    assert torch.__future__.get_overwrite_module_params_on_conversion() is False


@pytest.mark.parametrize(
    ("source", "target"), [("cpu", "neuron"), ("neuron", "cpu"), ("neuron:0", "neuron:1")]
)
def test_dense_tensors_of_cpu_and_neuron_are_shallow_copy_compatible(source, target):
    a = torch.ones(3, device=source)
    b = torch.ones(2, 2, dtype=torch.float16, device=target)
    assert torch._has_compatible_shallow_copy_type(a, b)
    assert torch._has_compatible_shallow_copy_type(b, a)


def test_a_sparse_tensor_is_not_compatible_with_a_neuron_tensor():
    sparse = torch.ones(2, 2).to_sparse()
    dense = torch.ones(2, 2, device="neuron")
    assert not torch._has_compatible_shallow_copy_type(sparse, dense)
    assert not torch._has_compatible_shallow_copy_type(dense, sparse)


def test_assigning_data_moves_a_parameter_to_neuron_and_back():
    param = nn.Parameter(torch.arange(6.0).view(2, 3))
    param.data = param.data.to("neuron")
    assert param.device.type == "neuron"
    assert isinstance(param, nn.Parameter) and param.requires_grad
    (param * 2).sum().backward()
    assert param.grad.device.type == "neuron"
    torch.testing.assert_close(param.grad.cpu(), torch.full((2, 3), 2.0))

    param.data = param.data.cpu()
    param.grad = None
    assert param.device.type == "cpu"
    (param * 3).sum().backward()
    assert param.grad.device.type == "cpu"
    torch.testing.assert_close(param.detach(), torch.arange(6.0).view(2, 3))


def test_module_to_keeps_parameter_and_gradient_objects_both_ways():
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    model(torch.randn(3, 4)).sum().backward()
    params = list(model.parameters())
    grads = [p.grad for p in params]

    model.to("neuron")
    assert all(a is b for a, b in zip(params, model.parameters(), strict=True))
    assert all(p.grad is g for p, g in zip(params, grads, strict=True))
    assert {p.device.type for p in params} == {"neuron"}
    assert {p.grad.device.type for p in params} == {"neuron"}

    model.to("cpu")
    assert all(a is b for a, b in zip(params, model.parameters(), strict=True))
    assert {p.device.type for p in params} == {"cpu"}


def test_an_optimizer_built_before_the_move_trains_the_moved_parameters():
    torch.manual_seed(0)
    reference = nn.Sequential(nn.Linear(5, 16), nn.Tanh(), nn.Linear(16, 1))
    model = copy.deepcopy(reference)
    reference_opt = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    model.to("neuron")
    x, y = torch.randn(32, 5), torch.randn(32, 1)

    for _ in range(5):
        for net, optimizer, device in ((reference, reference_opt, "cpu"), (model, opt, "neuron")):
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(net(x.to(device)), y.to(device))
            loss.backward()
            optimizer.step()

    for expected, actual in zip(reference.parameters(), model.parameters(), strict=True):
        assert actual.device.type == "neuron"
        torch.testing.assert_close(actual.detach().cpu(), expected.detach(), atol=1e-5, rtol=1e-5)


class TinyGPT(nn.Module):
    """A GPT-style language model whose output layer shares the token embedding's weight."""

    def __init__(self, vocab: int = 32, width: int = 16, context: int = 8) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(context, width)
        self.block = nn.TransformerEncoderLayer(
            width, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True
        )
        self.norm = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.lm_head.weight = self.tokens.weight  # weight tying, as in GPT-2

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(idx.shape[1], device=idx.device)
        h = self.tokens(idx) + self.positions(positions)
        return self.lm_head(self.norm(self.block(h)))


def test_tied_weights_stay_tied_and_train_like_the_cpu():
    torch.manual_seed(0)
    reference = TinyGPT()
    model = copy.deepcopy(reference)
    assert model.lm_head.weight is model.tokens.weight
    model.to("neuron")
    assert model.lm_head.weight is model.tokens.weight
    assert len(list(model.parameters())) == len(list(reference.parameters()))

    idx = torch.randint(0, 32, (4, 8))
    target = torch.randint(0, 32, (4, 8))
    reference_opt = torch.optim.AdamW(reference.parameters(), lr=1e-2)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for step in range(4):
        for net, optimizer, device in ((reference, reference_opt, "cpu"), (model, opt, "neuron")):
            optimizer.zero_grad()
            logits = net(idx.to(device))
            loss = nn.functional.cross_entropy(logits.flatten(0, 1), target.to(device).flatten())
            loss.backward()
            optimizer.step()
        torch.testing.assert_close(
            model.tokens.weight.grad.cpu(),
            reference.tokens.weight.grad,
            atol=1e-4,
            rtol=1e-4,
            msg=lambda m, step=step: f"step {step}: embedding gradient differs from CPU: {m}",
        )
    assert model.lm_head.weight is model.tokens.weight
    torch.testing.assert_close(
        model.tokens.weight.detach().cpu(), reference.tokens.weight.detach(), atol=1e-4, rtol=1e-4
    )
