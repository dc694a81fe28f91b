"""Device memory of the neuron backend, through torch.accelerator.* and the torch.neuron.* twins.

In-process tests measure deltas on neuron:0/neuron:1 of this (xdist worker) process, so they hold
whatever other tests left cached. Checks that need a fresh allocator (exact segment sizes, exact
block reuse), another NEURON_DEVICE_MEMORY, an out-of-memory or native threads run in a
subprocess with a timeout, so a deadlock fails instead of hanging the suite.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch

MiB = 1 << 20
GiB = 1 << 30
DEFAULT_CAPACITY = 16 * GiB
SUBPROCESS_TIMEOUT_S = 60


def rounded(nbytes: int) -> int:
    """The allocator's block size for a request: a multiple of 512 bytes, at least 512."""
    return max(512, -(-nbytes // 512) * 512)


def format_bytes(nbytes: int) -> str:
    """The allocator's own size formatting (NeuronRuntime.cpp format_bytes)."""
    value = float(nbytes)
    units = ["bytes", "KiB", "MiB", "GiB", "TiB"]
    unit = 0
    while value >= 1024.0 and unit < 4:
        value /= 1024.0
        unit += 1
    return f"{value:.0f} {units[unit]}" if unit == 0 else f"{value:.2f} {units[unit]}"


def run_python(code: str, **env_overrides: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (neuron loaded by ``import torch``)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURON_")}
    env.pop("TORCH_DEVICE_BACKEND_AUTOLOAD", None)
    env.update(env_overrides)
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
    )


def run_json(code: str, **env_overrides: str) -> dict:
    """Run ``code``, which prints one JSON object as its last stdout line; return it."""
    result = run_python(code, **env_overrides)
    assert result.returncode == 0, f"exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def alloc(nbytes: int, device: str = "neuron:0") -> torch.Tensor:
    return torch.empty(nbytes, dtype=torch.uint8, device=device)


@pytest.fixture(autouse=True)
def no_stray_frees():
    """Measure without interference: tensors left by earlier tests in this worker are collected
    first, and the garbage collector cannot free any in the middle of a measurement."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@pytest.fixture(params=["accelerator", "neuron"])
def mem(request):
    """torch.accelerator or torch.neuron: both expose the same memory functions."""
    alloc(1)  # initialize the runtime, so that the allocator reports statistics
    return getattr(torch, request.param)


# ---- allocated / peak / accumulated -----------------------------------------------------------


@pytest.mark.parametrize("nbytes", [1, 511, 512, 513, 4000, MiB])
def test_small_allocation_adds_its_size_rounded_to_512_and_del_returns_it(mem, nbytes):
    before = mem.memory_allocated(0)
    tensor = alloc(nbytes)
    assert mem.memory_allocated(0) - before == rounded(nbytes)
    del tensor
    assert mem.memory_allocated(0) == before


@pytest.mark.parametrize("nbytes", [MiB + 1, 5 * MiB + 3, 12 * MiB])
def test_large_allocation_adds_at_least_its_rounded_size_and_del_returns_it(mem, nbytes):
    before = mem.memory_allocated(0)
    tensor = alloc(nbytes)
    grown = mem.memory_allocated(0) - before
    # A large block is split only when more than 1 MiB would remain.
    assert rounded(nbytes) <= grown <= rounded(nbytes) + MiB
    del tensor
    assert mem.memory_allocated(0) == before


def test_max_memory_allocated_keeps_the_peak_until_reset_peak_memory_stats(mem):
    mem.reset_peak_memory_stats(0)
    base = mem.memory_allocated(0)
    assert mem.max_memory_allocated(0) == base
    first = alloc(3 * MiB)
    second = alloc(4096)
    peak = mem.memory_allocated(0)
    assert peak >= base + rounded(3 * MiB) + 4096
    del first, second
    assert mem.memory_allocated(0) == base
    assert mem.max_memory_allocated(0) == peak
    assert mem.max_memory_reserved(0) >= mem.memory_reserved(0)
    mem.reset_peak_memory_stats(0)
    assert mem.max_memory_allocated(0) == base
    assert mem.max_memory_reserved(0) == mem.memory_reserved(0)


def test_reset_accumulated_memory_stats_zeroes_allocated_and_freed_counters(mem):
    held = alloc(2048)
    churn = alloc(1000)
    del churn
    stats = mem.memory_stats(0)
    assert stats["allocated_bytes.all.allocated"] > 0
    assert stats["allocated_bytes.all.freed"] > 0
    current = stats["allocated_bytes.all.current"]

    mem.reset_accumulated_memory_stats(0)
    stats = mem.memory_stats(0)
    for key in (
        "allocated_bytes.all.allocated",
        "allocated_bytes.all.freed",
        "allocation.all.allocated",
        "allocation.all.freed",
        "active_bytes.all.allocated",
        "active_bytes.all.freed",
        "num_alloc_retries",
        "num_ooms",
    ):
        assert stats[key] == 0, key
    assert stats["allocated_bytes.all.current"] == current  # only the history is reset

    churn = alloc(1000)
    del churn
    stats = mem.memory_stats(0)
    assert stats["allocated_bytes.all.allocated"] == 1024
    assert stats["allocated_bytes.all.freed"] == 1024
    assert stats["allocation.all.allocated"] == 1
    assert stats["allocation.all.freed"] == 1
    del held


def test_memory_reserved_is_never_below_memory_allocated(mem):
    tensors = []
    for nbytes in (1, 700_000, MiB + 1, 11 * MiB):
        tensors.append(alloc(nbytes))
        stats = mem.memory_stats(0)
        assert mem.memory_reserved(0) >= mem.memory_allocated(0) >= rounded(nbytes)
        for pool in ("all", "small_pool", "large_pool"):
            assert (
                stats[f"reserved_bytes.{pool}.current"] >= stats[f"allocated_bytes.{pool}.current"]
            )
    del tensors
    assert mem.memory_reserved(0) >= mem.memory_allocated(0)


# ---- pools and caching -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("nbytes", "pool", "other"),
    [
        (512, "small_pool", "large_pool"),
        (MiB, "small_pool", "large_pool"),  # 1 MiB is the largest small request
        (MiB + 1, "large_pool", "small_pool"),
        (12 * MiB, "large_pool", "small_pool"),
    ],
)
def test_requests_up_to_1mib_use_the_small_pool_and_larger_ones_the_large_pool(
    mem, nbytes, pool, other
):
    before = mem.memory_stats(0)
    tensor = alloc(nbytes)
    after = mem.memory_stats(0)

    def delta(key: str) -> int:
        return after[key] - before[key]

    assert delta(f"allocated_bytes.{pool}.current") >= rounded(nbytes)
    assert delta(f"allocation.{pool}.current") == 1
    assert delta(f"allocated_bytes.{other}.current") == 0
    assert delta(f"allocation.{other}.current") == 0
    assert delta("allocated_bytes.all.current") == delta(f"allocated_bytes.{pool}.current")
    del tensor


FRESH_ALLOCATOR_SCRIPT = """
import json
import torch

MiB = 1 << 20
acc = torch.accelerator

def alloc(n):
    return torch.empty(n, dtype=torch.uint8, device="neuron:0")

alloc(1)  # initialize
report = {"segments": {}, "reuse": {}}

# New segment per request size, each from an empty cache.
for n in (1000, MiB, MiB + 1, 9 * MiB, 10 * MiB, 11 * MiB + 1):
    acc.empty_cache()
    r0 = acc.memory_reserved(0)
    t = alloc(n)
    report["segments"][str(n)] = acc.memory_reserved(0) - r0
    del t
acc.empty_cache()
segments = acc.memory_stats(0)["segment.all.current"]
report["empty_after_all_freed"] = [acc.memory_reserved(0), segments]

# Freeing and re-allocating the same size reuses the block.
for name, n in (("small", 3000), ("large", 12 * MiB)):
    t = alloc(n)
    ptr, reserved = t.data_ptr(), acc.memory_reserved(0)
    device_allocs = acc.memory_stats(0)["num_device_alloc"]
    del t
    reserved_cached = acc.memory_reserved(0)
    t = alloc(n)
    report["reuse"][name] = {
        "same_ptr": t.data_ptr() == ptr,
        "reserved": [reserved, reserved_cached, acc.memory_reserved(0)],
        "new_device_allocs": acc.memory_stats(0)["num_device_alloc"] - device_allocs,
    }
    del t
acc.empty_cache()

# empty_cache keeps exactly the segments that hold live tensors.
keep = alloc(12 * MiB)
small = alloc(4096)
drop = alloc(14 * MiB)
del small, drop
acc.empty_cache()
report["empty_with_live"] = [acc.memory_reserved(0), acc.memory_allocated(0)]
del keep
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def fresh_allocator_report() -> dict:
    return run_json(FRESH_ALLOCATOR_SCRIPT)


def test_segments_are_2mib_small_20mib_large_and_2mib_rounded_from_10mib(fresh_allocator_report):
    assert fresh_allocator_report["segments"] == {
        str(1000): 2 * MiB,
        str(MiB): 2 * MiB,
        str(MiB + 1): 20 * MiB,
        str(9 * MiB): 20 * MiB,
        str(10 * MiB): 10 * MiB,
        str(11 * MiB + 1): 12 * MiB,
    }


@pytest.mark.parametrize("pool", ["small", "large"])
def test_freed_block_is_reused_for_the_same_size_without_growing_reserved(
    fresh_allocator_report, pool
):
    reuse = fresh_allocator_report["reuse"][pool]
    assert reuse["same_ptr"]
    reserved, reserved_cached, reserved_again = reuse["reserved"]
    assert reserved_cached == reserved  # freeing keeps the segment cached
    assert reserved_again == reserved
    assert reuse["new_device_allocs"] == 0


def test_empty_cache_releases_every_segment_once_all_is_freed(fresh_allocator_report):
    assert fresh_allocator_report["empty_after_all_freed"] == [0, 0]


def test_empty_cache_keeps_exactly_the_segments_of_live_tensors(fresh_allocator_report):
    reserved, allocated = fresh_allocator_report["empty_with_live"]
    assert allocated == 12 * MiB
    assert reserved == 12 * MiB  # the small and the 14 MiB segments went back


@dataclasses.dataclass
class ModelBlock:
    size: int
    allocated: bool
    small: bool  # which pool
    segment: int  # the address of its segment


class CachingAllocatorModel:
    """The CUDA caching allocator's block choice, as NeuronDeviceAllocator.cpp documents it: best
    fit in (size, address) order within the request's pool, a split when the remainder is worth
    keeping (>= 512 bytes in the small pool, > 1 MiB in the large one), a merge with free
    neighbours on free, a new segment when no free block fits. Addresses of new segments are not
    predicted (the host allocator picks them): `place` learns each from the allocator."""

    def __init__(self) -> None:
        self.free: dict[bool, set[tuple[int, int]]] = {True: set(), False: set()}  # (size, addr)
        self.blocks: dict[int, ModelBlock] = {}  # by address

    @staticmethod
    def segment_size(size: int) -> int:
        if size <= MiB:
            return 2 * MiB
        if size < 10 * MiB:
            return 20 * MiB
        return -(-size // (2 * MiB)) * (2 * MiB)

    def predict(self, nbytes: int) -> int | None:
        """The address the request gets, or None if it needs a new segment."""
        size = rounded(nbytes)
        fits = [block for block in self.free[size <= MiB] if block[0] >= size]
        return min(fits)[1] if fits else None

    def place(self, nbytes: int, addr: int) -> None:
        size = rounded(nbytes)
        small = size <= MiB
        if self.predict(nbytes) is None:
            self.blocks[addr] = ModelBlock(self.segment_size(size), False, small, addr)
        else:
            self.free[small].remove((self.blocks[addr].size, addr))
        block = self.blocks[addr]
        remaining = block.size - size
        if remaining >= 512 if small else remaining > MiB:
            self.blocks[addr + size] = ModelBlock(remaining, False, small, block.segment)
            self.free[small].add((remaining, addr + size))
            block.size = size
        block.allocated = True

    def _free_neighbour(self, addr: int, segment: int) -> ModelBlock | None:
        block = self.blocks.get(addr)
        return block if block and not block.allocated and block.segment == segment else None

    def release(self, addr: int) -> None:
        block = self.blocks[addr]
        block.allocated = False
        following = addr + block.size
        if neighbour := self._free_neighbour(following, block.segment):
            self.free[block.small].remove((neighbour.size, following))
            block.size += self.blocks.pop(following).size
        previous = next((a for a, b in self.blocks.items() if a + b.size == addr), None)
        if previous is not None and (neighbour := self._free_neighbour(previous, block.segment)):
            self.free[block.small].remove((neighbour.size, previous))
            neighbour.size += self.blocks.pop(addr).size
            addr, block = previous, neighbour
        self.free[block.small].add((block.size, addr))

    def inactive_split(self) -> int:
        """Free blocks that share their segment with another block."""
        per_segment: dict[int, int] = {}
        for block in self.blocks.values():
            per_segment[block.segment] = per_segment.get(block.segment, 0) + 1
        return sum(
            1 for b in self.blocks.values() if not b.allocated and per_segment[b.segment] > 1
        )


REPLAY_SCRIPT = """
import json, sys
import torch

ops = json.loads(sys.stdin.read())
torch.empty(1, device="neuron:0")  # initialize
torch.accelerator.empty_cache()
live, addresses = {}, []
for op, key, nbytes in ops:
    if op == "alloc":
        live[key] = torch.empty(nbytes, dtype=torch.uint8, device="neuron:0")
        addresses.append(live[key].data_ptr())
    else:
        del live[key]
stats = torch.accelerator.memory_stats(0)
print(json.dumps({"addresses": addresses, "inactive_split": stats["inactive_split.all.current"],
                  "segments": stats["segment.all.current"]}))
"""


def test_blocks_are_chosen_best_fit_by_size_then_address_as_the_cuda_allocator_does():
    """A seeded mix of 1,500 small and large requests and frees, replayed in a fresh process: every
    request that a cached block can serve gets the block the caching-allocator model predicts, and
    the split-block and segment counts agree at the end. Guards the allocator's free-block index
    (buckets by size, an ordered set above 2 MiB) against changing which block a request gets."""
    import random

    rng = random.Random(20261203)
    ops, live, next_key = [], [], 0
    for _ in range(1500):
        if live and rng.random() < 0.45:
            ops.append(["free", live.pop(rng.randrange(len(live))), 0])
            continue
        kind = rng.random()
        if kind < 0.25:  # sizes that repeat: several free blocks of one size, ordered by address
            nbytes = rng.choice([512, 4096, 4000, 65536])
        elif kind < 0.5:
            nbytes = rng.randint(1, 64 * 1024)
        elif kind < 0.8:
            nbytes = rng.randint(64 * 1024, MiB)
        else:
            nbytes = rng.randint(MiB + 1, 14 * MiB)
        ops.append(["alloc", next_key, nbytes])
        live.append(next_key)
        next_key += 1
    env = {k: v for k, v in os.environ.items() if not k.startswith("NEURON_")}
    result = subprocess.run(
        [sys.executable, "-c", REPLAY_SCRIPT],
        input=json.dumps(ops),
        env=env,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])

    model, addresses = CachingAllocatorModel(), iter(report["addresses"])
    mismatches, served_from_cache, key_addr = [], 0, {}
    for step, (op, key, nbytes) in enumerate(ops):
        if op == "free":
            model.release(key_addr.pop(key))
            continue
        predicted, actual = model.predict(nbytes), next(addresses)
        if predicted is not None:
            served_from_cache += 1
            if predicted != actual:
                mismatches.append(
                    f"step {step}: {nbytes} bytes got {actual:#x}, the model says {predicted:#x}"
                )
        model.place(nbytes, actual)
        key_addr[key] = actual
    assert served_from_cache > 500, "the sequence should mostly reuse cached blocks"
    assert not mismatches, "\n".join(mismatches[:10])
    segments = len({block.segment for block in model.blocks.values()})
    assert (report["inactive_split"], report["segments"]) == (model.inactive_split(), segments)


def test_freed_memory_stays_reserved_until_empty_cache_lowers_it_to_what_is_in_use(mem):
    mem.empty_cache()
    r0 = mem.memory_reserved(0)
    # Above 20 MiB, so that no cached fragment can serve them: each gets its own segment.
    kept = alloc(22 * MiB)
    assert mem.memory_reserved(0) == r0 + 22 * MiB
    dropped = alloc(24 * MiB)
    small = alloc(3000)
    peak_reserved = mem.memory_reserved(0)
    assert peak_reserved >= r0 + 46 * MiB
    del dropped, small
    assert mem.memory_reserved(0) == peak_reserved  # cached, not released
    mem.empty_cache()
    assert mem.memory_reserved(0) == r0 + 22 * MiB
    assert kept.data_ptr() != 0
    del kept
    mem.empty_cache()
    assert mem.memory_reserved(0) == r0


# ---- capacity ----------------------------------------------------------------------------------


@pytest.mark.parametrize("get_info", ["accelerator", "neuron"])
def test_memory_info_is_capacity_minus_reserved_and_capacity(get_info):
    info = (
        torch.accelerator.get_memory_info
        if get_info == "accelerator"
        else torch.neuron.mem_get_info
    )
    tensor = alloc(12 * MiB)
    capacity = torch.neuron.get_device_properties(0).total_memory
    if "NEURON_DEVICE_MEMORY" not in os.environ:
        assert capacity == DEFAULT_CAPACITY
    for device in (0, 1):
        free, total = info(device)
        assert total == capacity
        assert free == capacity - torch.accelerator.memory_reserved(device)
    torch.accelerator.empty_cache()
    free_before, _ = info(0)
    grow = alloc(24 * MiB)  # larger than any cached fragment: a new segment of exactly 24 MiB
    free_after, _ = info(0)
    assert free_before - free_after == 24 * MiB
    del tensor, grow


def test_neuron_device_memory_sets_the_capacity_that_memory_info_reports():
    report = run_json(
        """
        import json, torch
        t = torch.empty(1 << 20, dtype=torch.uint8, device="neuron")
        print(json.dumps({
            "accelerator": torch.accelerator.get_memory_info(0),
            "neuron": torch.neuron.mem_get_info(1),
            "properties": torch.neuron.get_device_properties(0).total_memory,
            "reserved": torch.accelerator.memory_reserved(0),
        }))
        """,
        NEURON_DEVICE_MEMORY="512MiB",
    )
    assert report["properties"] == 512 * MiB
    assert report["accelerator"] == [512 * MiB - report["reserved"], 512 * MiB]
    assert report["neuron"] == [512 * MiB, 512 * MiB]


def test_malformed_neuron_device_memory_raises_an_error_naming_the_variable():
    result = run_python(
        """
        import torch
        try:
            torch.empty(16, device="neuron")
        except RuntimeError as error:
            print("RuntimeError:", error)
        else:
            print("no error")
        """,
        NEURON_DEVICE_MEMORY="1.5GiB",
    )
    assert result.returncode == 0, result.stderr
    assert "RuntimeError:" in result.stdout
    assert "NEURON_DEVICE_MEMORY='1.5GiB'" in result.stdout
    assert "512MiB" in result.stdout  # says what a valid value looks like


def test_out_of_memory_reports_the_sizes_and_leaves_the_allocator_usable():
    report = run_json(
        """
        import json, torch
        MiB = 1 << 20
        acc = torch.accelerator
        def alloc(n):
            return torch.empty(n, dtype=torch.uint8, device="neuron")
        big = alloc(30 * MiB)          # its own 30 MiB segment
        medium = alloc(MiB + MiB // 2)  # split from a 20 MiB segment
        before = acc.memory_stats(0)
        report = {"before": [before["allocated_bytes.all.current"],
                             before["reserved_bytes.all.current"],
                             before["allocation.all.current"]]}
        try:
            alloc(20 * MiB)  # no free block fits; a 20 MiB segment would pass 64 MiB
        except torch.OutOfMemoryError as error:
            report["error"] = [type(error).__name__, isinstance(error, RuntimeError), str(error)]
        after = acc.memory_stats(0)
        report["after"] = [after["allocated_bytes.all.current"],
                           after["reserved_bytes.all.current"],
                           after["allocation.all.current"]]
        report["num_ooms"] = after["num_ooms"]
        del big  # cached: the next request must release it and retry
        again = alloc(40 * MiB)
        again.fill_(7)
        report["again"] = [int(again[-1].item()), acc.memory_allocated(0),
                           acc.memory_reserved(0), acc.memory_stats(0)["num_alloc_retries"]]
        print(json.dumps(report))
        """,
        NEURON_DEVICE_MEMORY="64MiB",
    )
    allocated, reserved, count = report["before"]
    assert allocated == 30 * MiB + rounded(MiB + MiB // 2)
    assert reserved == 50 * MiB
    assert "error" in report, "allocating past the capacity did not raise torch.OutOfMemoryError"
    name, is_runtime_error, message = report["error"]
    assert name == "OutOfMemoryError" and is_runtime_error
    assert "Tried to allocate 20.00 MiB" in message
    assert "total capacity of 64.00 MiB" in message
    assert f"{format_bytes(64 * MiB - reserved)} is free" in message
    assert f"{format_bytes(allocated)} is allocated by PyTorch" in message
    assert f"{format_bytes(reserved - allocated)} is reserved by PyTorch but unallocated" in message
    assert "NEURON_DEVICE_MEMORY" in message
    assert report["after"] == [allocated, reserved, count]
    assert report["num_ooms"] == 1
    value, allocated_again, reserved_again, retries = report["again"]
    assert value == 7
    assert allocated_again == rounded(MiB + MiB // 2) + 40 * MiB
    assert reserved_again == 20 * MiB + 40 * MiB  # the cached 30 MiB segment was released
    assert retries >= 1


# ---- devices and threads -----------------------------------------------------------------------


def test_statistics_are_per_device(mem):
    alloc(1, "neuron:1")
    zero_before = mem.memory_allocated(0)
    one_before = mem.memory_allocated(1)
    on_one = alloc(5 * MiB, "neuron:1")
    assert mem.memory_allocated(0) == zero_before
    assert mem.memory_allocated(1) - one_before >= rounded(5 * MiB)
    on_zero = alloc(3000, "neuron:0")
    assert mem.memory_allocated(1) - one_before >= rounded(5 * MiB)
    assert mem.memory_allocated(0) - zero_before == rounded(3000)
    del on_one
    assert mem.memory_allocated(1) == one_before
    assert mem.memory_allocated(0) - zero_before == rounded(3000)
    del on_zero


def test_memory_of_different_devices_never_overlaps():
    sizes = (1, 4096, MiB, MiB + 1, 12 * MiB)
    ranges = {0: [], 1: []}
    tensors = []
    for device in (0, 1):
        for nbytes in sizes:
            tensor = alloc(nbytes, f"neuron:{device}")
            tensors.append(tensor)
            assert tensor.device == torch.device("neuron", device)
            ranges[device].append((tensor.data_ptr(), tensor.data_ptr() + rounded(nbytes)))
    for start0, end0 in ranges[0]:
        for start1, end1 in ranges[1]:
            assert end0 <= start1 or end1 <= start0, "neuron:0 and neuron:1 share memory"
    del tensors


def test_allocator_serves_native_threads_while_the_gil_is_held():
    report = run_json(
        """
        import json, torch
        from device_agnostic.neuron import _C
        keep = torch.empty(1, device="neuron")
        before = torch.accelerator.memory_stats(0)["allocation.all.allocated"]
        small = _C._allocate_from_native_threads(0, 4096, 8, 200)
        large = _C._allocate_from_native_threads(1, 2 << 20, 4, 30)
        stats = [torch.accelerator.memory_stats(d) for d in (0, 1)]
        print(json.dumps({
            "small": small,
            "large": large,
            "allocations": stats[0]["allocation.all.allocated"] - before,
            "allocated": [s["allocated_bytes.all.current"] for s in stats],
            "active": [s["active.all.current"] for s in stats],
        }))
        """
    )
    assert report["small"] == 8 * 200
    assert report["large"] == 4 * 30
    assert report["allocations"] == 8 * 200
    assert report["allocated"] == [512, 0]  # only the initializing tensor is still alive
    assert report["active"] == [1, 0]
