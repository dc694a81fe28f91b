"""Streams and events of the neuron backend: torch.Stream / torch.Event and the torch.neuron twins.

Every test that changes the current device or stream restores it in ``finally`` (or through
``restore_device_and_streams``): the suite runs on 2 workers in any order.
"""

from __future__ import annotations

import threading
import time

import pytest
import torch

from device_agnostic.neuron import _C

STREAMS_PER_POOL = 32
# The suite also runs with NEURON_LAUNCH_BLOCKING=0 (tests/test_neuron_async.py runs the stream
# conformance tests that way; see README "Asynchronous mode"). There a stream is idle only once its
# work has run, so "idle right after issuing work" holds in synchronous mode only, and a result
# read on another stream needs that stream's order (wait_stream / wait_event), as on CUDA.
ASYNC = _C._async_enabled()


@pytest.fixture(autouse=True)
def restore_device_and_streams():
    """Put back the current device and both devices' current streams after each test."""
    device = torch.accelerator.current_device_index()
    streams = [torch.accelerator.current_stream(i) for i in range(torch.accelerator.device_count())]
    try:
        yield
    finally:
        for stream in streams:
            torch.accelerator.set_stream(stream)
        torch.accelerator.set_device_index(device)


def default_stream(device: int) -> torch.Stream:
    return torch.neuron.default_stream(device)


# ---- the pool, priorities and the default stream -----------------------------------------------


@pytest.mark.parametrize("device", [0, 1])
def test_new_streams_belong_to_the_device_they_were_created_for(device):
    for stream in (
        torch.Stream(f"neuron:{device}"),
        torch.Stream(torch.device("neuron", device), priority=-1),
        torch.neuron.Stream(device),
        torch.neuron.Stream(f"neuron:{device}", priority=-1),
    ):
        assert stream.device_index == device
        assert stream.device == torch.device("neuron", device)
        assert stream.stream_id != 0  # never the default stream


def test_a_stream_without_a_device_is_on_the_current_device():
    torch.accelerator.set_device_index(1)
    assert torch.neuron.Stream().device_index == 1
    assert torch.Stream("neuron").device_index == 1
    torch.accelerator.set_device_index(0)
    assert torch.neuron.Stream().device_index == 0


@pytest.mark.parametrize("priority", [0, -1])
def test_each_device_hands_out_its_own_pool_of_32_streams_round_robin(priority):
    first = torch.neuron.Stream(0, priority=priority)
    ids = [first.stream_id]
    for _ in range(STREAMS_PER_POOL - 1):
        torch.neuron.Stream(1, priority=priority)  # another device's pool does not advance ours
        ids.append(torch.neuron.Stream(0, priority=priority).stream_id)
    assert len(set(ids)) == STREAMS_PER_POOL
    assert 0 not in ids
    wrapped = torch.neuron.Stream(0, priority=priority)
    assert wrapped == first  # the 33rd stream is the first one again


def test_normal_and_high_priority_pools_do_not_share_streams():
    normal = {torch.neuron.Stream(0, priority=0).stream_id for _ in range(STREAMS_PER_POOL)}
    high = {torch.neuron.Stream(0, priority=-1).stream_id for _ in range(STREAMS_PER_POOL)}
    assert len(normal) == len(high) == STREAMS_PER_POOL
    assert not normal & high


@pytest.mark.parametrize(
    ("requested", "expected"),
    [(0, 0), (-1, -1), (-7, -1), (3, 0)],  # clamped to [-1, 0], as CUDA clamps
)
def test_stream_priority_is_kept_and_clamped_to_the_supported_range(requested, expected):
    for device in (0, 1):
        assert torch.neuron.Stream(device, priority=requested).priority == expected


def test_default_priority_is_normal_and_the_default_stream_has_priority_0():
    assert torch.neuron.Stream().priority == 0
    default = torch.neuron.default_stream(0)
    rebuilt = torch.neuron.Stream(
        stream_id=default.stream_id, device_index=0, device_type=default.device_type
    )
    assert rebuilt.priority == 0


