"""Neuron vs CPU: what host execution costs, op by op, measured in one run.

The neuron backend runs every ATen operator's CPU kernel on device memory (host memory here), so
any time neuron spends beyond the CPU is the backend's own overhead: dispatch through the boxed
fallback, host views, result adoption, the caching allocator, the autograd device thread. This
script times the same ops on the same data on both devices, interleaved, and prints
neuron_time / cpu_time per op and size, then checks the targets:

- the median ratio over all ops at sizes >= 1e6 elements is <= 1.15;
- no op has a ratio above 1.6 at sizes >= 1e6;
- the median ratio at the smallest size (below 1e6) is <= 2.5;
- the per-op overhead: the median ratio over all ops at 1e3 elements is <= 1.15 (issue 14);
- the training step of the small MLP (forward, backward, SGD) at 1e3 to 1e4 elements: its largest
  ratio is <= 1.3 (issue 14).

Method: for every (op, size) both devices get the same inputs (made on the CPU from a fixed seed,
then copied), the first results are cross-checked, both are warmed up, and the calls per timed
block are set from the median single-call time so that a block lasts about 30 ms. Then rounds
alternate the devices (cpu, neuron; neuron, cpu; ...) so that drift (frequency, other load) hits
both alike; each round yields one per-call time per device and their ratio. Rounds go on until
the middle half of the ratios lies within +-3% of their median, or the case's time budget is
spent. The reported ratio is the median of the per-round ratios; the times table shows each
device's fastest block. Garbage collection is off while timing; the thread count is torch's
default and the same for both devices. Each case also records the minor page faults per call and
the share of the CPUs that other processes used meanwhile (cases above 15% are flagged "*").

Usage:
    .venv/bin/python benchmarks/neuron_vs_cpu.py                 # full run, 1-2 minutes
    .venv/bin/python benchmarks/neuron_vs_cpu.py --quick         # 1e3 and 1e6 only, ~15 s
    .venv/bin/python benchmarks/neuron_vs_cpu.py --ops add,mlp_step --sizes 1e3,1e6 --check
    .venv/bin/python benchmarks/neuron_vs_cpu.py --device cpu    # A/A run: the noise floor

Exits 0, unless --check is given and a target is missed or an op failed.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import gc
import json
import math
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import torch
import torch.nn.functional as F

try:
    import resource
except ImportError:  # resource is Unix-only: elsewhere faults and others' load go unmeasured
    resource = None  # type: ignore[assignment]

OPS: tuple[str, ...] = ("add", "mul", "matmul", "sum", "softmax", "conv2d", "mlp_step")
DEFAULT_SIZES: tuple[int, ...] = (10**3, 10**4, 10**5, 10**6, 10**7)
QUICK_SIZES: tuple[int, ...] = (10**3, 10**6)

LARGE_SIZE = 10**6
BUSY_SHARE = 0.15  # a case during which other processes used more of the CPUs is flagged
TARGET_MEDIAN_LARGE = 1.15
TARGET_MAX_LARGE = 1.6
TARGET_MEDIAN_SMALL = 2.5
OVERHEAD_SIZE = 10**3  # the per-op overhead target's size
TARGET_OVERHEAD = 1.15
MLP_STEP_SIZES = (10**3, 10**4)  # the MLP train-step target's size range
TARGET_MLP_STEP = 1.3

SEED = 0
MATMUL_MAX_K = 256
CONV_CHANNELS = 16
CONV_MAX_SIDE = 256
SOFTMAX_ROW = 1000
MLP_IN, MLP_HIDDEN, MLP_CLASSES = 256, 32, 10

Thunk = Callable[[], object]


@dataclass(frozen=True)
class Settings:
    """How long and how often each (op, size) case is timed."""

    block_s: float  # target duration of one timed block
    min_rounds: int  # rounds (one block per device each) always run
    max_rounds: int  # rounds never exceeded
    case_budget_s: float  # stop adding rounds past this (after min_rounds)
    warmup_s: float  # minimum warm-up time per device
    rel_tol: float = 0.03  # stop once the ratios' IQR half-width / median is below this


FULL_SETTINGS = Settings(
    block_s=0.03, min_rounds=9, max_rounds=61, case_budget_s=4.5, warmup_s=0.05
)
QUICK_SETTINGS = Settings(
    block_s=0.015, min_rounds=5, max_rounds=15, case_budget_s=1.2, warmup_s=0.03
)


@dataclass
class Case:
    """One op at one size: its shapes and, per device, a thunk that runs it once."""

    op: str
    size: int
    shape: str
    input_numel: int
    make: Callable[[torch.device], Thunk]


@dataclass
class Result:
    """What was measured for one (op, size)."""

    op: str
    size: int
    shape: str
    input_numel: int
    ratio: float | None = None  # median over rounds of device_time / cpu_time
    ratio_q1: float | None = None
    ratio_q3: float | None = None
    cpu_us: float | None = None  # median per-call time on the CPU, microseconds
    device_us: float | None = None  # median per-call time on the device, microseconds
    cpu_best_us: float | None = None  # fastest block's per-call time on the CPU
    device_best_us: float | None = None  # fastest block's per-call time on the device
    ratio_best: float | None = None  # device_best_us / cpu_best_us, a cross-check
    others_cpu: float | None = None  # share of the machine's CPU other processes used meanwhile
    cpu_faults: float | None = None  # minor page faults per call on the CPU (Unix only)
    device_faults: float | None = None  # minor page faults per call on the device
    calls_per_block: int = 0
    rounds: int = 0
    max_abs_diff: float | None = None  # first call's result, device vs cpu
    error: str | None = None
    notes: list[str] = field(default_factory=list)


# ---- the ops -------------------------------------------------------------------------------


def _randn(*shape: int) -> torch.Tensor:
    """A float32 CPU tensor of standard normal values from the benchmark's fixed seed."""
    generator = torch.Generator().manual_seed(SEED)
    return torch.randn(*shape, generator=generator, dtype=torch.float32)


