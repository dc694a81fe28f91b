"""Autograd: gradients computed on the device match the reference's, and live on the device.

Covers torch.autograd.grad through elementwise operators, reductions, matmul, softmax,
layer_norm, conv2d, indexing (gather, scatter, index_put) and in-place writes to views; the
backward of a small MLP and an optimizer step; double backward; and the gradient of
non-contiguous leaves, whose layout follows the reference's.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence

import pytest
import torch
import torch.nn.functional as F

from .assertions import assert_matches_reference, assert_on_device
from .strategies import MAKE_SNIPPET, TensorSpec

# Definitions the functions below may use, run here and printed in every snippet.
HELPERS = """
import torch.nn.functional as F

def index(like, values):  # an index tensor on the device of the tensor it indexes
    return torch.tensor(values, device=like.device)

def in_place_on_views(x):
    y = x.clone()
    y[:, 1:].mul_(2)  # a slice
    y.t()[0].add_(1)  # a view of a view
    y.view(-1)[::3].sin_()  # a strided view
    return y * x
"""
_helpers: dict[str, object] = {"torch": torch}
exec(HELPERS, _helpers)

# name: (the function as a lambda expression, the inputs' shapes)
GRADIENT_CASES: dict[str, tuple[str, list[tuple[int, ...]]]] = {
    "exp_times_sin": ("lambda x, y: x.exp() * y.sin()", [(3, 4), (3, 4)]),
    "pow_over_abs": ("lambda x, y: x.pow(2) / (y.abs() + 1)", [(3, 4), (3, 4)]),
    "broadcast_add_mul": ("lambda x, y: (x + y) * y", [(3, 4), (4,)]),
    "tanh_sigmoid_relu": ("lambda x: x.tanh() + x.sigmoid() * x.relu()", [(5, 3)]),
    "clamp_where": ("lambda x: torch.where(x > 0, x.clamp(max=1.5), -x)", [(4, 4)]),
    "sum_over_dim": ("lambda x: x.sum(dim=1)", [(3, 4, 2)]),
    "mean_and_var": ("lambda x: x.mean(0) + x.var(dim=0)", [(5, 3)]),
    "amax": ("lambda x: x.amax(dim=1)", [(4, 5)]),
    "norm": ("lambda x: x.norm(dim=1)", [(4, 5)]),
    "logsumexp": ("lambda x: x.logsumexp(dim=-1)", [(3, 6)]),
    "cumsum_cumprod": ("lambda x: x.cumsum(1) + x.cumprod(0)", [(3, 4)]),
    "matmul": ("lambda x, y: x @ y", [(3, 4), (4, 5)]),
    "batched_matmul": ("lambda x, y: torch.bmm(x, y)", [(2, 3, 4), (2, 4, 2)]),
    "softmax": ("lambda x: x.softmax(dim=-1)", [(3, 5)]),
    "log_softmax": ("lambda x: F.log_softmax(x, dim=0)", [(4, 3)]),
    "layer_norm": ("lambda x, w, b: F.layer_norm(x, (5,), w, b)", [(3, 5), (5,), (5,)]),
    "conv2d": (
        "lambda x, w, b: F.conv2d(x, w, b, stride=1, padding=1)",
        [(2, 3, 6, 6), (4, 3, 3, 3), (4,)],
    ),
    "max_pool2d": ("lambda x: F.max_pool2d(x, 2)", [(1, 2, 4, 4)]),
    "index_select": ("lambda x: x.index_select(0, index(x, [2, 0, 2]))", [(4, 3)]),
    "advanced_indexing": ("lambda x: x[index(x, [1, 3, 1]), 1:]", [(4, 3)]),
    "gather": ("lambda x: x.gather(1, index(x, [[0, 2], [1, 1], [2, 0]]))", [(3, 3)]),
    "scatter": (
        "lambda x, src: x.scatter(1, index(x, [[0, 2], [1, 0], [2, 1]]), src)",
        [(3, 3), (3, 2)],
    ),
    "scatter_add": (
        "lambda x, src: x.scatter_add(0, index(x, [[0, 1, 0], [2, 0, 1]]), src)",
        [(3, 3), (2, 3)],
    ),
    "index_put_accumulate": (
        "lambda x, v: x.index_put((index(x, [0, 2, 0]),), v, accumulate=True)",
        [(3, 4), (3, 4)],
    ),
    "masked_fill": ("lambda x: x.masked_fill(x > 0.5, 0.0) * 2", [(4, 4)]),
    "in_place_on_views": ("in_place_on_views", [(3, 4)]),
    "cross_entropy": (
        "lambda x: F.cross_entropy(x, index(x, [0, 2, 1, 2])).unsqueeze(0)",
        [(4, 3)],
    ),
}


def function_of(code: str) -> Callable[..., torch.Tensor]:
    return eval(code, _helpers)


def make_inputs(shapes: list[tuple[int, ...]], device: torch.device | str) -> list[torch.Tensor]:
    """float32 leaves that require grad, made on the CPU from seeds and moved to ``device``."""
    return [
        TensorSpec(shape, torch.float32, seed).make().div(4).to(device).requires_grad_()
        for seed, shape in enumerate(shapes)
    ]


def _snippet(code: str, shapes: list[tuple[int, ...]], device: torch.device) -> str:
    return (
        MAKE_SNIPPET
        + HELPERS
        + f"""
