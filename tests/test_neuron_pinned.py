"""Pinned (page-locked) host memory of the neuron backend: pin_memory, is_pinned, non_blocking
copies and DataLoader(pin_memory=True)."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

DATALOADER_TIMEOUT_S = 60  # a hung worker fails the test instead of hanging the suite


def test_pin_memory_returns_a_pinned_copy_with_the_same_values():
    source = torch.arange(1000, dtype=torch.float32)
    pinned = source.pin_memory()
    assert pinned.is_pinned()
    assert pinned.device.type == "cpu"
    assert pinned.data_ptr() != source.data_ptr()
    assert torch.equal(pinned, source)
    assert not source.is_pinned()  # the original stays pageable


def test_pin_memory_of_a_pinned_tensor_returns_it_unchanged():
    pinned = torch.randn(64).pin_memory()
    assert pinned.pin_memory().data_ptr() == pinned.data_ptr()


def test_a_plain_cpu_tensor_is_not_pinned():
    for tensor in (torch.randn(16), torch.empty(1 << 20, dtype=torch.uint8), torch.zeros(3, 4)[1:]):
        assert not tensor.is_pinned()


def test_torch_empty_with_pin_memory_true_is_pinned():
    for dtype in (torch.float32, torch.int64, torch.uint8):
        tensor = torch.empty(4096, dtype=dtype, pin_memory=True)
        assert tensor.is_pinned()
        assert tensor.device.type == "cpu"
    assert torch.zeros(8, pin_memory=True).is_pinned()
    assert torch.ones(2, 3, pin_memory=True).sum().item() == 6


def test_slices_and_views_of_pinned_memory_are_pinned_to_the_last_element():
    pinned = torch.arange(4096, dtype=torch.float32).pin_memory()
    for view in (
        pinned[1:],
        pinned[4095:],
        pinned[1000:2000:7],
        pinned.view(64, 64)[:, 3],
        pinned.view(64, 64).t(),
        pinned[-1:],
    ):
        assert view.is_pinned()
    # A copy of a slice is ordinary memory again.
    assert not pinned[1:].clone().is_pinned()


def test_pinned_memory_stays_pinned_through_a_view_after_the_base_is_deleted():
    base = torch.arange(256, dtype=torch.int32).pin_memory()
    view = base[128:]
    del base
    assert view.is_pinned()
    assert view[0].item() == 128


@pytest.mark.parametrize("device", ["neuron:0", "neuron:1"])
def test_non_blocking_copies_from_pinned_memory_to_neuron_and_back_are_correct(device):
    torch.manual_seed(0)
    source = torch.randn(257, 33).pin_memory()
    on_device = source.to(device, non_blocking=True)
    assert on_device.device == torch.device(device)
    back = on_device.to("cpu", non_blocking=True)
    torch.accelerator.synchronize(torch.device(device).index)
    assert back.is_pinned()  # as on CUDA: a non_blocking device-to-host copy lands in pinned memory
    assert torch.equal(back, source)


def test_non_blocking_copy_into_a_pinned_buffer_and_into_device_memory_is_correct():
    values = torch.linspace(-3, 3, 1000)
    device_buffer = torch.empty(1000, device="neuron")
    device_buffer.copy_(values.pin_memory(), non_blocking=True)
    host_buffer = torch.empty(1000, pin_memory=True)
    host_buffer.copy_(device_buffer.mul(2), non_blocking=True)
    torch.accelerator.synchronize()
    assert host_buffer.is_pinned()
    assert torch.equal(host_buffer, values * 2)
    # Copies from pageable memory with non_blocking=True are correct too.
    pageable = torch.arange(10.0)
    assert torch.equal(pageable.to("neuron", non_blocking=True).cpu(), pageable)


def test_non_blocking_copy_of_a_non_contiguous_pinned_view_is_correct():
    pinned = torch.arange(64 * 64, dtype=torch.float32).pin_memory().view(64, 64)
    view = pinned.t()[5:40:3]
    assert view.is_pinned()
    assert torch.equal(view.to("neuron", non_blocking=True).cpu(), view)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_dataloader_with_pin_memory_yields_pinned_batches_with_the_right_values(num_workers):
    features = torch.arange(40, dtype=torch.float32).reshape(20, 2)
    labels = torch.arange(20)
    loader = DataLoader(
        TensorDataset(features, labels),
        batch_size=6,
        num_workers=num_workers,
        pin_memory=True,
        timeout=DATALOADER_TIMEOUT_S if num_workers else 0,
    )
    seen = []
    for batch_features, batch_labels in loader:
        assert batch_features.is_pinned()
        assert batch_labels.is_pinned()
        on_device = batch_features.to("neuron", non_blocking=True)
        seen.append((on_device * 10).cpu())
        assert torch.equal(on_device.cpu(), features[batch_labels])
    assert len(seen) == 4
    assert torch.equal(torch.cat(seen), features * 10)
