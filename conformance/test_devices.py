"""Device management: the device count, the current device (set, nested, restored, per thread),
clear errors for an index out of range, and the same-device rule for operators.

The current device is judged through torch.accelerator, which drives every accelerator the same
way; the plugin restores the current device after each test.
"""

from __future__ import annotations

import threading

import pytest
import torch

from .assertions import assert_on_device, reproducer
from .requirements import require_accelerator, require_api, require_devices

SAME_DEVICE = "Expected all tensors to be on the same device"
# An invalid index may surface as any of these (CUDA: torch.AcceleratorError, a RuntimeError).
INDEX_ERRORS = (RuntimeError, IndexError, ValueError)


def _current() -> int:
    return torch.accelerator.current_device_index()


def test_device_count_agrees_with_torch_accelerator(backend):
    count = backend.module.device_count()
    if backend.is_cpu:
        assert count == 1, f"torch.cpu.device_count() is {count}; torch documents it as always 1"
        return
    require_accelerator(backend)
    assert count >= 1, f"{backend.module.__name__}.device_count() is {count}"
    assert torch.accelerator.device_count() == count, (
        f"torch.accelerator.device_count() is {torch.accelerator.device_count()}, "
        f"{backend.module.__name__}.device_count() is {count}"
    )
    assert torch.accelerator.is_available(), "torch.accelerator.is_available() is False"


@pytest.mark.parametrize("as_device", [False, True], ids=["index", "torch.device"])
def test_set_device_index_changes_the_current_device_and_where_tensors_go(backend, as_device):
    require_accelerator(backend)
    for index in reversed(range(backend.device_count)):
        target = backend.device(index) if as_device else index
        torch.accelerator.set_device_index(target)
        assert _current() == index, (
            f"set_device_index({target!r}) left current_device_index() at {_current()}"
        )
        created = torch.empty(2, device=backend.name)
        assert created.device.index == index, (
            f"with device {index} current, torch.empty(device={backend.name!r}) is on "
            f"{created.device}"
        )
        stream = torch.accelerator.current_stream()
        assert stream.device_index == index, (
            f"with device {index} current, current_stream() belongs to device {stream.device_index}"
        )


def test_device_index_context_nests_and_restores(backend):
    require_accelerator(backend)
    require_api("torch.accelerator.device_index", since="2.8")
    start = _current()
    last = backend.device_count - 1
    with torch.accelerator.device_index(last):
        assert _current() == last, f"inside device_index({last}) the current device is {_current()}"
        with torch.accelerator.device_index(0):
            assert _current() == 0, f"inside device_index(0) the current device is {_current()}"
        assert _current() == last, (
            f"leaving the inner device_index(0) should restore {last}, not {_current()}"
        )
        with torch.accelerator.device_index(None):
            assert _current() == last, "device_index(None) must leave the current device alone"
    assert _current() == start, f"leaving device_index should restore {start}, not {_current()}"


def test_device_index_context_restores_after_an_exception(backend):
    require_accelerator(backend)
    require_api("torch.accelerator.device_index", since="2.8")
    start = _current()
    last = backend.device_count - 1
    with pytest.raises(KeyError):
        with torch.accelerator.device_index(last):
            with torch.accelerator.device_index(0):
                raise KeyError("leave both blocks")
    assert _current() == start, (
        f"an exception left the current device at {_current()}; device_index must restore {start}"
    )


def test_the_current_device_is_per_thread(backend):
    require_accelerator(backend)
    require_devices(backend)
    torch.accelerator.set_device_index(0)
    seen = []

    def other_thread() -> None:
        seen.append(_current())
        torch.accelerator.set_device_index(1)
        seen.append(_current())

    thread = threading.Thread(target=other_thread)
    thread.start()
    thread.join()
    assert seen[1] == 1, f"set_device_index(1) in a thread left its device at {seen[1]}"
    assert _current() == 0, "set_device_index(1) in another thread changed this thread's device"


OUT_OF_RANGE_ACTIONS = {
    "set_device_index": lambda backend, i: torch.accelerator.set_device_index(i),
    "torch.empty": lambda backend, i: torch.empty(2, device=backend.device(i)),
    "Tensor.to": lambda backend, i: torch.ones(2).to(backend.device(i)),
    "current_stream": lambda backend, i: torch.accelerator.current_stream(i),
}


@pytest.mark.parametrize("action", sorted(OUT_OF_RANGE_ACTIONS))
def test_an_out_of_range_device_index_raises_a_clear_error(backend, action):
    require_accelerator(backend)
    start = _current()
    index = backend.device_count
    with pytest.raises(INDEX_ERRORS) as raised:
        OUT_OF_RANGE_ACTIONS[action](backend, index)
    message = str(raised.value)
    assert "device" in message.lower(), (
        f"{action} with device index {index} of {backend.device_count} raised "
        f"{type(raised.value).__name__}({message!r}), which does not say a device is wrong"
    )
    assert _current() == start, f"the failed {action} changed the current device to {_current()}"


# ---- the same-device rule ------------------------------------------------------------------------

MIXING_OPERATORS = {
    "add": lambda a, b: a + b,
    "add_": lambda a, b: a.add_(b),
    "matmul": lambda a, b: a.reshape(2, 2) @ b.reshape(2, 2),
    "cat": lambda a, b: torch.cat([a, b]),
    "where": lambda a, b: torch.where(a > 0, a, b),
}


def _assert_same_device_error(operator: str, first: torch.Tensor, second: torch.Tensor) -> None:
    with pytest.raises(RuntimeError, match=SAME_DEVICE) as raised:
        MIXING_OPERATORS[operator](first, second)
    message = str(raised.value)
    for device in (first.device, second.device):
        assert str(device) in message, (
            f"{operator} of tensors on {first.device} and {second.device} raised {message!r}, "
            f"which does not name {device}"
        )


@pytest.mark.parametrize("operator", sorted(MIXING_OPERATORS))
def test_mixing_the_device_with_a_cpu_tensor_raises(backend, device, operator):
    if backend.is_cpu:
        pytest.skip("not applicable: the backend is the CPU, so a CPU tensor is on its device")
    _assert_same_device_error(operator, torch.ones(4, device=device), torch.ones(4))


@pytest.mark.parametrize("operator", sorted(MIXING_OPERATORS))
def test_mixing_two_devices_raises(backend, operator):
    require_devices(backend)
    first = torch.ones(4, device=backend.device(0))
    _assert_same_device_error(operator, first, torch.ones(4, device=backend.device(1)))


def test_a_zero_dim_cpu_tensor_mixes_with_the_device_as_a_scalar(device):
    values = torch.arange(4.0)
    result = values.to(device) * torch.tensor(3.0) + torch.tensor(1.0)
    assert_on_device(result, device, "device tensor * 0-dim CPU tensor")
    assert torch.equal(result.cpu(), values * 3 + 1), reproducer(
        f"print(torch.arange(4.0, device='{device}') * torch.tensor(3.0) + torch.tensor(1.0))"
    )


def test_operators_run_on_their_inputs_device_not_the_current_one(backend):
    require_accelerator(backend)
    require_devices(backend)
    torch.accelerator.set_device_index(0)
    values = torch.arange(6.0)
    result = (values.to(backend.device(1)) * 2).sum(0, keepdim=True)
    assert_on_device(result, backend.device(1), "an operator on device 1 with device 0 current")
    assert result.item() == (values * 2).sum().item()
    assert _current() == 0, f"an operator on device 1 left the current device at {_current()}"