@pytest.mark.parametrize("device", [0, 1])
def test_default_stream_has_id_0_and_is_current_until_another_is_set(device):
    default = torch.neuron.default_stream(device)
    assert default.stream_id == 0
    assert default.device_index == device
    assert torch.neuron.current_stream(device) == default
    assert torch.accelerator.current_stream(device) == default


# ---- the current stream --------------------------------------------------------------------------


def test_set_stream_makes_it_current_for_its_device_only():
    side = torch.neuron.Stream(0)
    torch.accelerator.set_stream(side)
    assert torch.accelerator.current_stream(0) == side
    assert torch.neuron.current_stream(0) == side
    assert torch.accelerator.current_stream(1) == default_stream(1)
    torch.neuron.set_stream(default_stream(0))
    assert torch.accelerator.current_stream(0) == default_stream(0)


def test_set_stream_of_another_device_makes_that_device_current():
    torch.accelerator.set_device_index(0)
    other = torch.neuron.Stream(1)
    torch.accelerator.set_stream(other)
    assert torch.accelerator.current_device_index() == 1
    assert torch.accelerator.current_stream() == other
    assert torch.accelerator.current_stream(0) == default_stream(0)


def test_current_stream_is_thread_local():
    main_stream = torch.neuron.Stream(0)
    thread_stream = torch.neuron.Stream(0)
    assert main_stream != thread_stream
    torch.accelerator.set_stream(main_stream)
    seen: dict[str, object] = {}
    ready = threading.Event()
    resume = threading.Event()

    def worker() -> None:
        try:
            seen["initial"] = torch.accelerator.current_stream(0)
            torch.accelerator.set_stream(thread_stream)
            seen["own"] = torch.accelerator.current_stream(0)
            ready.set()
            resume.wait(timeout=10)
            seen["after_main_changed"] = torch.accelerator.current_stream(0)
        except BaseException as error:  # reported to the main thread
            seen["error"] = error
            ready.set()

    thread = threading.Thread(target=worker)
    thread.start()
    try:
        assert ready.wait(timeout=10)
        # The worker's set_stream is not visible here ...
        assert torch.accelerator.current_stream(0) == main_stream
        # ... and ours is not visible there.
        torch.accelerator.set_stream(default_stream(0))
    finally:
        resume.set()
        thread.join(timeout=10)
    assert not thread.is_alive()
    assert "error" not in seen, seen.get("error")
    assert seen["initial"] == default_stream(0)
    assert seen["own"] == thread_stream
    assert seen["after_main_changed"] == thread_stream


def test_with_stream_makes_it_and_its_device_current_and_restores_both():
    torch.accelerator.set_device_index(0)
    outer = torch.neuron.Stream(0)
    torch.accelerator.set_stream(outer)
    side = torch.neuron.Stream(1)
    with side:
        assert torch.accelerator.current_device_index() == 1
        assert torch.accelerator.current_stream() == side
        assert torch.accelerator.current_stream(0) == outer
    assert torch.accelerator.current_device_index() == 0
    assert torch.accelerator.current_stream(0) == outer
    assert torch.accelerator.current_stream(1) == default_stream(1)


def test_with_stream_restores_after_an_exception_and_when_nested():
    torch.accelerator.set_device_index(0)
    first, second = torch.neuron.Stream(0), torch.neuron.Stream(0)
    with pytest.raises(ZeroDivisionError):
        with torch.neuron.stream(first):
            assert torch.accelerator.current_stream(0) == first
            with second:
                assert torch.accelerator.current_stream(0) == second
            assert torch.accelerator.current_stream(0) == first
            1 / 0  # noqa: B018
    assert torch.accelerator.current_stream(0) == default_stream(0)
    with torch.neuron.stream(None):  # a no-op, as torch.cuda.stream(None)
        assert torch.accelerator.current_stream(0) == default_stream(0)


# ---- synchronization ----------------------------------------------------------------------------


