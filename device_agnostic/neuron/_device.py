"""Devices: enumeration, the current device, initialization and properties."""

from __future__ import annotations

import dataclasses
from typing import Any

import torch

from . import _C

_BACKEND = "neuron"
_DeviceLike = torch.device | str | int | None
# The code the extension's AcceleratorError for an invalid index carries (cudaErrorInvalidDevice).
_INVALID_DEVICE_ERROR_CODE = 101


def device_index(device: _DeviceLike, *, optional: bool = True) -> int:
    """Return the neuron device index that ``device`` names; None means the current device.

    Accepts an int, "neuron", "neuron:N" or a torch.device. Raises ValueError for a device of
    another type and torch.AcceleratorError (a RuntimeError, as CUDA raises) for an index that
    is not a visible NeuronCore.
    """
    if device is None:
        if not optional:
            raise ValueError("Expected a neuron device, but got None.")
        return current_device()
    if isinstance(device, int):
        index = device
    else:
        parsed = torch.device(device)
        if parsed.type != _BACKEND:
            raise ValueError(f"Expected a neuron device, but got {parsed}.")
        index = current_device() if parsed.index is None else parsed.index
    count = device_count()
    if not 0 <= index < count:
        error = torch.AcceleratorError(
            f"Invalid neuron device index {index}: this process has {count} neuron device(s). "
            "Set NEURON_RT_VISIBLE_CORES (e.g. '0-3') to expose more NeuronCores."
        )
        error.error_code = _INVALID_DEVICE_ERROR_CODE
        raise error
    return index


def is_available() -> bool:
    """Return True: neuron is emulated on host memory, so it is available if any core is visible.

    A malformed NEURON_RT_VISIBLE_CORES makes it unavailable (device_count() says why).
    """
    try:
        return _C._device_count() > 0
    except RuntimeError:
        return False


def device_count() -> int:
    """Return the number of visible NeuronCores.

    Read once from NEURON_RT_VISIBLE_CORES ("0-3", "0,2,5" or one index); 2 when unset.
    Raises RuntimeError naming the variable when its value is malformed.
    """
    return _C._device_count()


def current_device() -> int:
    """Return the index of this thread's current neuron device."""
    return _C._current_device()


def set_device(device: _DeviceLike) -> None:
    """Make ``device`` this thread's current neuron device (initializes the runtime)."""
    _C._set_device(device_index(device))


class device:
    """Context manager that makes ``device`` current and restores the previous device on exit,
    also when the block raises."""

    def __init__(self, device: _DeviceLike) -> None:
        self.index = device_index(device)
        self.previous = -1

    def __enter__(self) -> None:
        self.previous = current_device()
        if self.index != self.previous:
            _C._set_device(self.index)

    def __exit__(self, *exc_info: object) -> None:
        if self.index != self.previous:
            _C._set_device(self.previous)


def synchronize(device: _DeviceLike = None) -> None:
    """Wait until all work issued to ``device`` has completed."""
    torch.accelerator.synchronize(device_index(device))


def init() -> None:
    """Initialize the neuron runtime now rather than on first use."""
    _C._lazy_init()


_lazy_init = init


def is_initialized() -> bool:
    """Return True once the neuron runtime has been initialized in this process."""
    return _C._is_initialized()


def _is_in_bad_fork() -> bool:
    """Return True in a child forked from a process that had initialized neuron."""
    return _C._is_in_bad_fork()


_SUPPORTED_DTYPES = (
    torch.float32,
    torch.bfloat16,
    torch.float16,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
    torch.complex64,
)


@dataclasses.dataclass(frozen=True)
class NeuronDeviceProperties:
    """What ``get_device_properties`` reports for one NeuronCore."""

    name: str
    index: int
    total_memory: int
    supported_dtypes: tuple[torch.dtype, ...]
    major: int = 2
    minor: int = 0


def get_device_properties(device: _DeviceLike = None) -> NeuronDeviceProperties:
    """Describe a NeuronCore: name, index, total memory (NEURON_DEVICE_MEMORY) and dtypes."""
    index = device_index(device)
    return NeuronDeviceProperties(
        name=get_device_name(index),
        index=index,
        total_memory=_C._device_memory_capacity(),
        supported_dtypes=_SUPPORTED_DTYPES,
    )


def get_device_name(device: _DeviceLike = None) -> str:
    """Return the NeuronCore's name."""
    device_index(device)
    return "AWS NeuronCore-v2 (emulated on host memory)"


def get_device_capability(device: _DeviceLike = None) -> tuple[int, int]:
    """Return the NeuronCore generation as (major, minor), as torch.cuda does for SMs."""
    properties = get_device_properties(device)
    return properties.major, properties.minor


def get_amp_supported_dtype() -> list[torch.dtype]:
    """Return the dtypes torch.autocast("neuron") may compute in."""
    return [torch.bfloat16, torch.float16]


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """Return True: NeuronCores compute natively in bfloat16."""
    return True


def _describe(properties: NeuronDeviceProperties) -> dict[str, Any]:
    return dataclasses.asdict(properties)
