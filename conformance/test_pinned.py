"""Pinned (page-locked) host memory for the accelerator: pin_memory() and is_pinned() (views and
slices included), factories with pin_memory=True, non_blocking copies from and into pinned
memory, and DataLoader(pin_memory=True).

Pinned memory belongs to torch's current accelerator, so these tests judge the backend that
torch.accelerator drives.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.utils.data import DataLoader, TensorDataset

from .assertions import assert_matches_reference
from .backend import Backend
from .requirements import require, require_accelerator
from .strategies import MAKE_SNIPPET, TensorSpec, strided_views, tensor_specs


@pytest.fixture
def pinned_backend(backend: Backend) -> Backend:
    """The backend, once it declares pinned memory (skips before hypothesis starts)."""
    require(backend, "pinned_memory")
    require_accelerator(backend)
    return backend


def test_a_plain_cpu_tensor_is_not_pinned():
    assert not torch.arange(6.0).is_pinned(), "a tensor from torch.arange claims to be pinned"


@given(data=st.data())
def test_pin_memory_returns_a_pinned_copy_with_the_same_values(pinned_backend, reference, data):
    spec: TensorSpec = data.draw(tensor_specs(reference.capabilities.dtypes))
    plain = spec.make()
    pinned = plain.pin_memory()
    # An empty tensor has no memory to pin: torch (CUDA included) reports it unpinned.
    assert pinned.is_pinned() or plain.numel() == 0, (
        f"{spec.code}.pin_memory().is_pinned() is False"
    )
    assert not plain.is_pinned(), "pin_memory() pinned its source instead of returning a copy"
    assert pinned.device.type == "cpu", f"pin_memory() returned a tensor on {pinned.device}"
    assert_matches_reference(
        pinned,
        plain,
        what="pin_memory()",
        snippet=MAKE_SNIPPET + f"x = {spec.code}.pin_memory()",
        tolerance=(0, 0),
    )
    again = pinned.pin_memory()
    assert torch.equal(again, plain), "pin_memory() of a pinned tensor changed its values"


@given(index=strided_views((6, 7)))
def test_views_and_slices_of_pinned_memory_are_pinned(pinned_backend, index):
    base = torch.arange(42.0).reshape(6, 7).pin_memory()
    views = {
        "slice": base[index],
        "last element": base[-1, -1],
        "transpose": base.t(),
        "flattened view": base.view(-1)[5:],
    }
    unpinned = [name for name, view in views.items() if not view.is_pinned()]
    assert not unpinned, f"views of pinned memory are not pinned: {unpinned} (slice {index})"


FACTORIES = {
    "empty": lambda: torch.empty(3, 4, pin_memory=True),
    "zeros": lambda: torch.zeros(3, 4, pin_memory=True),
    "ones": lambda: torch.ones(3, 4, pin_memory=True),
    "full": lambda: torch.full((3, 4), 2.5, pin_memory=True),
}


@pytest.mark.parametrize("factory", sorted(FACTORIES))
def test_factories_with_pin_memory_true_give_pinned_tensors(pinned_backend, factory):
    tensor = FACTORIES[factory]()
    assert tensor.device.type == "cpu" and tensor.is_pinned(), (
        f"torch.{factory}(..., pin_memory=True) gives an unpinned tensor on {tensor.device}"
    )


@given(data=st.data())
def test_non_blocking_copies_from_and_into_pinned_memory_are_correct(pinned_backend, device, data):
    spec: TensorSpec = data.draw(tensor_specs(pinned_backend.capabilities.dtypes))
    source = spec.make().pin_memory()
    on_device = source.to(device, non_blocking=True)
    into = torch.empty_like(source).pin_memory()
    into.copy_(on_device, non_blocking=True)
    torch.accelerator.synchronize(device)
    snippet = MAKE_SNIPPET + (
        f"x = {spec.code}.pin_memory()\ny = x.to('{device}', non_blocking=True)\n"
        "z = torch.empty_like(x).pin_memory().copy_(y, non_blocking=True)\n"
        "torch.accelerator.synchronize()\nprint(torch.equal(z, x))"
    )
    assert_matches_reference(
        on_device, source, what="pinned -> device (non_blocking)", snippet=snippet, tolerance=(0, 0)
    )
    assert_matches_reference(
        into, source, what="device -> pinned (non_blocking)", snippet=snippet, tolerance=(0, 0)
    )


def test_non_blocking_copy_of_a_non_contiguous_pinned_view_is_correct(pinned_backend, device):
    view = torch.arange(48.0).reshape(6, 8).pin_memory()[1::2, ::3]
    moved = view.to(device, non_blocking=True)
    torch.accelerator.synchronize(device)
    assert torch.equal(moved.cpu(), view), "a non-contiguous pinned view arrived changed"


# Non-contiguous sources to pin: pin_memory keeps the source's strides (CUDA's and every
# backend's pinned copy goes through the same strided copy), and its values.
NON_CONTIGUOUS = {
    "steps": "x[1::2, ::3]",
    "transpose": "x.t()",
    "offset": "x[2:, 1:]",
    "channels_last": "x.reshape(1, 2, 3, 4).contiguous(memory_format=torch.channels_last)",
}


@pytest.mark.parametrize("layout", sorted(NON_CONTIGUOUS))
def test_pin_memory_of_a_non_contiguous_tensor_keeps_its_values(pinned_backend, device, layout):
    x = torch.arange(24.0).reshape(6, 4) if layout != "channels_last" else torch.arange(24.0)
    source = eval(f"lambda x: {NON_CONTIGUOUS[layout]}")(x)
    pinned = source.pin_memory()
    snippet = f"x = torch.arange(24.0).reshape(6, 4)\np = ({NON_CONTIGUOUS[layout]}).pin_memory()"
    assert pinned.is_pinned(), f"pin_memory() of a {layout} view is not pinned"
    assert_matches_reference(
        pinned, source, what=f"pin_memory() of a {layout} view", snippet=snippet, tolerance=(0, 0)
    )
    moved = pinned.to(device, non_blocking=True)
    torch.accelerator.synchronize(device)
    assert_matches_reference(
        moved, source, what=f"a pinned {layout} view moved", snippet=snippet, tolerance=(0, 0)
    )


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dataloader_with_pin_memory_yields_pinned_batches(pinned_backend, num_workers):
    features = torch.arange(40.0).reshape(20, 2)
    labels = torch.arange(20)
    loader = DataLoader(
        TensorDataset(features, labels), batch_size=6, pin_memory=True, num_workers=num_workers
    )
    batches = list(loader)
    assert len(batches) == 4
    for number, (x, y) in enumerate(batches):
        assert x.is_pinned() and y.is_pinned(), (
            f"DataLoader(pin_memory=True, num_workers={num_workers}) batch {number} is not pinned"
        )
    assert torch.equal(torch.cat([x for x, _ in batches]), features)
    assert torch.equal(torch.cat([y for _, y in batches]), labels)