def _binary_case(op: str, size: int, fn: Callable[[torch.Tensor, torch.Tensor], object]) -> Case:
    """Elementwise `fn(a, b)` on two 1-D tensors of `size` elements."""
    a, b = _randn(size), _randn(size).neg_()

    def make(device: torch.device) -> Thunk:
        x, y = a.to(device), b.to(device)
        return lambda: fn(x, y)

    return Case(op, size, f"2 x ({size},)", size, make)


def _sum_case(size: int) -> Case:
    """Full reduction of a 1-D tensor."""
    a = _randn(size)

    def make(device: torch.device) -> Thunk:
        x = a.to(device)
        return lambda: torch.sum(x)

    return Case("sum", size, f"({size},)", size, make)


def _softmax_case(size: int) -> Case:
    """Softmax over the last dimension of rows of SOFTMAX_ROW elements."""
    cols = min(size, SOFTMAX_ROW)
    rows = max(1, round(size / cols))
    a = _randn(rows, cols)

    def make(device: torch.device) -> Thunk:
        x = a.to(device)
        return lambda: torch.softmax(x, dim=-1)

    return Case("softmax", size, f"({rows}, {cols}), dim=-1", rows * cols, make)


def _matmul_case(size: int) -> Case:
    """A (m, k) @ B (k, k): A holds about `size` elements, k = min(256, sqrt(size))."""
    k = min(MATMUL_MAX_K, max(1, round(math.sqrt(size))))
    m = max(1, round(size / k))
    a, b = _randn(m, k), _randn(k, k) / math.sqrt(k)

    def make(device: torch.device) -> Thunk:
        x, y = a.to(device), b.to(device)
        return lambda: torch.matmul(x, y)

    return Case("matmul", size, f"({m}, {k}) @ ({k}, {k})", m * k, make)


