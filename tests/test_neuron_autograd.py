"""Backward over neuron tensors runs on the calling thread (device_agnostic/neuron/autograd.py),
with torch's autograd semantics kept: hooks, reentrant backward, several threads, mixed graphs,
``torch.autograd.is_multithreading_enabled()``, and torch's device thread on request."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import pytest
import torch
import torch.utils.checkpoint

from device_agnostic.neuron import autograd as neuron_autograd


def hook_thread_and_flag(device: str) -> tuple[int, bool]:
    """The thread a backward hook runs on and what it reads for is_multithreading_enabled()."""
    seen: dict[str, object] = {}
    x = torch.ones(3, device=device, requires_grad=True)
    y = x * 2

    def hook(grad: torch.Tensor) -> torch.Tensor:
        seen["thread"] = threading.get_ident()
        seen["multithreading"] = torch.autograd.is_multithreading_enabled()
        return grad

    y.register_hook(hook)
    y.sum().backward()
    return seen["thread"], seen["multithreading"]  # type: ignore[return-value]


def test_the_engine_is_installed():
    assert neuron_autograd.runs_on_calling_thread()


def test_neuron_backward_runs_on_the_calling_thread_as_on_the_cpu():
    assert hook_thread_and_flag("cpu")[0] == threading.get_ident()
    thread, multithreading = hook_thread_and_flag("neuron")
    assert thread == threading.get_ident(), "backward ran on torch's neuron device thread"
    # Inside this backward pass the flag tells the truth: it runs on the calling thread.
    assert multithreading is False


def test_the_users_multithreading_flag_is_kept_outside_backward():
    assert torch.autograd.is_multithreading_enabled()
    x = torch.ones(3, device="neuron", requires_grad=True)
    (x * 2).sum().backward()
    assert torch.autograd.is_multithreading_enabled()
    with torch.autograd.set_multithreading_enabled(False):
        (x * 2).sum().backward()
        assert not torch.autograd.is_multithreading_enabled()
    assert torch.autograd.is_multithreading_enabled()


def test_the_flag_is_restored_when_backward_raises():
    x = torch.ones(3, device="neuron", requires_grad=True)
    y = (x * 2).sum()

    def hook(grad: torch.Tensor) -> torch.Tensor:
        raise ValueError("boom from a hook")

    x.register_hook(hook)
    with pytest.raises(ValueError, match="boom from a hook"):
        y.backward()
    assert torch.autograd.is_multithreading_enabled()


def test_reentrant_backward_inside_a_hook_and_reentrant_checkpoint():
    x = torch.randn(4, 4, device="neuron", requires_grad=True)
    inner: list[torch.Tensor] = []

    def hook(grad: torch.Tensor) -> torch.Tensor:
        z = torch.randn(4, device="neuron", requires_grad=True)
        with torch.enable_grad():
            (z * 3).sum().backward()  # a backward inside a backward
        inner.append(z.grad)
        return grad

    y = x.sin()
    y.register_hook(hook)
    y.sum().backward()
    torch.testing.assert_close(inner[0].cpu(), torch.full((4,), 3.0))
    torch.testing.assert_close(x.grad.cpu(), x.detach().cos().cpu())

    # Reentrant checkpointing runs a backward inside the engine too.
    w = torch.randn(4, 4, device="neuron", requires_grad=True)
    out = torch.utils.checkpoint.checkpoint(lambda t: (t @ w).relu(), x, use_reentrant=True)
    out.sum().backward()
    w_cpu = w.detach().cpu().requires_grad_()
    (x.detach().cpu() @ w_cpu).relu().sum().backward()
    torch.testing.assert_close(w.grad.cpu(), w_cpu.grad)


def test_mixed_cpu_and_neuron_graph_matches_the_cpu():
    torch.manual_seed(0)
    a_cpu = torch.randn(5, requires_grad=True)
    b_cpu = torch.randn(5, requires_grad=True)
    a = a_cpu.detach().to("neuron").requires_grad_()
    b = b_cpu.detach().clone().requires_grad_()  # stays on the CPU
    ((a.exp() * 2).cpu() * b).sum().backward()
    ((a_cpu.exp() * 2) * b_cpu).sum().backward()
    torch.testing.assert_close(a.grad.cpu(), a_cpu.grad)
    torch.testing.assert_close(b.grad, b_cpu.grad)


def test_several_threads_call_backward_concurrently():
    torch.manual_seed(0)
    weights = [torch.randn(8, 8) for _ in range(4)]
    errors: list[BaseException] = []
    results: dict[int, torch.Tensor] = {}
    barrier = threading.Barrier(len(weights))

    def work(index: int) -> None:
        try:
            w = weights[index].to("neuron").requires_grad_()
            barrier.wait()
            for _ in range(20):
                w.grad = None
                (w @ w).tanh().sum().backward()
            results[index] = w.grad.cpu()
        except BaseException as error:  # reported below, in the main thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(weights))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not errors, errors
    for index, weight in enumerate(weights):
        w = weight.clone().requires_grad_()
        (w @ w).tanh().sum().backward()
        torch.testing.assert_close(results[index], w.grad)


def test_grad_and_create_graph_go_through_the_same_engine():
    x = torch.randn(3, device="neuron", requires_grad=True)
    (g,) = torch.autograd.grad((x**3).sum(), x, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), x)
    torch.testing.assert_close(gg.cpu(), (6 * x.detach()).cpu())


# One JSON line: the thread the hook ran on, the caller's thread, and trivial-backward timings.
CHILD = textwrap.dedent(
    """
    import json, threading
    import torch
    seen = {}
    def hook(grad):
        seen["thread"] = threading.get_ident()
        return grad
    x = torch.ones(1000, device="neuron", requires_grad=True)
    y = x * 2
    y.register_hook(hook)
    y.sum().backward()
    print(json.dumps({"hook": seen["thread"], "caller": threading.get_ident()}))
    """
)


def run_child(env_value: str | None) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop(neuron_autograd.ENV_DEVICE_THREADS, None)
    if env_value is not None:
        env[neuron_autograd.ENV_DEVICE_THREADS] = env_value
    return subprocess.run(
        [sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=600, env=env
    )


def test_torchs_device_thread_on_request_and_a_clear_error_for_a_bad_value():
    kept = run_child("1")
    assert kept.returncode == 0, kept.stderr[-2000:]
    threads = json.loads(kept.stdout.strip().splitlines()[-1])
    assert threads["hook"] != threads["caller"], "NEURON_AUTOGRAD_DEVICE_THREADS=1 was ignored"

    default = run_child(None)
    assert default.returncode == 0, default.stderr[-2000:]
    threads = json.loads(default.stdout.strip().splitlines()[-1])
    assert threads["hook"] == threads["caller"]

    bad = run_child("yes")
    assert bad.returncode != 0
    assert "NEURON_AUTOGRAD_DEVICE_THREADS must be 0" in bad.stderr


# The context torch 2.13 stashes for each backward (autograd/graph.py, _engine_run_backward) is
# tracked by replacing the module's contextvars with one that remembers each copy it makes.
RELEASE_CHILD = textwrap.dedent(
    """
    import contextvars, json, sys, threading
    import torch
    import torch.autograd.graph
    import torch.utils.checkpoint

    made = []

    class TrackingContextvars:
        @staticmethod
        def copy_context():
            made.append(contextvars.copy_context())
            return made[-1]

    torch.autograd.graph.contextvars = TrackingContextvars
    late = 0
    hook_threads = set()
    x = torch.randn(1000, device="neuron", requires_grad=True)
    for i in range(300):
        y = x * 2
        y.register_hook(lambda g: hook_threads.add(threading.get_ident()) or g)
        if i % 3 == 0:
            y.sum().backward()
        elif i % 3 == 1:
            torch.autograd.grad(y.sum(), x)
        else:
            torch.utils.checkpoint.checkpoint(torch.sin, y, use_reentrant=True).sum().backward()
        # Held only by us once every graph task that copied it is gone; more means an engine
        # thread still held it after backward() returned.
        while made:
            context = made.pop()
            late += sys.getrefcount(context) > 2  # `context` and the argument
            del context
    print(json.dumps({"late": late, "key_left": torch._C._is_key_in_tls("context"),
                      "device_thread": threading.get_ident() not in hook_threads}))
    """
)


def test_backward_returns_after_the_device_thread_released_the_pass():
    """With torch's device thread, the graph task's copy of the stashed context was often dropped
    by the device thread after backward() returned (15% of calls, 2026-12-02); at interpreter
    exit that made the process abort ("terminate called without an active exception")."""
    env = dict(os.environ, **{neuron_autograd.ENV_DEVICE_THREADS: "1"})
    child = subprocess.run(
        [sys.executable, "-c", RELEASE_CHILD], capture_output=True, text=True, timeout=600, env=env
    )
    assert child.returncode == 0, child.stderr[-3000:]
    result = json.loads(child.stdout.strip().splitlines()[-1])
    assert result["device_thread"], "the child did not run backward on torch's device thread"
    assert result["late"] == 0, f"{result['late']} of 300 backward calls returned too early"
    assert not result["key_left"], "torch's thread-local context key was left behind"


# The most a trivial backward, (x * 2).sum().backward() on 1e3 elements, may cost on neuron
# relative to the CPU. Measured 2026-12-02 on the shared 2-core machine (load ~18), three runs
# each: 1.09-1.16 with backward on the calling thread; 1.64-7.8 on torch's device thread
# (NEURON_AUTOGRAD_DEVICE_THREADS=1: two cross-thread handoffs per backward). Each run is the
# fastest of interleaved blocks, and the test takes the best of three runs, so that another
# process's load hits both devices and cancels out.
MAX_BACKWARD_RATIO = 1.4


def backward_ratio(rounds: int = 15, calls: int = 40) -> float:
    def make(device: str):
        x = torch.randn(1000, device=device, requires_grad=True)
        return lambda: (x * 2).sum().backward()

    cpu, neuron = make("cpu"), make("neuron")
    for fn in (cpu, neuron) * 20:
        fn()
    best = {"cpu": float("inf"), "neuron": float("inf")}
    for index in range(rounds):
        order = (("cpu", cpu), ("neuron", neuron))
        for name, fn in order if index % 2 == 0 else order[::-1]:
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            best[name] = min(best[name], time.perf_counter() - start)
    return best["neuron"] / best["cpu"]


def test_backward_costs_about_what_it_costs_on_the_cpu():
    ratio = min(backward_ratio() for _ in range(3))
    assert ratio <= MAX_BACKWARD_RATIO, (
        f"a trivial backward on neuron took {ratio:.2f}x its CPU time (limit "
        f"{MAX_BACKWARD_RATIO}): is backward running on torch's device thread again?"
    )
