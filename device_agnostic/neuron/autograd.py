"""Backward passes over neuron tensors run on the thread that calls them, as on the CPU.

Why: torch's autograd engine gives every non-CPU device type a worker thread per device
(torch/csrc/autograd/engine.cpp, ``Engine::ready_queue``): a node whose gradients live on neuron
is pushed to that thread's queue, and the thread that called ``backward()`` sleeps until the
device thread has run the graph. For a device whose kernels run on the host (neuron's host
execution) that buys no overlap: each ``backward()`` pays two cross-thread handoffs (wake the
device thread, wake the caller back), +35 to +150 us on a loaded 2-core machine, and the device
thread brings a second OpenMP team onto the same cores. A small MLP's training step then costs
1.5x the CPU's although every kernel is the CPU's.

The engine already has the mode we want: when the AutogradState flag ``multithreading_enabled``
is off (``torch.autograd.set_multithreading_enabled(False)``), every node goes to the calling
thread's queue, which is how the CPU always runs. So the engine object that torch.autograd calls
(``Variable._execution_engine``, used by ``torch.autograd.backward`` and ``torch.autograd.grad``)
is replaced by a subclass whose ``run_backward`` turns the flag off for the duration of the call
only, and back on after it, even when backward raises. Everything else is torch's own engine,
unchanged:

- reentrant backward (a backward inside a hook or a custom Function, checkpointing) runs
  reentrantly on the caller's queue, as it does on the CPU;
- hooks, anomaly mode, ``retain_graph``/``create_graph``, ``queue_callback`` and
  ``is_checkpoint_valid`` are the engine's;
- streams: the engine still runs each node under the stream it was recorded on and syncs leaf
  streams with the caller's current streams (that code does not depend on the thread);
- several threads calling backward each drive their own graph on their own thread, concurrently,
  as on the CPU (neuron's kernels are the CPU's, and the caching allocator and host execution
  are thread-safe); with device threads they were serialized on the one neuron thread;
- mixed CPU and neuron graphs run wholly on the caller, as a CPU graph does.

What a user can see:

- ``torch.autograd.is_multithreading_enabled()`` is unchanged outside backward, and a user who
  turned multithreading off keeps it off. *Inside* a backward pass (a hook, a custom
  ``Function.backward``) it reads False: that pass indeed runs on the calling thread, as under
  ``set_multithreading_enabled(False)``.
- Hooks run on the thread that called ``backward()`` instead of torch's neuron worker thread.
- C++ callers of ``torch::autograd::backward`` (not through Python) keep the device thread.

The device thread is kept when another accelerator with its own autograd threads is present
(CUDA, XPU, MPS, MTIA: turning the flag off would move their backward too), and on request:
``NEURON_AUTOGRAD_DEVICE_THREADS=1`` keeps torch's default, for comparison or as an escape hatch.
"""

from __future__ import annotations

import os

import torch
from torch.autograd.variable import Variable

ENV_DEVICE_THREADS = "NEURON_AUTOGRAD_DEVICE_THREADS"


class CallerThreadEngine(torch._C._ImperativeEngine):
    """torch's autograd engine, running each backward call on the calling thread."""

    def run_backward(self, *args: object, **kwargs: object) -> object:
        """The engine's run_backward with multithreading off for this call only."""
        if not torch._C._is_multithreading_enabled():
            return super().run_backward(*args, **kwargs)
        torch._C._set_multithreading_enabled(False)
        try:
            return super().run_backward(*args, **kwargs)
        finally:
            torch._C._set_multithreading_enabled(True)


def _other_accelerator_present() -> bool:
    """Whether a device type other than neuron that has autograd device threads is usable."""
    for name in ("cuda", "xpu", "mps", "mtia"):
        module = getattr(torch, name, None)
        is_available = getattr(module, "is_available", None)
        if is_available is not None and is_available():
            return True
    return False


def device_threads_requested() -> bool:
    """Whether NEURON_AUTOGRAD_DEVICE_THREADS asks for torch's device thread (1) or not (0)."""
    value = os.environ.get(ENV_DEVICE_THREADS, "")
    if value in ("", "0"):
        return False
    if value == "1":
        return True
    raise RuntimeError(
        f"{ENV_DEVICE_THREADS} must be 0 (neuron backward runs on the calling thread, the "
        f"default) or 1 (torch's autograd device thread), but got {value!r}."
    )


def install() -> bool:
    """Makes ``Variable._execution_engine`` a CallerThreadEngine; returns whether it did."""
    if isinstance(Variable._execution_engine, CallerThreadEngine):
        return True
    if device_threads_requested() or _other_accelerator_present():
        return False
    if type(Variable._execution_engine) is not torch._C._ImperativeEngine:
        return False  # someone else replaced the engine: leave theirs in place
    Variable._execution_engine = CallerThreadEngine()
    return True


def runs_on_calling_thread() -> bool:
    """Whether backward passes over neuron tensors run on the calling thread."""
    return isinstance(Variable._execution_engine, CallerThreadEngine)
