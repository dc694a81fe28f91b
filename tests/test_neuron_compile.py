"""torch.compile on neuron tensors: inductor's C++ kernels run on device memory (compile.py).

Each test compiles with the default backend (inductor) unless it says otherwise, and compares
with eager on neuron, or with the same compile on the CPU where the point is "as on the CPU"
(recompilation, graph breaks).
"""

from __future__ import annotations

import os

import pytest
import torch
import torch._dynamo
import torch._dynamo.testing
from torch import nn
from torch._inductor.utils import run_and_get_code


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    try:
        yield
    finally:
        torch._dynamo.reset()


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8))


class _Block(nn.Module):
    """A pre-norm transformer block: attention and an MLP, each with a residual."""

    def __init__(self, dim: int = 16, heads: int = 2) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Linear(4 * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


def _assert_all_neuron(tensors, what: str) -> None:
    for t in tensors:
        assert t.device.type == "neuron", f"{what} is on {t.device}, expected a neuron tensor"


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_a_compiled_mlp_matches_eager_forward_and_backward(dynamic):
    eager = _mlp().to("neuron")
    compiled_model = _mlp().to("neuron")
    compiled = torch.compile(compiled_model, dynamic=dynamic)
    for batch in (4, 6):
        x = torch.randn(batch, 16, device="neuron")
        expected = eager(x)
        actual = compiled(x)
        _assert_all_neuron([actual], "the compiled output")
        torch.testing.assert_close(actual, expected)
        expected.square().sum().backward()
        actual.square().sum().backward()
    grads = [p.grad for p in compiled_model.parameters()]
    _assert_all_neuron(grads, "a gradient of the compiled model")
    for got, want in zip(grads, (p.grad for p in eager.parameters()), strict=True):
        torch.testing.assert_close(got, want)


@pytest.mark.parametrize("dynamic", [False, True], ids=["static", "dynamic"])
def test_training_a_transformer_block_compiled_matches_eager(dynamic):
    torch.manual_seed(0)
    eager = _Block().to("neuron")
    model = _Block().to("neuron")
    model.load_state_dict(eager.state_dict())
    compiled = torch.compile(model, dynamic=dynamic)
    opt_eager = torch.optim.SGD(eager.parameters(), lr=0.1)
    opt_compiled = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        x = torch.randn(2, 5 + (step if dynamic else 0), 16, device="neuron")
        for net, opt in ((eager, opt_eager), (compiled, opt_compiled)):
            opt.zero_grad()
            out = net(x)
            out.square().mean().backward()
            opt.step()
        _assert_all_neuron([out], "the compiled output")
        _assert_all_neuron([p.grad for p in model.parameters()], "a compiled gradient")
    for (name, got), want in zip(
        model.state_dict().items(), eager.state_dict().values(), strict=True
    ):
        assert got.device.type == "neuron", name
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5, msg=name)


def test_generated_code_allocates_neuron_buffers_never_cpu_ones():
    def f(x, y):
        return (x.sin() + y).relu().sum(dim=0), x * 2

    x, y = (torch.randn(8, 8, device="neuron") for _ in range(2))
    results, codes = run_and_get_code(torch.compile(f), x, y)
    wrapper = "\n".join(codes)
    allocations = [line.strip() for line in wrapper.splitlines() if "= empty_strided" in line]
    assert allocations, wrapper
    # Every buffer by neuron's own allocation call (compile.py make_allocation), none on the CPU
    # and none through torch.empty_strided's argument parsing and dispatch.
    assert all("= empty_strided_neuron(" in line for line in allocations), allocations
    assert "cpp_fused" in wrapper, "expected inductor's C++ kernels"
    _assert_all_neuron(results, "a compiled output")
    for got, want in zip(results, f(x, y), strict=True):
        torch.testing.assert_close(got, want)


def _frames_compiled(device: str, inputs) -> int:
    counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
    compiled = torch.compile(lambda x: (x * x).sum(-1), backend=counter)
    for shape, dtype in inputs:
        out = compiled(torch.ones(shape, dtype=dtype, device=device))
        assert out.device.type == device
    torch._dynamo.reset()
    return counter.frame_count


def test_recompilation_on_a_new_shape_or_dtype_is_as_on_the_cpu():
    inputs = [
        ((4, 3), torch.float32),
        ((4, 3), torch.float32),  # cached
        ((5, 3), torch.float32),  # new shape: recompiles, dynamic from here (automatic_dynamic)
        ((6, 3), torch.float32),  # covered by the dynamic graph
        ((6, 3), torch.bfloat16),  # new dtype: recompiles (neuron has no float64)
    ]
    neuron_frames = _frames_compiled("neuron", inputs)
    assert neuron_frames == _frames_compiled("cpu", inputs)
    assert neuron_frames == 3


@pytest.mark.parametrize("breaker", ["print", "item"])
def test_a_graph_break_splits_the_graph_as_on_the_cpu(breaker, capsys):
    def f(x):
        y = x.cos() + 1
        if breaker == "print":
            print("between graphs")
        else:
            y = y * y.sum().item()
        return y.sin()

    explained = {}
    for device in ("cpu", "neuron"):
        x = torch.randn(5, device=device)
        counter = torch._dynamo.testing.CompileCounterWithBackend("inductor")
        out = torch.compile(f, backend=counter)(x)
        assert out.device.type == device
        torch.testing.assert_close(out.cpu(), f(x).cpu())
        explained[device] = counter.frame_count, counter.op_count
        torch._dynamo.reset()
    assert explained["neuron"] == explained["cpu"]
    assert explained["neuron"][0] >= 2, "expected the break to split the function in two graphs"


