"""The profiler on neuron: torch.autograd.profiler.profile(use_device="neuron") times operators
on the device through the backend's profiler stubs (NeuronProfiler.cpp), and
torch.profiler.profile(activities=[CPU, PrivateUse1]) keeps working.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity

# The benchmark runs in a fresh interpreter: the profiler's C++ warnings go to the process's
# stderr. It writes nothing, so the test runs the real script.
BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "neuron_profiler.py"

# The most the legacy profiler may slow 20 small forward passes down (measured about 2x; the
# broken profiler took over 10,000x). A ratio in one run, so the machine's speed cancels out.
MAX_PROFILED_RATIO = 10.0


# Kineto logs each profiler start and stop to stderr, on the CPU too.
PROFILER_LOG = "SyncActivityProfilerHandler.cpp"


def profile_neuron(**kwargs):
    return torch.autograd.profiler.profile(use_device="neuron", **kwargs)


def mlp_on_neuron():
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(32, 32), torch.nn.ReLU(), torch.nn.Linear(32, 8)
    ).to("neuron")
    return model, torch.randn(4, 32, device="neuron")


def test_legacy_profiler_runs_quietly_and_close_to_unprofiled_speed():
    result = subprocess.run(
        [sys.executable, str(BENCHMARK), "--rounds", "10", "--passes", "20"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    # The profiler's own start/stop lines are all it may print (as on the CPU).
    noise = [line for line in result.stderr.splitlines() if PROFILER_LOG not in line]
    assert not noise, f"{len(result.stderr)} bytes on stderr:\n" + "\n".join(noise[:40])
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["events"] > 0
    assert figures["ratio"] <= MAX_PROFILED_RATIO, (
        f"20 forward passes took {figures['profiled_s']:.4f} s under the profiler and "
        f"{figures['unprofiled_s']:.4f} s without: {figures['ratio']:.1f}x"
    )


def test_every_event_has_non_negative_cpu_and_device_times():
    model, x = mlp_on_neuron()
    with profile_neuron() as prof:
        model(x).sum().backward()
    events = prof.function_events
    assert events, "the profiler recorded no event"
    for event in events:
        assert event.cpu_time_total >= 0, f"{event.name}: cpu time {event.cpu_time_total}"
        assert event.device_time_total >= 0, f"{event.name}: device time {event.device_time_total}"
        assert event.time_range.end >= event.time_range.start, event.name


def cells(line: str) -> list[str]:
    return re.split(r"\s{2,}", line.strip())


def test_operators_on_neuron_have_device_time_in_the_table():
    x = torch.randn(256, 256, device="neuron")
    with profile_neuron() as prof:
        for _ in range(3):
            x @ x
    averages = prof.key_averages()
    mm = next(a for a in averages if a.key == "aten::mm")
    assert mm.device_time_total > 0, "aten::mm ran on neuron but has no device time"
    assert mm.self_device_time_total > 0
    lines = averages.table(sort_by="device_time_total").splitlines()
    header = cells(lines[1])
    assert "Self NEURON" in header and "NEURON total" in header, lines[1]
    row = cells(next(line for line in lines if line.strip().startswith("aten::mm ")))
    for column in ("Self NEURON", "NEURON total"):
        assert row[header.index(column)] != "0.000us", f"{column} of aten::mm: {lines}"


@pytest.mark.xfail(
    strict=True,
    reason="torch 2.13 puts no device time of the legacy profiler into the Chrome trace on any "
    "device: kineto's trace holds the CPU ops only, EventList.export_chrome_trace writes the flow "
    "starts (cat 'cpu_to_neuron') but not the kernels ('use torch.profiler to get device kernel "
    "trace'); the device timeline needs a kineto IActivityProfiler for neuron (README, known gaps)",
)
def test_chrome_trace_carries_the_device_time(tmp_path):
    x = torch.randn(256, 256, device="neuron")
    with profile_neuron() as prof:
        x @ x
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    events = json.loads(path.read_text())["traceEvents"]
    assert any(e.get("name") == "aten::mm" for e in events), "aten::mm is missing from the trace"
    device_events = [
        e for e in events if e.get("ph") == "X" and e.get("cat") not in ("cpu_op", "Trace")
    ]
    assert any(e.get("dur", 0) > 0 for e in device_events), "the trace holds no device time"


def test_nested_user_ranges_have_consistent_device_time():
    x = torch.randn(64, 64, device="neuron")
    with profile_neuron() as prof:
        with torch.profiler.record_function("outer"):
            y = x.relu()
            with torch.profiler.record_function("inner"):
                y = y @ y
    by_name = {a.key: a for a in prof.key_averages()}
    outer, inner = by_name["outer"].device_time_total, by_name["inner"].device_time_total
    assert inner > 0, f"inner: {inner}"
    assert outer >= inner, f"outer {outer} < inner {inner}"


@pytest.mark.usefixtures("restore_device")
def test_a_range_that_changes_device_is_profiled_without_error():
    # The range starts on neuron:0 and ends on neuron:1: two devices' events, no common clock on
    # real hardware, so no device time for it; the operator inside has its own.
    torch.accelerator.set_device_index(0)
    x = torch.randn(16, 16, device="neuron:1")
    with profile_neuron() as prof:
        with torch.profiler.record_function("across"):
            torch.accelerator.set_device_index(1)
            x.relu()
    averages = {a.key: a for a in prof.key_averages()}
    assert averages["across"].self_device_time_total == 0
    assert averages["aten::relu"].device_time_total > 0


def test_profiler_with_the_privateuse1_activity_keeps_working():
    model, x = mlp_on_neuron()
    activities = [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]
    with torch.profiler.profile(activities=activities) as prof:
        model(x).sum().backward()
    names = {a.key for a in prof.key_averages()}
    assert "aten::addmm" in names
    for event in prof.events():
        assert event.cpu_time_total >= 0, event.name
