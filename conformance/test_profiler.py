"""The profilers: operators that run on the device appear with device time (positive for real
work, never negative) in both of torch's profiler paths,

- ``torch.profiler.profile(activities=[CPU, <the device's activity>])`` (kineto), in its event
  list and in the Chrome trace it exports, and
- ``torch.autograd.profiler.profile(use_device=<backend>)`` (the legacy path),

and profiling a small model does not slow it down by more than a few times (a ratio of
interleaved timings in one run, so the machine's speed cancels out).
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity

from .backend import Backend
from .probes import PROFILER_ACTIVITIES
from .requirements import require

# "A few times": profiled/unprofiled time of MODEL_PASSES forward+backward passes of a small MLP.
# The CPU profiler alone costs about 2x on tiny operators; a profiler that synchronises or copies
# per event costs 10-10,000x.
MAX_SLOWDOWN = 5.0
MODEL_PASSES = 10
ROUNDS = 7

# Chrome-trace categories of host-side events: everything else on the trace is the device's.
_HOST_CATEGORIES = {"cpu_op", "user_annotation", "python_function", "Trace", "cpu_instant_event",
                    "fwdbwd", "ac2g", "overhead", "gpu_user_annotation"}  # fmt: skip


def device_activity(backend: Backend) -> ProfilerActivity:
    return getattr(ProfilerActivity, PROFILER_ACTIVITIES.get(backend.name, "PrivateUse1"))


@pytest.fixture
def profiled_backend(backend: Backend) -> Backend:
    require(backend, "profiler")
    return backend


def _work(device: torch.device) -> torch.Tensor:
    x = torch.randn(128, 128).to(device)
    y = x @ x
    y = torch.relu(y) + 1
    if device.type != "cpu":
        torch.accelerator.synchronize(device.index)
    return y


def _check_non_negative(events, path: str) -> None:
    negative = [
        f"{e.name}: device {e.device_time_total}, self {e.self_device_time_total}"
        for e in events
        if e.device_time_total < 0 or e.self_device_time_total < 0
    ]
    assert not negative, f"{path}: negative device times:\n" + "\n".join(negative[:10])


def _assert_mm_has_device_time(events, path: str, backend: Backend) -> None:
    timed = sorted({e.key for e in events if e.device_time_total > 0})
    mm = [e for e in events if e.key == "aten::mm"]
    assert mm, f"{path}: aten::mm is not among the events: {sorted({e.key for e in events})}"
    assert any(e.device_time_total > 0 for e in mm), (
        f"{path}: aten::mm ran on {backend.name} but has no device time; operators with device "
        f"time: {timed or 'none'}"
    )


def test_the_profiler_records_device_time_for_device_operators(profiled_backend, device):
    activities = [ProfilerActivity.CPU, device_activity(profiled_backend)]
    path = f"torch.profiler.profile(activities={activities})"
    with torch.profiler.profile(activities=activities) as prof:
        _work(device)
    averages = prof.key_averages()
    _check_non_negative(averages, path)
    _assert_mm_has_device_time(averages, path, profiled_backend)


def test_the_chrome_trace_holds_device_events(profiled_backend, device, tmp_path: Path):
    activities = [ProfilerActivity.CPU, device_activity(profiled_backend)]
    with torch.profiler.profile(activities=activities) as prof:
        _work(device)
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    events = json.loads(trace.read_text())["traceEvents"]
    device_events = [
        e for e in events if e.get("ph") == "X" and e.get("cat") not in _HOST_CATEGORIES
    ]
    categories = sorted({str(e.get("cat")) for e in events})
    assert device_events, (
        f"the Chrome trace of torch.profiler.profile(activities={activities}) holds no device "
        f"event (categories: {categories})"
    )
    durations = [e.get("dur", 0) for e in device_events]
    assert min(durations) >= 0, f"a device event has a negative duration: {min(durations)}"
    assert max(durations) > 0, "every device event in the Chrome trace has zero duration"


def test_the_legacy_profiler_records_device_time(profiled_backend, device):
    path = f"torch.autograd.profiler.profile(use_device={profiled_backend.name!r})"
    with torch.autograd.profiler.profile(use_device=profiled_backend.name) as prof:
        _work(device)
    events = prof.function_events
    assert events, f"{path} recorded no event"
    _check_non_negative(events, path)
    _assert_mm_has_device_time(prof.key_averages(), path, profiled_backend)


def test_device_time_of_a_range_covers_the_operators_in_it(profiled_backend, device):
    x = torch.randn(96, 96).to(device)
    with torch.autograd.profiler.profile(use_device=profiled_backend.name) as prof:
        with torch.profiler.record_function("outer"):
            y = (x @ x).relu()
            with torch.profiler.record_function("inner"):
                y = y @ y
        y.cpu()
    by_name = {a.key: a for a in prof.key_averages()}
    outer, inner = by_name["outer"].device_time_total, by_name["inner"].device_time_total
    assert inner > 0, f"the range 'inner' around a matmul on {device} has device time {inner}"
    assert outer >= inner, f"the enclosing range has less device time ({outer}) than 'inner'"


def _model(device: torch.device) -> tuple[torch.nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)
    ).to(device)
    return model, torch.randn(16, 64).to(device)


def _passes(model: torch.nn.Module, x: torch.Tensor, device: torch.device) -> float:
    start = time.perf_counter()
    for _ in range(MODEL_PASSES):
        model(x).sum().backward()
    if device.type != "cpu":
        torch.accelerator.synchronize(device.index)
    return time.perf_counter() - start


_PATHS = {"profiler": "torch.profiler.profile", "legacy": "torch.autograd.profiler.profile"}


@pytest.mark.parametrize("path", sorted(_PATHS))
def test_profiling_a_small_model_costs_at_most_a_few_times(backend, device, path):
    if backend.capabilities.profiler:
        activities = [ProfilerActivity.CPU, device_activity(backend)]
        use_device = backend.name
    else:  # still: the host profiler must not make the device's work slow
        activities, use_device = [ProfilerActivity.CPU], None
    model, x = _model(device)
    # One host thread: on a shared machine, intra-op thread hand-offs of tiny CPU operators cost
    # tens of milliseconds and drown the profiler's cost (and take seconds) in noise.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        _passes(model, x, device)  # warm-up: first calls load kernels
        plain, profiled = [], []
        for _ in range(ROUNDS):  # interleaved: a slow moment of the machine hits both
            plain.append(_passes(model, x, device))
            if path == "profiler":
                context = torch.profiler.profile(activities=activities)
            else:
                context = torch.autograd.profiler.profile(use_device=use_device)
            with context:
                profiled.append(_passes(model, x, device))
    finally:
        torch.set_num_threads(threads)
    ratio = statistics.median(profiled) / statistics.median(plain)
    assert ratio <= MAX_SLOWDOWN, (
        f"{MODEL_PASSES} forward+backward passes of a small MLP on {device} took "
        f"{statistics.median(profiled) * 1e3:.2f} ms under {_PATHS[path]} and "
        f"{statistics.median(plain) * 1e3:.2f} ms without (median of {ROUNDS}): {ratio:.1f}x, "
        f"more than {MAX_SLOWDOWN}x"
    )