def _conv2d_case(size: int) -> Case:
    """3x3 convolution, 16 -> 16 channels, padding 1, on an input of about `size` elements."""
    pixels = max(1, size // CONV_CHANNELS)
    if pixels <= CONV_MAX_SIDE**2:
        batch, side = 1, max(1, round(math.sqrt(pixels)))
    else:
        batch, side = max(1, round(pixels / CONV_MAX_SIDE**2)), CONV_MAX_SIDE
    shape = (batch, CONV_CHANNELS, side, side)
    x0 = _randn(*shape)
    w0 = _randn(CONV_CHANNELS, CONV_CHANNELS, 3, 3) / math.sqrt(CONV_CHANNELS * 9)
    b0 = _randn(CONV_CHANNELS)

    def make(device: torch.device) -> Thunk:
        x, w, b = x0.to(device), w0.to(device), b0.to(device)
        return lambda: F.conv2d(x, w, b, padding=1)

    return Case("conv2d", size, f"{shape} * (16, 16, 3, 3), pad 1", math.prod(shape), make)


def _mlp_case(size: int) -> Case:
    """One SGD training step of a 256-32-32-10 ReLU MLP on a (batch, 256) input of ~`size`."""
    batch = max(1, round(size / MLP_IN))
    torch.manual_seed(SEED)
    model0 = torch.nn.Sequential(
        torch.nn.Linear(MLP_IN, MLP_HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(MLP_HIDDEN, MLP_HIDDEN),
        torch.nn.ReLU(),
        torch.nn.Linear(MLP_HIDDEN, MLP_CLASSES),
    )
    x0 = _randn(batch, MLP_IN)
    y0 = torch.randint(0, MLP_CLASSES, (batch,), generator=torch.Generator().manual_seed(SEED))

    def make(device: torch.device) -> Thunk:
        model = copy.deepcopy(model0).to(device)
        # foreach pinned off for both: torch's default differs by device (on for accelerators,
        # off for the CPU), which would compare different optimizer kernels.
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=False)
        x, y = x0.to(device), y0.to(device)

        def step() -> torch.Tensor:
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            return loss.detach()

        return step

    shape = f"x ({batch}, {MLP_IN}); {MLP_IN}-{MLP_HIDDEN}-{MLP_HIDDEN}-{MLP_CLASSES} ReLU, SGD"
    return Case("mlp_step", size, shape, batch * MLP_IN, make)


def build_case(op: str, size: int) -> Case:
    """The benchmark case for `op` at about `size` input elements."""
    if op == "add":
        return _binary_case("add", size, torch.add)
    if op == "mul":
        return _binary_case("mul", size, torch.mul)
    if op == "sum":
        return _sum_case(size)
    if op == "softmax":
        return _softmax_case(size)
    if op == "matmul":
        return _matmul_case(size)
    if op == "conv2d":
        return _conv2d_case(size)
    if op == "mlp_step":
        return _mlp_case(size)
    raise ValueError(f"unknown op {op!r}; choose from {', '.join(OPS)}")


# ---- timing --------------------------------------------------------------------------------


def synchronizer(device: torch.device) -> Callable[[], None]:
    """A function that waits for `device`'s queued work (a no-op on the CPU)."""
    if device.type == "cpu":
        return lambda: None
    module = torch.get_device_module(device.type)
    return lambda: module.synchronize(device)


def minor_faults() -> int:
    """The process's minor page faults so far (0 where getrusage is unavailable)."""
    if resource is None:
        return 0
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class OtherLoad:
    """How much of the machine's CPU other processes used between start() and share().

    Busy time of all CPUs (/proc/stat) minus this process's own CPU time (all its threads),
    over wall time x CPUs. None where /proc/stat or getrusage is unavailable.
    """

    def __init__(self) -> None:
        self._start: tuple[float, float, float] | None = None
        self.start()

    @staticmethod
    def _sample() -> tuple[float, float, float] | None:
        if resource is None:
            return None
        try:
            with open("/proc/stat", encoding="ascii") as stat:
                fields = [int(value) for value in stat.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        # user nice system idle iowait irq softirq steal ...: busy is all but idle and iowait.
        busy = (sum(fields[:8]) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")
        usage = resource.getrusage(resource.RUSAGE_SELF)
        return time.perf_counter(), busy, usage.ru_utime + usage.ru_stime

    def start(self) -> None:
        """Starts (or restarts) the measurement."""
        self._start = self._sample()

    def share(self) -> float | None:
        """Others' share of all CPUs since start(), from 0 to 1."""
        end = self._sample()
        if self._start is None or end is None:
            return None
        wall = (end[0] - self._start[0]) * (os.cpu_count() or 1)
        others = (end[1] - self._start[1]) - (end[2] - self._start[2])
        return min(1.0, max(0.0, others / wall)) if wall > 0 else None


# What time_block measures: wall time (the default), or with --clock cpu the CPU time of the whole
# process (all its threads), which a preemption by another process does not inflate.
CLOCKS: dict[str, Callable[[], float]] = {"wall": time.perf_counter, "cpu": time.process_time}
_clock: Callable[[], float] = time.perf_counter


def time_block(fn: Thunk, calls: int, sync: Callable[[], None]) -> float:
    """Seconds per call of `fn`, over one block of `calls` back-to-back calls."""
    start = _clock()
    for _ in range(calls):
        fn()
    sync()
    return (_clock() - start) / calls


def warm_up(fn: Thunk, sync: Callable[[], None], min_s: float) -> None:
    """Runs `fn` at least 3 times and for at least `min_s` (at most 200 calls)."""
    deadline = time.perf_counter() + min_s
    calls = 0
    while calls < 3 or (time.perf_counter() < deadline and calls < 200):
        time_block(fn, 1, sync)
        calls += 1


def calibrate(fn: Thunk, sync: Callable[[], None], block_s: float) -> float:
    """Seconds per call of `fn`: the median of single calls over about half a block.

    The median of many single calls shrugs off calls that another process preempted (a block
    of calls would not), so the block size stays right on a busy machine.
    """
    durations: list[float] = []
    deadline = time.perf_counter() + block_s / 2
    while len(durations) < 5 or (time.perf_counter() < deadline and len(durations) < 20_000):
        durations.append(time_block(fn, 1, sync))
    return statistics.median(durations)


def max_abs_diff(cpu_out: object, dev_out: object) -> float:
    """Largest absolute difference between two results (tensors), compared on the CPU."""
    assert isinstance(cpu_out, torch.Tensor) and isinstance(dev_out, torch.Tensor)
    if cpu_out.shape != dev_out.shape:
        return math.inf
    return float((cpu_out.float() - dev_out.cpu().float()).abs().max()) if cpu_out.numel() else 0.0


def _quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(q1, median, q3) of `values`."""
    if len(values) < 2:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def measure(case: Case, device: torch.device, settings: Settings) -> Result:
    """Times `case` on the CPU and on `device`, interleaved; see the module docstring."""
    result = Result(case.op, case.size, case.shape, case.input_numel)
    load = OtherLoad()
    cpu = torch.device("cpu")
    try:
        fns = {"cpu": case.make(cpu), "dev": case.make(device)}
        syncs = {"cpu": synchronizer(cpu), "dev": synchronizer(device)}
        first_cpu, first_dev = fns["cpu"](), fns["dev"]()
        syncs["dev"]()
        result.max_abs_diff = max_abs_diff(first_cpu, first_dev)
        del first_cpu, first_dev
        for key in ("dev", "cpu"):
            warm_up(fns[key], syncs[key], settings.warmup_s)
        # The slower device sets the block size.
        per_call = max(calibrate(fns[k], syncs[k], settings.block_s) for k in ("cpu", "dev"))
    except Exception as error:  # an op the device cannot run is a result too
        result.error = f"{type(error).__name__}: {str(error).splitlines()[0][:160]}"
        return result

    calls = max(1, math.ceil(settings.block_s / max(per_call, 1e-9)))
    result.calls_per_block = calls
    cpu_times: list[float] = []
    dev_times: list[float] = []
    ratios: list[float] = []
    faults = {"cpu": 0, "dev": 0}
    start = time.perf_counter()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    try:
        for round_index in range(settings.max_rounds):
            order = ("cpu", "dev") if round_index % 2 == 0 else ("dev", "cpu")
            times = {}
            for key in order:
                faults_before = minor_faults()
                times[key] = time_block(fns[key], calls, syncs[key])
                faults[key] += minor_faults() - faults_before
            cpu_times.append(times["cpu"])
            dev_times.append(times["dev"])
            ratios.append(times["dev"] / times["cpu"])
            if len(ratios) >= settings.min_rounds:
                q1, median, q3 = _quartiles(ratios)
                if (q3 - q1) / (2 * median) <= settings.rel_tol:
                    break
                if time.perf_counter() - start > settings.case_budget_s:
                    result.notes.append("budget")
                    break
    finally:
        if gc_was_enabled:
            gc.enable()
    result.rounds = len(ratios)
    result.others_cpu = load.share()
    if resource is not None:
        result.cpu_faults = faults["cpu"] / (calls * len(ratios))
        result.device_faults = faults["dev"] / (calls * len(ratios))
    result.ratio_q1, result.ratio, result.ratio_q3 = _quartiles(ratios)
    result.cpu_us = statistics.median(cpu_times) * 1e6
    result.device_us = statistics.median(dev_times) * 1e6
    result.cpu_best_us = min(cpu_times) * 1e6
    result.device_best_us = min(dev_times) * 1e6
    result.ratio_best = min(dev_times) / min(cpu_times)
    return result


# ---- report --------------------------------------------------------------------------------


def size_label(size: int) -> str:
    """1000 -> "1e3"; sizes that are not powers of ten print as they are."""
    exponent = round(math.log10(size)) if size > 0 else 0
    return f"1e{exponent}" if size > 0 and 10**exponent == size else str(size)


def parse_sizes(text: str) -> list[int]:
    """ "1e3,1e6" or "1000,1000000" -> [1000, 1000000]."""
    sizes = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            continue
        value = int(float(item))
        if value < 1:
            raise argparse.ArgumentTypeError(f"size {item!r} must be at least 1")
        sizes.append(value)
    if not sizes:
        raise argparse.ArgumentTypeError("no sizes given")
    return sorted(set(sizes))


def parse_ops(text: str) -> list[str]:
    """ "add,mlp_step" -> ["add", "mlp_step"], in the benchmark's canonical order."""
    wanted = {item.strip() for item in text.split(",") if item.strip()}
    unknown = wanted - set(OPS)
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown op(s) {', '.join(sorted(unknown))}; choose from {', '.join(OPS)}"
        )
    if not wanted:
        raise argparse.ArgumentTypeError("no ops given")
    return [op for op in OPS if op in wanted]


@dataclass
class Target:
    """One of the issue's targets, evaluated on this run."""

    name: str
    value: float | None
    limit: float
    detail: str

    @property
    def status(self) -> str:
        """PASS, MISS, or n/a when the run measured nothing it applies to."""
        if self.value is None:
            return "n/a"
        return "PASS" if self.value <= self.limit else "MISS"


def evaluate(results: Sequence[Result], sizes: Sequence[int]) -> list[Target]:
    """The three targets over the successful results."""
    large = [r for r in results if r.ratio is not None and r.size >= LARGE_SIZE]
    smallest = min(sizes)
    small = [r for r in results if r.ratio is not None and r.size == smallest]
    targets = [
        Target(
            "median ratio, sizes >= 1e6",
            statistics.median(r.ratio for r in large) if large else None,
            TARGET_MEDIAN_LARGE,
            f"over {len(large)} cases",
        ),
    ]
    worst = max(large, key=lambda r: r.ratio or 0.0) if large else None
    targets.append(
        Target(
            "max ratio, sizes >= 1e6",
            worst.ratio if worst else None,
            TARGET_MAX_LARGE,
            f"{worst.op} @ {size_label(worst.size)}" if worst else "no cases",
        )
    )
    applies = smallest < LARGE_SIZE and small
    targets.append(
        Target(
            f"median ratio, smallest size ({size_label(smallest)})",
            statistics.median(r.ratio for r in small) if applies else None,
            TARGET_MEDIAN_SMALL,
            f"over {len(small)} cases" if applies else "smallest size is >= 1e6",
        )
    )
    overhead = [r for r in results if r.ratio is not None and r.size == OVERHEAD_SIZE]
    targets.append(
        Target(
            f"per-op overhead: median ratio at {size_label(OVERHEAD_SIZE)}",
            statistics.median(r.ratio for r in overhead) if overhead else None,
            TARGET_OVERHEAD,
            f"over {len(overhead)} cases" if overhead else "1e3 not measured",
        )
    )
    low, high = MLP_STEP_SIZES
    steps = [
        r for r in results if r.op == "mlp_step" and r.ratio is not None and low <= r.size <= high
    ]
    worst_step = max(steps, key=lambda r: r.ratio or 0.0) if steps else None
    targets.append(
        Target(
            f"MLP train step: max ratio at {size_label(low)}-{size_label(high)}",
            worst_step.ratio if worst_step else None,
            TARGET_MLP_STEP,
            (
                ", ".join(f"{size_label(r.size)}: {r.ratio:.2f}" for r in steps)
                if steps
                else "mlp_step not measured at 1e3-1e4"
            ),
        )
    )
    return targets


def format_us(seconds_us: float | None) -> str:
    """Microseconds, with a precision that suits their size."""
    if seconds_us is None:
        return "-"
    if seconds_us < 100:
        return f"{seconds_us:.2f}"
    if seconds_us < 10_000:
        return f"{seconds_us:.0f}"
    return f"{seconds_us / 1000:.1f}k"


def markdown_tables(results: Sequence[Result], ops: Sequence[str], sizes: Sequence[int]) -> str:
    """The ratio table, the per-call times table and the shapes table, in Markdown."""
    by_key = {(r.op, r.size): r for r in results}
    header = "| op | " + " | ".join(size_label(s) for s in sizes) + " |"
    rule = "| --- |" + " ---: |" * len(sizes)
    lines = [
        "ratio neuron_time / cpu_time (median over interleaved rounds; < 1: neuron faster)",
        "",
    ]
    lines += [header, rule]
    for op in ops:
        cells = []
        for size in sizes:
            r = by_key.get((op, size))
            if r is None or r.ratio is None:
                cells.append("error")
            else:
                busy = r.others_cpu is not None and r.others_cpu > BUSY_SHARE
                cells.append(f"{r.ratio:.2f}{'*' if busy else ''}")
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    if any(r.others_cpu is not None and r.others_cpu > BUSY_SHARE for r in results):
        lines += [
            "",
            f"\\* other processes used more than {BUSY_SHARE:.0%} of the CPUs while this case "
            "ran: a noisy measurement, rerun on an idle machine to confirm",
        ]
    lines += [
        "",
        "per-call time of the fastest block in microseconds, cpu / neuron (k = thousands)",
        "",
    ]
    lines += [header, rule]
    for op in ops:
        cells = []
        for size in sizes:
            r = by_key.get((op, size))
            if r is None or r.ratio is None:
                cells.append("error")
            else:
                cells.append(f"{format_us(r.cpu_best_us)} / {format_us(r.device_best_us)}")
        lines.append(f"| {op} | " + " | ".join(cells) + " |")
    faulting = [
        r
        for r in results
        if r.cpu_faults is not None
        and r.device_faults is not None
        and max(r.cpu_faults, r.device_faults) >= 1
    ]
    if faulting:
        title = (
            "minor page faults per call, where either device has >= 1 (memory freshly mapped "
            "for each large allocation, which the OS zeroes page by page)"
        )
        lines += ["", title, "", "| op | size | cpu | neuron |", "| --- | --- | ---: | ---: |"]
        for r in faulting:
            lines.append(
                f"| {r.op} | {size_label(r.size)} | {r.cpu_faults:.0f} | {r.device_faults:.0f} |"
            )
    lines += ["", "shapes (input elements)", "", "| op | size | shape | input elements |"]
    lines.append("| --- | --- | --- | ---: |")
    for op in ops:
        for size in sizes:
            r = by_key.get((op, size))
            if r is not None:
                lines.append(f"| {op} | {size_label(size)} | {r.shape} | {r.input_numel} |")
    return "\n".join(lines)


def machine_info(device: torch.device) -> dict[str, object]:
    """Where and when the run happened."""
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    return {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "machine": platform.machine(),
        "processor": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "device": str(device),
        "loadavg_start": load,
    }


def _cpu_model() -> str:
    """The CPU's model name (Linux), else platform.processor()."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


# ---- main ----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(
        description="Time the same ops on the CPU and on neuron, interleaved, and print "
        "neuron_time / cpu_time per op and size with the issue's targets.",
    )
    parser.add_argument(
        "--sizes",
        type=parse_sizes,
        default=None,
        help="comma-separated input sizes in elements, e.g. 1e3,1e6 "
        "(default: 1e3,1e4,1e5,1e6,1e7; with --quick: 1e3,1e6)",
    )
    parser.add_argument(
        "--ops",
        type=parse_ops,
        default=list(OPS),
        help=f"comma-separated ops (default: all: {','.join(OPS)})",
    )
    parser.add_argument(
        "--quick", action="store_true", help="fewer sizes (1e3,1e6), rounds and shorter blocks"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the results as JSON to PATH")
    parser.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if a target is missed or an op fails (default: always exit 0)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch.set_num_threads for both devices (default: torch's default, untouched)",
    )
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="wall: elapsed time (default); cpu: the process's CPU time, all threads: robust "
        "on a loaded machine (preemption is not counted), blind to time spent waiting "
        "(e.g. for another thread)",
    )
    parser.add_argument(
        "--device",
        default="neuron",
        help="the device compared with the CPU (default: neuron; 'cpu' gives an A/A run)",
    )
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the benchmark; returns the process exit status."""
    args = parse_args(argv)
    sizes: list[int] = args.sizes or list(QUICK_SIZES if args.quick else DEFAULT_SIZES)
    ops: list[str] = args.ops
    settings = QUICK_SETTINGS if args.quick else FULL_SETTINGS
    global _clock
    _clock = CLOCKS[args.clock]
    device = torch.device(args.device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if device.type != "cpu" and device.type != torch._C._get_privateuse1_backend_name():
        module = getattr(torch, device.type, None)
        if module is None or not module.is_available():
            print(f"error: device {device} is not available", file=sys.stderr)
            return 2
    torch.empty(1, device=device)  # initialize the device before any timing

    info = machine_info(device)
    print(
        f"# {device.type} vs cpu: {info['date']}, {info['processor']}, "
        f"{info['cpu_count']} CPUs, torch {info['torch']} ({info['torch_threads']} threads), "
        f"load average {info['loadavg_start']}, {args.clock} clock",
        flush=True,
    )
    results: list[Result] = []
    run_load = OtherLoad()
    wall_start = time.perf_counter()
    for size in sizes:
        for op in ops:
            case = build_case(op, size)
            result = measure(case, device, settings)
            results.append(result)
            if result.error is not None:
                line = f"error: {result.error}"
            else:
                line = (
                    f"ratio {result.ratio:5.2f} [{result.ratio_q1:.2f}, {result.ratio_q3:.2f}]"
                    f" best {result.ratio_best:5.2f}  median cpu {format_us(result.cpu_us):>7} us"
                    f"  {device.type} {format_us(result.device_us):>7} us  ({result.rounds} "
                    f"rounds x {result.calls_per_block} calls)"
                )
                if result.others_cpu is not None:
                    line += f"  others {result.others_cpu:.0%}"
                if result.cpu_faults is not None and result.device_faults is not None:
                    line += f"  faults/call {result.cpu_faults:.0f} / {result.device_faults:.0f}"
                if result.max_abs_diff is not None and result.max_abs_diff > 1e-3:
                    line += f"  WARNING: results differ by {result.max_abs_diff:.3g}"
            print(f"  {op:>8} @ {size_label(size):>4}: {line}", file=sys.stderr, flush=True)
            del case
            gc.collect()
    elapsed = time.perf_counter() - wall_start
    others = run_load.share()

    print()
    print(markdown_tables(results, ops, sizes))
    print()
    targets = evaluate(results, sizes)
    print("summary")
    print()
    print("| target | measured | limit | status |")
    print("| --- | ---: | ---: | --- |")
    for target in targets:
        value = "-" if target.value is None else f"{target.value:.2f}"
        print(
            f"| {target.name} ({target.detail}) | {value} | <= {target.limit} | {target.status} |"
        )
    failed = [r for r in results if r.error is not None]
    for r in failed:
        print(f"\nERROR {r.op} @ {size_label(r.size)}: {r.error}")
    load_end = os.getloadavg() if hasattr(os, "getloadavg") else None
    print(f"\n{len(results)} cases in {elapsed:.0f} s; load average at the end {load_end}")
    if others is not None:
        print(f"other processes used {others:.0%} of the CPUs during the run", end="")
        print(": the numbers are noisy, rerun on an idle machine" if others > BUSY_SHARE else "")

    if args.json:
        payload = {
            "machine": info | {"loadavg_end": load_end, "elapsed_s": elapsed, "others_cpu": others},
            "settings": asdict(settings),
            "sizes": sizes,
            "ops": ops,
            "results": [asdict(r) for r in results],
            "targets": [asdict(t) | {"status": t.status} for t in targets],
        }
        with open(args.json, "w", encoding="utf-8") as out:
            json.dump(payload, out, indent=2)
            out.write("\n")
    missed = any(t.status == "MISS" for t in targets) or bool(failed)
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
