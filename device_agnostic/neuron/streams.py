"""Streams and events: neuron's torch.Stream and torch.Event, and the torch.cuda-style helpers.

Work runs in issue order on the host (see csrc/NeuronStream.h), so a stream is idle whenever it
is queried; the pool, priorities, current-stream bookkeeping and the rules for events (devices,
timing) are those of CUDA.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch

from . import _C
from ._device import _DeviceLike, device_index


class Stream(torch.Stream):
    """A neuron stream: ``torch.Stream`` whose device defaults to the current neuron device.

    ``priority`` 0 is normal and a negative number is high priority, as in CUDA.
    """

    def __new__(cls, device: _DeviceLike = None, priority: int = 0, **kwargs: object) -> Stream:
        if kwargs:  # rebuilt from (stream_id, device_index, device_type)
            return super().__new__(cls, **kwargs)
        return super().__new__(
            cls, device=torch.device("neuron", device_index(device)), priority=priority
        )

    @property
    def priority(self) -> int:
        return _C._stream_priority(self.device_index, self.stream_id)


class _NeuronEventType(type(torch.Event)):
    def __instancecheck__(cls, instance: object) -> bool:
        return isinstance(instance, torch.Event) and instance.device.type == "neuron"


class Event(torch.Event, metaclass=_NeuronEventType):
    """A neuron event: a ``torch.Event`` on the neuron device.

    Calling it returns a plain ``torch.Event`` because torch's Event.elapsed_time and
    Stream.record_event accept exactly ``torch.Event`` and no subclass; ``isinstance(e,
    torch.neuron.Event)`` holds for every neuron event. ``elapsed_time`` needs both events
    created with ``enable_timing=True``.
    """

    def __new__(  # type: ignore[misc]
        cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False
    ) -> torch.Event:
        return torch.Event(
            device="neuron",
            enable_timing=enable_timing,
            blocking=blocking,
            interprocess=interprocess,
        )


def current_stream(device: _DeviceLike = None) -> torch.Stream:
    """Return this thread's current stream on ``device``."""
    return torch.accelerator.current_stream(device_index(device))


def default_stream(device: _DeviceLike = None) -> torch.Stream:
    """Return ``device``'s default stream (stream id 0)."""
    index = device_index(device)
    device_type = torch.accelerator.current_stream(index).device_type
    return torch.Stream(stream_id=0, device_index=index, device_type=device_type)


def set_stream(stream: torch.Stream) -> None:
    """Make ``stream`` current on its device for this thread."""
    torch.accelerator.set_stream(stream)


@contextmanager
def stream(stream: torch.Stream | None) -> Iterator[None]:
    """Make ``stream`` current (and its device current) for the block; restore both after."""
    if stream is None:
        yield
        return
    with stream:
        yield
