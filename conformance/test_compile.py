"""torch.compile: with the default backend (inductor), a compiled function or module gives the
eager result on the device, forward and backward, across a graph break and over dynamic shapes,
and its outputs (and gradients) stay on the device.

The default backend must work after ``import torch`` alone, as a user calls it: the suite never
imports the backend's extension, so a backend that registers with inductor only when some module
of its own is imported fails here. Each test compiles one small graph (inductor's first C++ or
Triton compile of a graph costs seconds); ``torch._dynamo.reset()`` before each keeps the tests
independent of each other's caches.
"""

from __future__ import annotations

import pytest
import torch

from .assertions import reproducer
from .backend import Backend
from .requirements import require

# Inductor's fused kernels reorder float32 arithmetic (and may use FMA): equal up to rounding.
TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}


@pytest.fixture
def compile_backend(backend: Backend) -> Backend:
    require(backend, "compile")
    torch._dynamo.reset()
    yield backend
    torch._dynamo.reset()


def _assert_same(actual: torch.Tensor, expected: torch.Tensor, device: torch.device, what: str,
                 snippet: str) -> None:  # fmt: skip
    assert actual.device == expected.device and actual.device.type == device.type, (
        f"{what}: the compiled result is on {actual.device}, eager's on {expected.device}; both "
        f"must be on {device}" + reproducer(snippet)
    )
    torch.testing.assert_close(
        actual.cpu(),
        expected.cpu(),
        **TOLERANCE,
        msg=lambda m: f"{what}: {m}" + reproducer(snippet),
    )


def _mlp(device: torch.device) -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4)).to(
        device
    )


def test_compiled_module_matches_eager_forward_and_backward(compile_backend, device):
    eager = _mlp(device)
    compiled_module = _mlp(device)
    compiled = torch.compile(compiled_module)
    x = torch.randn(8, 16).to(device)
    snippet = (
        "model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), "
        f"torch.nn.Linear(32, 4)).to('{device}')\n"
        f"x = torch.randn(8, 16, device='{device}')\n"
        "out = torch.compile(model)(x)\nprint(out.device, out - model(x))\n"
        "out.pow(2).sum().backward()"
    )
    expected = eager(x)
    actual = compiled(x)
    _assert_same(actual, expected, device, "compiled forward", snippet)
    expected.pow(2).sum().backward()
    actual.pow(2).sum().backward()
    for (name, p_eager), p_compiled in zip(
        eager.named_parameters(), compiled_module.parameters(), strict=True
    ):
        assert p_compiled.grad is not None, f"compiled backward left {name}.grad None"
        _assert_same(p_compiled.grad, p_eager.grad, device, f"gradient of {name}", snippet)


def test_compiled_function_with_a_factory_and_a_reduction_stays_on_the_device(
    compile_backend, device
):
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # A factory inside the graph takes its device from the input: inductor must allocate the
        # result, and the buffer it creates, on the backend's device.
        bias = torch.ones(x.shape[-1], device=x.device) * 0.5
        y = torch.softmax(x + bias, dim=-1)
        return y, y.sum(dim=0)

    x = torch.randn(6, 10).to(device)
    snippet = (
        "def f(x):\n    bias = torch.ones(x.shape[-1], device=x.device) * 0.5\n"
        "    y = torch.softmax(x + bias, dim=-1)\n    return y, y.sum(dim=0)\n"
        f"y, s = torch.compile(f)(torch.randn(6, 10, device='{device}'))\nprint(y.device, s.device)"
    )
    for actual, expected, what in zip(
        torch.compile(f)(x), f(x), ("softmax output", "reduction output"), strict=True
    ):
        _assert_same(actual, expected, device, what, snippet)


def test_a_graph_break_gives_the_eager_result_and_gradient(compile_backend, device):
    def f(x: torch.Tensor) -> torch.Tensor:
        y = torch.sin(x) * 2
        torch._dynamo.graph_break()  # two graphs, the tensor crossing between them
        return (y.cos() + x).sum(dim=1)

    torch._dynamo.utils.counters.clear()
    x_eager = torch.randn(5, 7).to(device).requires_grad_()
    x_compiled = x_eager.detach().clone().requires_grad_()
    snippet = (
        "def f(x):\n    y = torch.sin(x) * 2\n    torch._dynamo.graph_break()\n"
        "    return (y.cos() + x).sum(dim=1)\n"
        f"x = torch.randn(5, 7, device='{device}', requires_grad=True)\n"
        "out = torch.compile(f)(x); out.sum().backward(); print(out.device, x.grad)"
    )
    expected = f(x_eager)
    actual = torch.compile(f)(x_compiled)
    assert torch._dynamo.utils.counters["graph_break"], (
        "dynamo recorded no graph break: the test no longer covers one"
    )
    _assert_same(actual, expected, device, "result across a graph break", snippet)
    expected.sum().backward()
    actual.sum().backward()
    _assert_same(x_compiled.grad, x_eager.grad, device, "gradient across a graph break", snippet)


def test_dynamic_shapes_give_the_eager_result_for_each_size(compile_backend, device):
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x * 3 - 1).mean(dim=-1) + x.shape[0]

    compiled = torch.compile(f, dynamic=True)
    for rows in (3, 8, 17):
        x = torch.randn(rows, 9).to(device)
        snippet = (
            "f = lambda x: torch.relu(x * 3 - 1).mean(dim=-1) + x.shape[0]\n"
            f"x = torch.randn({rows}, 9, device='{device}')\n"
            "print(torch.compile(f, dynamic=True)(x) - f(x))"
        )
        _assert_same(compiled(x), f(x), device, f"dynamic shapes, {rows} rows", snippet)


def test_a_compiled_in_place_update_writes_the_device_tensor(compile_backend, device):
    @torch.compile
    def step(parameter: torch.Tensor, gradient: torch.Tensor) -> None:
        parameter.sub_(gradient * 0.1)

    parameter = torch.arange(6.0).to(device)
    pointer = parameter.data_ptr()
    step(parameter, torch.ones(6).to(device))
    assert parameter.data_ptr() == pointer, "the compiled in-place update replaced the storage"
    _assert_same(
        parameter,
        (torch.arange(6.0) - 0.1).to(device),
        device,
        "compiled in-place update",
        f"p = torch.arange(6.0, device='{device}')\n"
        "torch.compile(lambda p, g: p.sub_(g * 0.1))(p, torch.ones_like(p)); print(p)",
    )


def test_inductor_benchmarks_a_callable_on_its_device(compile_backend, device):
    from torch._inductor.runtime.benchmarking import InductorBenchmarker

    # Compiling first: what inductor does before it autotunes (a backend registers its device
    # interface with inductor when inductor first looks at the device).
    torch.compile(lambda x: x + 1)(torch.ones(2).to(device))
    x = torch.randn(64, 64).to(device)
    try:
        ms = InductorBenchmarker().benchmark(torch.mm, (x, x), {})
    except Exception as error:  # the failure is the finding: report it, not a traceback
        raise AssertionError(
            f"inductor's benchmarker could not time torch.mm of {device} tensors (autotuning "
            f"times its choices this way): {type(error).__name__}: {error}"
            + reproducer(
                "from torch._inductor.runtime.benchmarking import InductorBenchmarker\n"
                f"x = torch.randn(64, 64, device='{device}')\n"
                "print(InductorBenchmarker().benchmark(torch.mm, (x, x), {}))"
            )
        ) from error
    assert ms > 0.0, f"inductor's benchmarker timed torch.mm of {device} tensors at {ms} ms"