def test_work_issued_on_a_side_stream_gives_the_same_result_as_on_the_default_stream():
    torch.manual_seed(0)
    source = torch.randn(64, 64)
    weight = torch.randn(64, 64)

    def chain(x: torch.Tensor) -> torch.Tensor:
        x.mul_(3).add_(1.5).sin_()
        x.addmm_(weight.to(x.device), x.t().contiguous(), beta=0.5, alpha=0.25)
        x.clamp_(-2, 2).pow_(2).sub_(x.mean())
        x.index_add_(0, torch.tensor([3, 1, 3], device=x.device), x[:3] * 2)
        return x

    expected = chain(source.clone())
    on_default = chain(source.to("neuron:0"))
    side = torch.neuron.Stream(0)
    with side:
        on_side = chain(source.to("neuron:0"))
        on_side_1 = chain(source.to("neuron:1"))
    side.synchronize()
    torch.testing.assert_close(on_side.cpu(), on_default.cpu(), rtol=0, atol=0)
    torch.testing.assert_close(on_default.cpu(), expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(on_side_1.cpu(), on_default.cpu(), rtol=0, atol=0)


def test_wait_stream_orders_a_consumer_after_a_producer_on_any_device():
    producer, consumer = torch.neuron.Stream(0), torch.neuron.Stream(1)
    with producer:
        data = torch.arange(10, device="neuron:0", dtype=torch.float32).mul_(2)
    consumer.wait_stream(producer)
    with consumer:
        result = data.to("neuron:1").add_(1)
    if not ASYNC:
        assert consumer.query()  # work runs at the call: the stream is idle at once
    consumer.synchronize()
    assert consumer.query()
    assert result.device == torch.device("neuron", 1)
    assert result.cpu().tolist() == [2.0 * i + 1 for i in range(10)]


def test_wait_event_orders_a_consumer_after_the_recorded_work():
    producer, consumer = torch.neuron.Stream(0), torch.neuron.Stream(0)
    with producer:
        data = torch.full((4,), 3.0, device="neuron:0").pow_(2)
        done = torch.neuron.Event()
        done.record()
    consumer.wait_event(done)
    never_recorded = torch.Event("neuron")
    consumer.wait_event(never_recorded)  # waiting on an unrecorded event does nothing, as in CUDA
    with consumer:
        result = data.add(1)
        # Read on the consumer stream: .cpu() waits for the current stream only, as on CUDA.
        assert result.cpu().tolist() == [10.0] * 4


def test_wait_event_rejects_a_stream_of_another_backend():
    event = torch.neuron.Event()
    event.record()
    with pytest.raises(RuntimeError):
        torch.Stream("cpu").wait_event(event)


def test_stream_query_and_synchronize_report_completion_after_work():
    for device in (0, 1):
        stream = torch.neuron.Stream(device)
        with stream:
            result = torch.ones(256, 256, device=f"neuron:{device}") @ torch.ones(
                256, 256, device=f"neuron:{device}"
            )
        assert stream.synchronize() is None
        assert stream.query() is True
        assert torch.neuron.default_stream(device).query() is True
        torch.neuron.synchronize(device)
        torch.accelerator.synchronize(device)
        assert result[0, 0].item() == 256.0


def test_event_record_query_and_synchronize():
    stream = torch.neuron.Stream(1)
    event = torch.Event("neuron")
    with stream:
        value = torch.ones(8, device="neuron:1").mul_(5)
    event.record(stream)
    assert event.device == torch.device("neuron", 1)
    if not ASYNC:
        assert event.query() is True  # the recorded work ran at the call
    assert event.synchronize() is None
    assert event.query() is True
    assert value.sum().item() == 40.0
    recorded = stream.record_event()
    assert recorded.query() is True
    assert recorded.device == torch.device("neuron", 1)


def timed_event() -> torch.Event:
    return torch.Event("neuron", enable_timing=True)


def test_elapsed_time_is_non_negative_and_grows_with_the_work_between_events():
    start, idle_end, busy_end = timed_event(), timed_event(), timed_event()
    start.record()
    idle_end.record()
    before = time.perf_counter()
    x = torch.randn(512, 512, device="neuron")
    for _ in range(5):
        x = torch.tanh(x @ x)
    time.sleep(0.05)
    busy_end.record()
    busy_end.synchronize()  # elapsed_time needs completed events, as on CUDA
    wall_ms = (time.perf_counter() - before) * 1000
    idle = start.elapsed_time(idle_end)
    busy = start.elapsed_time(busy_end)
    assert 0 <= idle < busy
    assert 50 <= busy <= wall_ms + 50
    assert idle_end.elapsed_time(busy_end) >= 50


# torch.Event.elapsed_time and torch.Stream.record_event accept only an exact torch.Event
# (THPEvent_elapsed_time checks Py_TYPE(other) == THPEventClass): a torch.neuron.Event must be one
# for torch.neuron.Event(enable_timing=True) pairs to time work, as torch.cuda.Event pairs do.
EVENT_KINDS = {
    "torch.Event": lambda: torch.Event("neuron", enable_timing=True),
    "neuron.Event": lambda: torch.neuron.Event(enable_timing=True),
}


@pytest.mark.parametrize("start_kind", sorted(EVENT_KINDS))
def test_a_torch_neuron_event_can_end_an_elapsed_time_measurement(start_kind):
    start, end = EVENT_KINDS[start_kind](), torch.neuron.Event(enable_timing=True)
    start.record()
    torch.ones(64, device="neuron").add_(1)
    end.record()
    end.synchronize()  # elapsed_time needs completed events, as on CUDA
    assert start.elapsed_time(end) >= 0


def test_stream_record_event_accepts_a_torch_neuron_event():
    stream = torch.neuron.Stream(1)
    event = torch.neuron.Event(enable_timing=True)
    assert stream.record_event(event) is event
    assert event.device == torch.device("neuron", 1)
    assert event.query()


def test_elapsed_time_without_enable_timing_raises_a_clear_error():
    start, end = torch.Event("neuron"), torch.Event("neuron")
    start.record()
    end.record()
    with pytest.raises((RuntimeError, ValueError), match="enable_timing=True"):
        start.elapsed_time(end)
    timed = timed_event()
    timed.record()
    with pytest.raises((RuntimeError, ValueError), match="enable_timing=True"):
        start.elapsed_time(timed)
    with pytest.raises((RuntimeError, ValueError), match="enable_timing=True"):
        timed.elapsed_time(end)


def test_elapsed_time_before_recording_raises():
    start, end = timed_event(), timed_event()
    with pytest.raises((RuntimeError, ValueError), match="recorded"):
        start.elapsed_time(end)
    start.record()
    with pytest.raises((RuntimeError, ValueError), match="recorded"):
        start.elapsed_time(end)


def test_elapsed_time_between_events_of_different_devices_raises():
    start, end = timed_event(), timed_event()
    start.record(torch.neuron.Stream(0))
    end.record(torch.neuron.Stream(1))
    with pytest.raises((RuntimeError, ValueError), match="same device"):
        start.elapsed_time(end)


def test_an_event_recorded_on_one_device_cannot_be_recorded_on_another():
    event = torch.neuron.Event()
    event.record(torch.neuron.Stream(0))
    with pytest.raises(RuntimeError, match="does not match"):
        event.record(torch.neuron.Stream(1))
    with pytest.raises(RuntimeError, match="does not match"):
        with torch.neuron.device(1):
            event.record()
    event.record(torch.neuron.default_stream(0))  # its own device still works
    assert event.query()


# ---- invalid devices ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.Stream("neuron:5"),
        lambda: torch.neuron.Stream(5),
        lambda: torch.neuron.Stream("neuron:2", priority=-1),
        lambda: torch.neuron.default_stream(7),
        lambda: torch.accelerator.current_stream(2),
    ],
    ids=["torch.Stream", "neuron.Stream", "high-priority", "default_stream", "current_stream"],
)
def test_a_stream_of_a_device_index_out_of_range_raises_a_clear_error(make):
    message = r"Invalid neuron device index \d.*NEURON_RT_VISIBLE_CORES"
    with pytest.raises(torch.AcceleratorError, match=message):
        make()


def test_set_stream_rejects_a_stream_of_a_device_that_does_not_exist():
    device_type = torch.neuron.default_stream(0).device_type
    ghost = torch.Stream(stream_id=1, device_index=9, device_type=device_type)
    with pytest.raises(torch.AcceleratorError, match="Invalid neuron device index 9"):
        torch.accelerator.set_stream(ghost)
    assert torch.accelerator.current_stream(0) == default_stream(0)