def test_backend_neuron_is_inductor_for_neuron_tensors():
    model = _mlp().to("neuron")
    x = torch.randn(3, 16, device="neuron")
    out, codes = run_and_get_code(torch.compile(model, backend="neuron"), x)
    assert out.device.type == "neuron"
    assert "cpp_fused" in "\n".join(codes)
    torch.testing.assert_close(out, model(x))
    assert "neuron" in torch._dynamo.list_backends()


def test_import_torch_does_not_import_inductor(run_python):
    done = run_python(
        """
        import sys, torch
        assert torch.accelerator.current_accelerator().type == "neuron"
        loaded = [m for m in ("torch._inductor", "torch._dynamo") if m in sys.modules]
        print(loaded)
        """
    )
    assert done.returncode == 0, done.stderr
    assert "torch._inductor" not in done.stdout, done.stdout


# What stock torch lacks and device_agnostic/neuron/stock_torch.py replaces: (module, attribute).
INDUCTOR_PREDICATES = [
    ("torch._inductor.ir", "is_cpu"),
    ("torch._inductor.utils", "get_current_backend"),
    ("torch._inductor.codegen.common", "get_current_backend"),
    ("torch._inductor.scheduler", "get_current_backend"),
    ("torch._inductor.kernel.mm_common", "get_current_backend"),
]

_COMPILE_AND_CHECK_THE_PREDICATES = """
    import importlib, torch
    from torch._inductor import scheduler
    predicates = {PREDICATES!r}
    def current():
        found = {{(m, a): getattr(importlib.import_module(m), a) for m, a in predicates}}
        found["BaseSchedulerNode.is_cpu"] = scheduler.BaseSchedulerNode.is_cpu
        return found
    before = current()
    f = torch.compile(lambda x, y: (x.sin() * y + 1).sum(-1), dynamic=True)
    for n in (5, 7):
        x, y = torch.randn(n, 3, device="neuron"), torch.randn(n, 3, device="neuron")
        out = f(x, y)
        assert out.device.type == "neuron"
        torch.testing.assert_close(out, (x.sin() * y + 1).sum(-1))
    after = current()
    replaced = sorted(str(k) for k in before if before[k] is not after[k])
    from torch._inductor import utils
    print("PATCHED" if hasattr(utils, "device_uses_cpp_backend") else "STOCK", replaced)
"""


def test_stock_torch_gets_the_inductor_workaround_and_it_compiles(run_python):
    done = run_python(_COMPILE_AND_CHECK_THE_PREDICATES.format(PREDICATES=INDUCTOR_PREDICATES))
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith("STOCK"), done.stdout
    assert "is_cpu" in done.stdout  # the workaround is what makes the compile work here


@pytest.mark.slow
def test_on_patched_torch_no_private_torch_function_is_replaced(run_python, tmp_path):
    # With the series (patch 0051: a device registered with CppScheduling gets the CPU's rules)
    # the backend compiles through torch's supported registration alone. The shadow is a patched
    # copy of the installed torch's Python files (tools.patchqueue shadow), ~50 s to build.
    from pathlib import Path

    from tools.patchqueue.series import load_series
    from tools.patchqueue.verify import ensure_patched_shadow, installed_torch

    root = Path(__file__).resolve().parents[1]
    shadow, _ = ensure_patched_shadow(
        load_series(root / "patches"), installed_torch(), tmp_path / "patched-torch"
    )
    done = run_python(
        _COMPILE_AND_CHECK_THE_PREDICATES.format(PREDICATES=INDUCTOR_PREDICATES),
        env={"PYTHONPATH": f"{shadow}{os.pathsep}{root}"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip() == "PATCHED []", done.stdout


def _conv_net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(8, 4),
    )


def test_a_compiled_conv_net_with_layout_optimization_matches_eager():
    # Inductor's layout optimization (on by default; forced here, which its heuristics do for
    # a ResNet-18) makes the convolutions' inputs channels-last. The generated code asserts each
    # convolution's strides as FakeTensor predicts them for a PrivateUse1 device (contiguous);
    # neuron's convolution must return that layout, not the CPU kernel's channels-last.
    assert torch._inductor.config.layout_optimization
    eager = _conv_net().to("neuron")
    compiled_model = _conv_net().to("neuron")
    x = torch.randn(2, 3, 16, 16, device="neuron")
    with torch._inductor.config.patch(force_layout_optimization=True):
        compiled = torch.compile(compiled_model)
        actual, (forward_code, *_) = run_and_get_code(compiled, x)
        actual.square().sum().backward()
    assert "(768, 1, 48, 3)" in forward_code  # the input made channels-last: the optimization ran
    expected = eager(x)
    expected.square().sum().backward()
    _assert_all_neuron([actual], "the compiled output")
    torch.testing.assert_close(actual, expected)
    for got, want in zip(compiled_model.parameters(), eager.parameters(), strict=True):
        torch.testing.assert_close(got.grad, want.grad)
