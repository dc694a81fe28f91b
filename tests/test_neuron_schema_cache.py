"""Host execution caches each operator's schema facts (NeuronHostExecution.cpp,
OperatorFactsCache): the cache must follow overloads, dtypes, operators registered after the first
call, and operators deregistered and registered again under the same name with another schema."""

from __future__ import annotations

import itertools

import pytest
import torch

from device_agnostic.neuron import _C

_names = itertools.count()


def cached() -> int:
    return _C._host_execution_cached_operators()


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_one_operator_through_its_overloads_and_dtypes(dtype):
    a_cpu = (torch.arange(12) - 5).reshape(3, 4).to(dtype)
    b_cpu = torch.ones(3, 4, dtype=dtype) * 2
    a, b = a_cpu.to("neuron"), b_cpu.to("neuron")
    torch.testing.assert_close(torch.add(a, b).cpu(), torch.add(a_cpu, b_cpu))  # add.Tensor
    torch.testing.assert_close(torch.add(a, 3).cpu(), torch.add(a_cpu, 3))  # add.Scalar
    torch.testing.assert_close(torch.add(a, b, alpha=2).cpu(), torch.add(a_cpu, b_cpu, alpha=2))
    out = torch.empty(3, 4, dtype=dtype, device="neuron")
    result = torch.add(a, b, out=out)  # add.out: the result is the out= argument itself
    assert result.data_ptr() == out.data_ptr()
    torch.testing.assert_close(out.cpu(), a_cpu + b_cpu)
    resized = torch.empty(0, dtype=dtype, device="neuron")
    torch.add(a, b, out=resized)  # add.out resizing its argument
    assert resized.shape == (3, 4) and resized.device.type == "neuron"
    torch.testing.assert_close(resized.cpu(), a_cpu + b_cpu)
    c = a.clone()
    c.add_(b)  # add_.Tensor: in place
    torch.testing.assert_close(c.cpu(), a_cpu + b_cpu)


def test_results_of_host_execution_are_full_neuron_tensors():
    # A fresh result's TensorImpl is made a neuron tensor in place: device, autograd and
    # autocast keys must all be neuron's.
    x = torch.randn(4, 4, device="neuron") + 1
    assert x.device.type == "neuron" and not x.is_cpu
    keys = torch._C._dispatch_keys
    assert keys(x) == keys(torch.empty(4, 4, device="neuron"))
    assert keys(torch.randn(4, 4, device="neuron").conj() * 1j).has(
        torch._C.DispatchKey.PrivateUse1
    )
    with torch.inference_mode():
        y = torch.randn(4, 4, device="neuron") + 1
        assert y.is_inference() and y.device.type == "neuron"
        assert keys(y) == keys(torch.empty(4, 4, device="neuron"))
    x.requires_grad_()
    (x * x).sum().backward()
    torch.testing.assert_close(x.grad.cpu(), 2 * x.detach().cpu())
    with torch.autocast("neuron"):
        assert torch.mm(x.detach() + 0, x.detach()).dtype == torch.bfloat16
    with pytest.raises(RuntimeError, match="same device"):
        torch.add(torch.randn(4, 4) + 1, x.detach() + 1, out=torch.empty(4, 4))


def test_cpu_index_tensors_and_cpu_out_arguments_keep_their_rules():
    x = torch.arange(10.0, device="neuron")
    index = torch.tensor([1, 3, 5])  # CPU indices are allowed for indexing, as on CUDA
    torch.testing.assert_close(x[index].cpu(), torch.tensor([1.0, 3.0, 5.0]))
    x[index] = torch.zeros(3, device="neuron")
    assert x[1].item() == 0.0
    with pytest.raises(RuntimeError, match="same device"):
        torch.add(x, x, out=torch.empty([]))  # a CPU out= never receives a neuron result


def test_operators_registered_after_the_first_call_and_redefined_with_another_schema():
    name = f"neuron_schema_cache_{next(_names)}"
    # Every other operator this test runs on neuron runs once first, so that the count below
    # moves with the library's operator only.
    ones = torch.ones(3, device="neuron")
    fives = torch.full((3,), 5.0, device="neuron")
    scalar = torch.ones([], device="neuron")
    x = ones * 0
    torch.add(ones, 1).cpu()
    before = cached()

    first = torch.library.Library(name, "DEF")
    first.define("f(Tensor x) -> Tensor")
    first.impl("f", lambda x: x * 2, "CPU")
    op = getattr(torch.ops, name).f
    torch.testing.assert_close(op(ones).cpu(), torch.full((3,), 2.0))
    assert cached() == before + 1
    first._destroy()
    assert cached() == before, "the deregistered operator's facts were kept"

    # Same name, another schema: an in-place operator with an extra argument. Facts of the old
    # schema (one argument, nothing written) would read past the arguments or miss the write.
    second = torch.library.Library(name, "DEF")
    second.define("f(Tensor(a!) x, Tensor y) -> Tensor(a!)")

    def f_inplace(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x.add_(y)

    second.impl("f", f_inplace, "CPU")
    op = getattr(torch.ops, name).f
    result = op(x, fives)
    assert result.data_ptr() == x.data_ptr()
    torch.testing.assert_close(x.cpu(), torch.full((3,), 5.0))
    # A 0-dim CPU tensor may be an input of a neuron operator, never its written argument.
    with pytest.raises(RuntimeError, match="same device"):
        op(torch.zeros([]), scalar)
    second._destroy()
    assert cached() == before
