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
is replaced by a subclass, ``NeuronAutogradEngine``, whose ``run_backward`` turns the flag off for
the duration of the call only, and back on after it, even when backward raises. Everything else
is torch's own engine, unchanged:

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

In both modes ``backward()`` returns only once no engine thread holds the pass's Python state.
torch 2.13's ``_engine_run_backward`` stashes a ``contextvars`` context in the thread-local
state that every graph task copies; the copy is dropped by whichever thread drops the graph task
last, and dropping it takes the GIL. With a device thread that is often the device thread,
*after* the caller has returned (15% of backward calls on the loaded 2-core machine). If the
interpreter is finalizing by then, CPython ends the device thread inside ``take_gil`` with
``pthread_exit``, whose unwinding crosses the noexcept ``~ThreadLocalState``: "terminate called
without an active exception", exit code 134, after a program that had finished its work. So
``run_backward`` stashes its own reference to that context, and after the engine returns waits
(GIL released, bounded) until the graph task's copy is gone. In caller-thread mode the caller
drops the graph task itself and the wait is never entered.

Upstream: this is a workaround for a torch limitation, the only replacement of a torch internal
the backend makes at import (the other, inductor's CPU predicates, is confined to stock torch in
``stock_torch.py``). It is a C++ engine policy, not a Python hook a series patch could add:
pytorch/pytorch#192004 (open, "Engine reuses calling thread when the whole graph is on one
device", after #156188) makes the engine keep a single-device graph on the calling thread, which
retires this module for neuron once it lands.
"""

from __future__ import annotations

import os
import sys
import time

import torch
from torch.autograd.variable import Variable

ENV_DEVICE_THREADS = "NEURON_AUTOGRAD_DEVICE_THREADS"


# How long backward() waits for an engine thread to drop the pass's Python state. Normally
# microseconds; the bound only keeps a wedged device thread from hanging the caller.
_RELEASE_WAIT_S = 10.0
# The key under which torch/autograd/graph.py's _engine_run_backward stashes the context.
_TLS_CONTEXT_KEY = "context"


class NeuronAutogradEngine(torch._C._ImperativeEngine):
    """torch's autograd engine; backward returns once its graph task's Python state is released.

    ``on_calling_thread``: run each backward call on the calling thread (multithreading off for
    that call only) instead of torch's neuron device thread.
    """

    on_calling_thread: bool = True

    def run_backward(self, *args: object, **kwargs: object) -> object:
        """The engine's run_backward, on the calling thread when ``on_calling_thread``."""
        hold = _ContextHold.take()
        try:
            if not self.on_calling_thread or not torch._C._is_multithreading_enabled():
                return super().run_backward(*args, **kwargs)
            torch._C._set_multithreading_enabled(False)
            try:
                return super().run_backward(*args, **kwargs)
            finally:
                torch._C._set_multithreading_enabled(True)
        finally:
            if hold is not None:
                hold.wait_until_released()


class _ContextHold:
    """Our own thread-local holder of the context that torch stashed for this backward call.

    Re-stashing makes a fresh holder that only this call's graph task copies; its destruction
    lowers the context's reference count by one, which is how its release is observed.
    """

    def __init__(self, context: object) -> None:
        self.context = context
        self.baseline = 0

    @classmethod
    def take(cls) -> _ContextHold | None:
        """Replaces torch's holder by ours, before any graph task has copied it."""
        if not torch._C._is_key_in_tls(_TLS_CONTEXT_KEY):
            return None
        hold = cls(torch._C._get_obj_in_tls(_TLS_CONTEXT_KEY))  # no other local name for it
        torch._C._remove_obj_from_tls(_TLS_CONTEXT_KEY)
        # Counted with no holder in the thread-local state: the references outside it.
        hold.baseline = hold._references()
        torch._C._stash_obj_in_tls(_TLS_CONTEXT_KEY, hold.context)
        return hold

    def _references(self) -> int:
        """The context's reference count, always taken the same way (attribute + argument)."""
        return sys.getrefcount(self.context)

    def wait_until_released(self) -> None:
        """Waits, GIL released, until no graph task holds the context; re-stashes it for torch.

        torch's own ``finally`` removes the key after we return, on this thread, with the GIL
        held. A reentrant backward inside this one may have replaced or removed the key
        meanwhile; either way the map's holder is ours to drop, and only graph tasks can still
        hold the context.
        """
        torch._C._remove_obj_from_tls(_TLS_CONTEXT_KEY)
        deadline = time.monotonic() + _RELEASE_WAIT_S
        while self._references() > self.baseline and time.monotonic() < deadline:
            time.sleep(20e-6)  # releases the GIL, which the device thread needs to drop its copy
        torch._C._stash_obj_in_tls(_TLS_CONTEXT_KEY, self.context)


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
    """Makes ``Variable._execution_engine`` a NeuronAutogradEngine; returns whether it did.

    The engine runs backward on the calling thread unless NEURON_AUTOGRAD_DEVICE_THREADS=1 or
    another accelerator with autograd device threads is present.
    """
    if isinstance(Variable._execution_engine, NeuronAutogradEngine):
        return True
    if type(Variable._execution_engine) is not torch._C._ImperativeEngine:
        return False  # someone else replaced the engine: leave theirs in place
    engine = NeuronAutogradEngine()
    engine.on_calling_thread = not (device_threads_requested() or _other_accelerator_present())
    Variable._execution_engine = engine
    return True


def runs_on_calling_thread() -> bool:
    """Whether backward passes over neuron tensors run on the calling thread."""
    engine = Variable._execution_engine
    return isinstance(engine, NeuronAutogradEngine) and engine.on_calling_thread
