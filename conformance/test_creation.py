"""Creation, copy and transfer: factories, to/from the device, non_blocking, dtype conversion,
contiguity and memory formats, compared with the reference."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from .assertions import assert_matches_reference, assert_on_device, reproducer
from .requirements import require_devices
from .strategies import MAKE_SNIPPET, TensorSpec, shapes, strided_views, tensor_specs

UNSUPPORTED_CANDIDATES = (torch.float64, torch.complex128, torch.float16, torch.bfloat16)


@given(data=st.data())
def test_round_trip_preserves_values(backend, device, data):
    spec: TensorSpec = data.draw(tensor_specs(backend.capabilities.dtypes))
    original = spec.make()
    moved = original.to(device)
    assert_on_device(moved, device)
    assert_matches_reference(
        moved.cpu(),
        original,
        what="cpu -> device -> cpu",
        snippet=MAKE_SNIPPET + f"x = {spec.code}\nassert torch.equal(x.to('{device}').cpu(), x)",
        tolerance=(0, 0),
    )


@given(data=st.data(), non_blocking=st.booleans())
def test_non_blocking_copies_both_ways(backend, device, data, non_blocking):
    spec = data.draw(tensor_specs(backend.capabilities.dtypes))
    source = spec.make()
    if backend.capabilities.pinned_memory:
        source = source.pin_memory()
    on_device = source.to(device, non_blocking=non_blocking)
    back = on_device.to("cpu", non_blocking=non_blocking)
    if not backend.is_cpu:
        # torch.accelerator, not torch.<backend>.synchronize: the PrivateUse1 device-module
        # contract has no synchronize (OpenReg's module has none).
        torch.accelerator.synchronize(device)
    assert torch.equal(back, source.cpu())


# Every factory that takes device= (windows included), each making a small tensor.
FACTORIES = {
    "zeros": lambda device: torch.zeros(2, 3, device=device),
    "ones": lambda device: torch.ones(2, 3, device=device),
    "full": lambda device: torch.full((2, 3), 1.5, device=device),
    "arange": lambda device: torch.arange(6, device=device),
    "linspace": lambda device: torch.linspace(0, 1, 5, device=device),
    "logspace": lambda device: torch.logspace(0, 2, 5, device=device),
    "eye": lambda device: torch.eye(3, device=device),
    "tensor": lambda device: torch.tensor([[1.0, 2.0]], device=device),
    "as_tensor": lambda device: torch.as_tensor([[1.0, 2.0]], device=device),
    "asarray": lambda device: torch.asarray([[1.0, 2.0]], device=device),
    "scalar_tensor": lambda device: torch.scalar_tensor(2.5, device=device),
    "zeros_like": lambda device: torch.zeros_like(torch.ones(2, 3), device=device),
    "full_like": lambda device: torch.full_like(torch.ones(2, 3), 4.0, device=device),
    "tril_indices": lambda device: torch.tril_indices(4, 3, 1, device=device),
    "triu_indices": lambda device: torch.triu_indices(4, 3, -1, device=device),
    "hann_window": lambda device: torch.hann_window(8, device=device),
    "hamming_window": lambda device: torch.hamming_window(8, periodic=False, device=device),
    "bartlett_window": lambda device: torch.bartlett_window(7, device=device),
    "blackman_window": lambda device: torch.blackman_window(8, device=device),
    "kaiser_window": lambda device: torch.kaiser_window(8, True, 6.0, device=device),
    "empty": lambda device: torch.empty(2, 3, device=device),
    "empty_strided": lambda device: torch.empty_strided((2, 3), (1, 2), device=device),
    "empty_like": lambda device: torch.empty_like(torch.ones(2, 3), device=device),
    "rand": lambda device: torch.rand(4, device=device),
    "randn": lambda device: torch.randn(4, device=device),
    "randint": lambda device: torch.randint(0, 9, (4,), device=device),
    "randperm": lambda device: torch.randperm(6, device=device),
    "normal": lambda device: torch.normal(0.0, 1.0, (4,), device=device),
}
UNINITIALIZED_OR_RANDOM = {
    "empty", "empty_strided", "empty_like", "rand", "randn", "randint", "randperm", "normal",
}  # fmt: skip
DETERMINISTIC = set(FACTORIES) - UNINITIALIZED_OR_RANDOM


def _check_factory(reference, device: torch.device, factory: str) -> None:
    result = FACTORIES[factory](device)
    assert_on_device(result, device, what=f"torch.{factory}(..., device='{device}')")
    assert result.untyped_storage().device == device, (
        f"torch.{factory}(..., device='{device}') is a tensor on {result.device} whose storage "
        f"is on {result.untyped_storage().device}"
    )
    expected = FACTORIES[factory](reference.device())
    assert result.shape == expected.shape and result.dtype == expected.dtype
    if factory in DETERMINISTIC:
        assert_matches_reference(
            result,
            expected,
            what=factory,
            snippet=f"print(torch.{factory}(..., device='{device}'))",
        )


@pytest.mark.parametrize("factory", sorted(FACTORIES))
def test_factories_create_on_the_device(reference, device, factory):
    _check_factory(reference, device, factory)


@pytest.mark.parametrize("factory", sorted(FACTORIES))
@pytest.mark.parametrize("current", [0, 1], ids=["device 0 current", "device 1 current"])
def test_factories_create_on_the_named_device_not_the_current_one(
    backend, reference, factory, current
):
    """device="<type>:1" with device 0 current (and the reverse) creates on the device named:
    a factory that allocates on the current device passes every test that keeps device 0
    current."""
    require_devices(backend)
    named = backend.device(1 - current)
    previous = torch.accelerator.current_device_index()
    torch.accelerator.set_device_index(current)
    try:
        _check_factory(reference, named, factory)
        assert torch.accelerator.current_device_index() == current, (
            f"torch.{factory}(..., device='{named}') changed the current device"
        )
    finally:
        torch.accelerator.set_device_index(previous)


@pytest.mark.parametrize("how", ["grow", "shrink", "resize_as_"])
@pytest.mark.parametrize("current", [0, 1], ids=["device 0 current", "device 1 current"])
def test_resize_keeps_the_tensor_on_its_device_not_the_current_one(backend, how, current):
    """resize_ of a tensor on the device that is not current keeps its storage there, and the
    elements it had."""
    require_devices(backend)
    named = backend.device(1 - current)
    previous = torch.accelerator.current_device_index()
    torch.accelerator.set_device_index(current)
    try:
        tensor = torch.arange(6.0, device=named)
        if how == "grow":
            tensor.resize_(4, 50)
        elif how == "shrink":
            tensor.resize_(2, 2)
        else:
            tensor.resize_as_(torch.empty(7, 9))
        snippet = (
            f"torch.accelerator.set_device_index({current})\n"
            f"t = torch.arange(6.0, device='{named}')\nt.{how}(...)\n"
            "print(t.device, t.untyped_storage().device)"
        )
        assert_on_device(tensor, named, what=f"a tensor on {named} after {how}")
        assert tensor.untyped_storage().device == named, (
            f"with device {current} current, {how} of a tensor on {named} moved its storage to "
            f"{tensor.untyped_storage().device}" + reproducer(snippet)
        )
        kept = min(6, tensor.numel())
        assert torch.equal(tensor.flatten()[:kept].cpu(), torch.arange(float(kept))), (
            f"{how} of a tensor on {named} lost its elements" + reproducer(snippet)
        )
    finally:
        torch.accelerator.set_device_index(previous)


@given(data=st.data())
def test_dtype_conversion_on_device_matches_reference(backend, device, data):
    supported = backend.capabilities.dtypes
    spec = data.draw(tensor_specs(supported, shape=data.draw(shapes(max_dims=3))))
    target = data.draw(st.sampled_from(sorted(supported, key=str)))
    source = spec.make()
    expected = source.to(target)
    actual = source.to(device).to(target)
    assert_on_device(actual, device)
    assert_matches_reference(
        actual,
        expected,
        what=f"{spec.dtype} -> {target} on the device",
        snippet=MAKE_SNIPPET + f"x = {spec.code}\nprint(x.to('{device}').to({target}))",
        tolerance=(0, 0),
    )


@pytest.mark.parametrize("dtype", UNSUPPORTED_CANDIDATES, ids=str)
def test_unsupported_dtype_raises_a_clear_type_error(backend, device, dtype):
    if backend.capabilities.supports(dtype):
        assert torch.zeros(2, dtype=dtype, device=device).dtype == dtype
        return
    # A capability the backend lacks: it must refuse loudly, not compute garbage.
    with pytest.raises(TypeError, match=str(dtype).removeprefix("torch.")):
        torch.zeros(2, dtype=dtype, device=device)
    with pytest.raises(TypeError):
        torch.zeros(2, dtype=dtype).to(device)


@given(data=st.data())
def test_non_contiguous_views_transfer_like_the_reference(backend, device, data):
    spec = data.draw(tensor_specs(backend.capabilities.dtypes, shape=(5, 6)))
    index = data.draw(strided_views((5, 6)))
    source = spec.make()[index]
    moved = source.to(device)
    assert torch.equal(moved.cpu(), source)
    assert moved.contiguous().is_contiguous()
    assert torch.equal(moved.contiguous().cpu(), source.contiguous())


@pytest.mark.parametrize("memory_format", [torch.channels_last, torch.contiguous_format], ids=str)
def test_memory_formats_are_kept(device, memory_format):
    source = torch.randn(2, 3, 4, 5).contiguous(memory_format=memory_format)
    moved = source.to(device)
    assert moved.is_contiguous(memory_format=memory_format)
    converted = torch.randn(2, 3, 4, 5, device=device).contiguous(memory_format=memory_format)
    assert converted.is_contiguous(memory_format=memory_format)
    assert torch.equal(moved.cpu(), source)


def test_copy_between_devices(backend):
    if not backend.capabilities.multiple_devices or backend.device_count < 2:
        pytest.skip("not applicable: needs two devices")
    source = torch.arange(10.0, device=backend.device(0))
    moved = source.to(backend.device(1))
    assert_on_device(moved, backend.device(1))
    assert torch.equal(moved.cpu(), source.cpu())
