"""The profiler on neuron: torch.autograd.profiler.profile(use_device="neuron") and
torch.profiler.profile(activities=[CPU, PrivateUse1]) time operators on the device through the
backend's kineto child profiler (NeuronKinetoPlugin.cpp): device time in key_averages() and
kernels on a neuron track of the Chrome trace. NeuronProfiler.cpp's stubs keep the legacy path's
per-operator callbacks from throwing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity

# The benchmark runs in a fresh interpreter: the profiler's C++ warnings go to the process's
# stderr. It writes nothing, so the test runs the real script.
BENCHMARK = Path(__file__).resolve().parents[1] / "benchmarks" / "neuron_profiler.py"

# The most either profiler may slow 20 small forward passes down (measured 1.1-1.6x; the broken
# legacy profiler took over 10,000x). A ratio in one run, so the machine's speed cancels out.
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


def test_both_profilers_run_quietly_and_close_to_unprofiled_speed():
    # One OpenMP thread, as benchmarks/README.md runs it: on a loaded machine a matmul's OpenMP
    # barrier waits for a descheduled thread, and a profiled round took 13-70x the unprofiled one
    # on either build of the backend, which measures the machine, not the profiler.
    result = subprocess.run(
        [sys.executable, str(BENCHMARK), "--rounds", "10", "--passes", "20"],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert result.returncode == 0, result.stderr[-4000:]
    # The profiler's own start/stop lines are all it may print (as on the CPU).
    noise = [line for line in result.stderr.splitlines() if PROFILER_LOG not in line]
    assert not noise, f"{len(result.stderr)} bytes on stderr:\n" + "\n".join(noise[:40])
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["events"] > 0
    for ratio, seconds in (("ratio", "profiled_s"), ("kineto_ratio", "kineto_profiled_s")):
        assert figures[ratio] <= MAX_PROFILED_RATIO, (
            f"20 forward passes took {figures[seconds]:.4f} s under the profiler ({ratio}) and "
            f"{figures['unprofiled_s']:.4f} s without: {figures[ratio]:.1f}x"
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


def profile_kineto(*activities: ProfilerActivity, **kwargs):
    return torch.profiler.profile(
        activities=list(activities) or [ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
        **kwargs,
    )


def chrome_trace(prof, tmp_path: Path) -> list[dict]:
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return json.loads(path.read_text())["traceEvents"]


def device_track(events: list[dict]) -> dict:
    """The kernels on the neuron device's track of a Chrome trace, and the track's name."""
    names = {
        e["pid"]: e["args"]["name"]
        for e in events
        if e.get("ph") == "M" and e.get("name") == "process_name"
    }
    kernels = [e for e in events if e.get("ph") == "X" and e.get("cat") == "kernel"]
    return {"kernels": kernels, "names": {names.get(k["pid"]) for k in kernels}}


PROFILERS = {
    "legacy": profile_neuron,
    # The legacy profiler's kineto mode (state KINETO_PRIVATEUSE1, the PrivateUse1 activity).
    "legacy_use_kineto": lambda: profile_neuron(use_kineto=True),
    "kineto": profile_kineto,
}


@pytest.mark.parametrize("profiler", PROFILERS)
def test_chrome_trace_carries_the_device_time(tmp_path, profiler):
    x = torch.randn(256, 256, device="neuron")
    with PROFILERS[profiler]() as prof:
        x @ x
    events = chrome_trace(prof, tmp_path)
    mm = [e for e in events if e.get("cat") == "cpu_op" and e.get("name") == "aten::mm"]
    assert len(mm) == 1, "aten::mm is missing from the trace"
    track = device_track(events)
    assert track["names"] == {"neuron 0"}, track["names"]
    kernels = [k for k in track["kernels"] if k["name"] == "neuron::aten::mm"]
    assert sum(k["dur"] for k in kernels) > 0, "the trace holds no device time of aten::mm"
    # Each kernel names the operator it ran for, as CUDA's name the launch that issued them.
    correlation = mm[0]["args"]["External id"]
    assert {k["args"]["External id"] for k in kernels} == {correlation}


def test_profiler_with_the_privateuse1_activity_times_operators_on_neuron():
    x = torch.randn(256, 256, device="neuron")
    with profile_kineto() as prof:
        for _ in range(3):
            x @ x
    averages = prof.key_averages()
    mm = next(a for a in averages if a.key == "aten::mm")
    assert mm.count == 3
    assert mm.self_device_time_total > 0, "aten::mm ran on neuron but has no device time"
    # The kernels have their own row, as CUDA's do; they are not extra calls of aten::mm.
    kernel = next(a for a in averages if a.key == "neuron::aten::mm")
    assert kernel.self_device_time_total == pytest.approx(mm.self_device_time_total)
    lines = averages.table(sort_by="device_time_total").splitlines()
    header = cells(lines[1])
    assert "Self NEURON" in header and "NEURON total" in header, lines[1]


def test_a_cpu_only_profile_has_no_device_events(tmp_path):
    x = torch.randn(256, 256, device="neuron")
    with profile_kineto(ProfilerActivity.CPU) as prof:
        x @ x
    assert not device_track(chrome_trace(prof, tmp_path))["kernels"]
    assert all(e.device_time_total == 0 for e in prof.events())


@pytest.mark.parametrize("profiler", PROFILERS)
def test_cpu_operators_of_a_program_using_neuron_get_no_neuron_kernels(tmp_path, profiler):
    # kineto's hooks say which operator runs, not on which device: only the stretches in which
    # work was issued to neuron are neuron kernels, so a CPU matmul next to a neuron one has none.
    x = torch.randn(256, 256, device="neuron")
    c = torch.randn(192, 192)
    with PROFILERS[profiler]() as prof:
        x @ x
        c @ c
    events = chrome_trace(prof, tmp_path)
    mm = sorted(
        (e["ts"], e["args"]["External id"])
        for e in events
        if e.get("cat") == "cpu_op" and e.get("name") == "aten::mm"
    )
    assert len(mm) == 2, mm
    (_, on_neuron), (_, on_cpu) = mm
    linked = {k["args"]["External id"] for k in device_track(events)["kernels"]}
    assert on_neuron in linked, "the neuron matmul has no neuron kernel"
    assert on_cpu not in linked, "the CPU matmul got a neuron kernel"


UNUSED_NEURON_SCRIPT = """
import json, torch
x = torch.randn(64, 64)
with torch.profiler.profile() as p:  # every supported activity: CPU and neuron's
    x @ x