function = {code}
for where in ("cpu", "{device}"):
    inputs = [make(s, torch.float32, i).div(4).to(where).requires_grad_()
              for i, s in enumerate({shapes})]
    output = function(*inputs)
    cotangent = make(tuple(output.shape), torch.float32, 99).to(where)
    print(where, [g.cpu() for g in torch.autograd.grad(output, inputs, cotangent)])
"""
    )


def assert_gradients_match(
    actual: Sequence[torch.Tensor],
    expected: Sequence[torch.Tensor],
    device: torch.device,
    what: str,
    snippet: str,
) -> None:
    for index, (gradient, reference) in enumerate(zip(actual, expected, strict=True)):
        label = f"{what}: the gradient of input {index}"
        assert gradient is not None, f"{label} is None, the reference has one"
        assert_on_device(gradient, device, what=label)
        assert_matches_reference(gradient, reference, what=label, snippet=snippet)


@pytest.mark.parametrize("name", sorted(GRADIENT_CASES))
def test_gradients_match_reference(device, name):
    """torch.autograd.grad of the function, with a random cotangent, gives the reference's
    gradients for every input, on the inputs' device."""
    code, shapes = GRADIENT_CASES[name]
    function = function_of(code)
    snippet = _snippet(code, shapes, device)
    reference_inputs = make_inputs(shapes, "cpu")
    expected_output = function(*reference_inputs)
    cotangent = TensorSpec(tuple(expected_output.shape), torch.float32, 99).make()
    expected = torch.autograd.grad(expected_output, reference_inputs, cotangent)
    inputs = make_inputs(shapes, device)
    output = function(*inputs)
    assert_matches_reference(output, expected_output, what=f"{name} (forward)", snippet=snippet)
    actual = torch.autograd.grad(output, inputs, cotangent.to(device))
    assert_gradients_match(actual, expected, device, name, snippet)


def _mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 16), torch.nn.Tanh(),
        torch.nn.Linear(16, 4),
    )  # fmt: skip


def test_mlp_backward_and_optimizer_step_match_reference(device):
    """A small MLP: loss.backward() gives the reference's parameter gradients on the device, and
    an SGD step with momentum and weight decay gives the reference's parameters."""
    reference_model = _mlp()
    model = copy.deepcopy(reference_model).to(device)
    x = TensorSpec((6, 8), torch.float32, 1).make()
    target = torch.tensor([0, 3, 1, 2, 3, 0])
    steps = []
    for current, inputs, labels in (
        (reference_model, x, target),
        (model, x.to(device), target.to(device)),
    ):
        optimizer = torch.optim.SGD(current.parameters(), lr=0.1, momentum=0.9, weight_decay=0.01)
        for _ in range(2):
            optimizer.zero_grad()
            loss = F.cross_entropy(current(inputs), labels)
            loss.backward()
            gradients = {n: p.grad.clone() for n, p in current.named_parameters()}
            optimizer.step()
        steps.append((loss, gradients, dict(current.named_parameters())))
    (expected_loss, expected_grads, expected_params), (loss, grads, params) = steps
    assert_matches_reference(loss, expected_loss, what="the loss")
    for name, gradient in grads.items():
        assert_on_device(gradient, device, what=f"{name}.grad")
        assert_matches_reference(gradient, expected_grads[name], what=f"{name}.grad")
    for name, parameter in params.items():
        assert_on_device(parameter, device, what=name)
        assert_matches_reference(parameter, expected_params[name], what=f"{name} after 2 steps")


