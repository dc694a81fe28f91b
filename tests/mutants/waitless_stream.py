"""Waits that do nothing: a stream's wait_stream and wait_event return without ordering anything
(a runtime that forgets to enqueue the wait). Invisible while the backend runs every operation
before returning; caught once it is asynchronous (neuron with NEURON_LAUNCH_BLOCKING=0)."""

from __future__ import annotations

import torch


class _WaitlessStream(torch.Stream):
    def wait_stream(self, stream: torch.Stream) -> None:
        return None

    def wait_event(self, event: torch.Event) -> None:
        return None


torch.Stream = _WaitlessStream