print(json.dumps({"initialized": torch.neuron.is_initialized(),
                  "kernels": [e.name for e in p.events() if e.name.startswith("neuron::")]}))
"""


def test_a_program_that_has_not_used_neuron_is_neither_timed_nor_initialized_by_the_profiler():
    # torch.profiler.profile() with no activities asks for neuron's too. Initializing the runtime
    # from the profiler would leave the program's forked children unable to use neuron.
    result = subprocess.run(
        [sys.executable, "-c", UNUSED_NEURON_SCRIPT], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-4000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures == {"initialized": False, "kernels": []}


@pytest.mark.parametrize("profiler", ["legacy", "kineto"])
def test_device_time_is_counted_once_through_nested_operators(profiler):
    # aten::linear -> aten::addmm (and aten::t -> aten::transpose -> aten::as_strided): each
    # kernel is an operator's own work, so the top-level operators' device times add up to the
    # kernels' durations; counted at every level, they would add up to several times that.
    model, x = mlp_on_neuron()
    with profile_neuron() if profiler == "legacy" else profile_kineto() as prof:
        for _ in range(5):
            model(x)
    events = prof.function_events if profiler == "legacy" else prof.events()
    top_level = [e for e in events if e.cpu_parent is None and e.name.startswith("aten::")]
    assert {e.name for e in top_level} >= {"aten::linear", "aten::relu"}
    kernels = [e for e in events if e.device_type == DeviceType.PrivateUse1]
    kernel_time = sum(k.time_range.elapsed_us() for k in kernels)
    assert kernel_time > 0
    assert sum(e.device_time_total for e in top_level) == pytest.approx(kernel_time)
    # Work runs as it is issued: an operator's device time is its wall time, plus the profiler's
    # own event recording inside it (about 1 us an operator).
    for event in top_level:
        wall = event.time_range.elapsed_us()
        assert 0 < event.device_time_total <= wall * 1.5 + 10, (
            f"{event.name}: device {event.device_time_total} us, wall {wall} us"
        )


def test_each_profiling_run_and_each_scheduled_step_has_its_own_device_time():
    x = torch.randn(128, 128, device="neuron")
    for _ in range(2):
        with profile_kineto() as prof:
            x @ x
        assert next(a for a in prof.key_averages() if a.key == "aten::mm").count == 1
    schedule = torch.profiler.schedule(wait=1, warmup=1, active=2)
    with profile_kineto(schedule=schedule) as prof:
        for _ in range(4):
            x @ x
            prof.step()
    mm = next(a for a in prof.key_averages() if a.key == "aten::mm")
    assert mm.count == 2 and mm.self_device_time_total > 0
    kernels = next(a for a in prof.key_averages() if a.key == "neuron::aten::mm")
    assert kernels.count >= 2


ASYNC_SCRIPT = """
import json, torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity
x = torch.randn(256, 256, device="neuron")
with torch.profiler.profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1]) as p:
    s = torch.Stream(device="neuron")
    with s:
        y = x @ x
    torch.accelerator.synchronize()
kernels = [e for e in p.events() if e.name == "neuron::aten::mm"]
print(json.dumps({"mm": sum(k.device_time_total for k in kernels),
                  "streams": sorted({k.device_resource_id for k in kernels}), "id": s.stream_id}))
"""


def test_asynchronous_mode_times_work_on_the_stream_it_ran_on():
    env = {**os.environ, "NEURON_LAUNCH_BLOCKING": "0"}
    result = subprocess.run(
        [sys.executable, "-c", ASYNC_SCRIPT], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-4000:]
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    assert figures["mm"] > 0, figures
    assert figures["streams"] == [figures["id"]], figures


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
