"""Timing events stamped when record() is called on the host rather than when the stream
reaches them: the region's work runs after both stamps are taken, so elapsed_time is a few
microseconds however long the region runs (and still >= 0, all that the older test checked).
Emulated by an Event whose elapsed_time is that constant submission gap, with torch's errors
for untimed and unrecorded events kept."""

import torch

_SUBMISSION_MS = 0.002


class _Event(torch.Event):
    # torch.Event.elapsed_time accepts exactly torch.Event, so the real one cannot be reached
    # from this subclass: its two errors are repeated here.
    def __init__(self, device=None, *, enable_timing=False, blocking=False, interprocess=False):
        self._timing = enable_timing
        self._recorded = False

    def record(self, stream=None) -> None:
        super().record(stream) if stream is not None else super().record()
        self._recorded = True

    def elapsed_time(self, end_event: torch.Event) -> float:
        if not (self._timing and getattr(end_event, "_timing", False)):
            raise ValueError("Both events must be created with argument 'enable_timing=True'.")
        if not (self._recorded and getattr(end_event, "_recorded", False)):
            raise ValueError("Both events must be recorded before calculating elapsed time.")
        return _SUBMISSION_MS


torch.Event = _Event