# name: (the function, the inputs' shapes); functions with a non-zero second derivative
DOUBLE_BACKWARD_CASES = {
    "tanh": ("lambda x: x.tanh()", [(3, 4)]),
    "softmax": ("lambda x: x.softmax(dim=-1)", [(3, 4)]),
    "matmul_of_squares": ("lambda x, y: (x * x) @ y", [(3, 4), (4, 2)]),
    "layer_norm": ("lambda x, w, b: F.layer_norm(x, (4,), w, b)", [(3, 4), (4,), (4,)]),
}


@pytest.mark.parametrize("name", sorted(DOUBLE_BACKWARD_CASES))
def test_double_backward_matches_reference(device, name):
    """The gradient of a gradient (create_graph=True) matches the reference's."""
    code, shapes = DOUBLE_BACKWARD_CASES[name]
    function = function_of(code)

    def second_order(inputs: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        output = function(*inputs)
        cotangent = torch.ones_like(output)
        first = torch.autograd.grad(output, inputs, cotangent, create_graph=True)
        weighted = sum((g * torch.linspace(-1, 1, g.numel(), device=g.device).view_as(g)).sum()
                       for g in first)  # fmt: skip
        return torch.autograd.grad(weighted, inputs, allow_unused=True, materialize_grads=True)

    expected = second_order(make_inputs(shapes, "cpu"))
    actual = second_order(make_inputs(shapes, device))
    assert_gradients_match(actual, expected, device, f"{name} (double backward)", snippet="")


@pytest.mark.parametrize(
    "layout", ["transposed", "strided slice", "channels_last"], ids=lambda s: s.replace(" ", "_")
)
def test_gradient_of_a_non_contiguous_leaf_matches_reference(device, layout):
    """A non-contiguous leaf gets the reference's gradient, on the device, with the reference's
    strides (AccumulateGrad keeps a dense leaf's layout and makes others contiguous)."""

    def leaf(where: torch.device | str) -> torch.Tensor:
        base = TensorSpec((4, 6, 2, 3), torch.float32, 5).make().to(where)
        if layout == "transposed":
            view = base[0, :, 0].t()
        elif layout == "strided slice":
            view = base[::2, 1::2, 0]
        else:
            view = base.contiguous(memory_format=torch.channels_last)
        return view.detach().requires_grad_()

    results = []
    for where in ("cpu", device):
        x = leaf(where)
        (x.exp() * x.sin()).sum().backward()
        results.append(x)
    reference, actual = results
    assert not actual.is_contiguous()
    assert_on_device(actual.grad, device, what="x.grad")
    assert actual.grad.stride() == reference.grad.stride(), (
        f"x.grad has strides {actual.grad.stride()}, the reference's has "
        f"{reference.grad.stride()} (x has strides {actual.stride()})"
    )
    assert_matches_reference(actual.grad, reference.grad, what="x.grad")


def test_gradients_accumulate_across_backward_calls(device):
    """backward() twice without zeroing adds the gradients, on the device."""
    x = torch.linspace(-1, 1, 5).to(device).requires_grad_()
    for _ in range(2):
        (x * x).sum().backward()
    assert_on_device(x.grad, device, what="x.grad")
    expected = 4 * torch.linspace(-1, 1, 5)
    assert_matches_reference(x.grad, expected, what="x.grad after two backward calls")
