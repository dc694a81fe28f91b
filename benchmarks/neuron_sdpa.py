"""F.scaled_dot_product_attention on neuron vs the CPU, at a few sequence lengths, in one run.

Neuron takes the CPU's flash-attention kernel wherever the CPU does (csrc/NeuronAttention.cpp), so
the neuron/CPU ratio measures the backend's overhead around one fused kernel. For comparison the
script also times neuron forced onto the math path (``sdpa_kernel(SDPBackend.MATH)``), which is
what every SDPA call on neuron ran before the backend registered its choice function.

Method: causal self-attention (batch 2, 8 heads, head dim 64, float32), forward and backward of
``out.sum()``; devices interleaved round by round (cpu, neuron, neuron-math; then reversed), the
reported time is each device's median per-call time over the rounds, the ratio the median of
the per-round ratios.

Usage:
    .venv/bin/python benchmarks/neuron_sdpa.py                     # lengths 128, 512, 1024
    .venv/bin/python benchmarks/neuron_sdpa.py --lengths 256 --rounds 5
    .venv/bin/python benchmarks/neuron_sdpa.py --clock cpu --threads 1   # on a loaded machine
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def make_step(device: str, length: int, math_only: bool) -> Callable[[], None]:
    generator = torch.Generator().manual_seed(length)
    q, k, v = (
        torch.randn(2, 8, length, 64, generator=generator).to(device).requires_grad_()
        for _ in range(3)
    )

    def step() -> None:
        if math_only:
            with sdpa_kernel(SDPBackend.MATH):
                out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.sum().backward()
        if device != "cpu":
            torch.accelerator.synchronize()

    return step


CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}
clock = time.perf_counter


def per_call(step: Callable[[], None], calls: int) -> float:
    start = clock()
    for _ in range(calls):
        step()
    return (clock() - start) / calls


def measure(length: int, rounds: int) -> dict[str, float]:
    steps = {
        "cpu": make_step("cpu", length, math_only=False),
        "neuron": make_step("neuron", length, math_only=False),
        "neuron-math": make_step("neuron", length, math_only=True),
    }
    for step in steps.values():
        step()  # warm up
    single = per_call(steps["cpu"], 1)
    calls = max(1, int(0.2 / max(single, 1e-6)))
    times: dict[str, list[float]] = {name: [] for name in steps}
    order = list(steps)
    gc.disable()
    try:
        for round_index in range(rounds):
            for name in order if round_index % 2 == 0 else reversed(order):
                times[name].append(per_call(steps[name], calls))
    finally:
        gc.enable()
    result = {name: statistics.median(values) for name, values in times.items()}
    result["ratio"] = statistics.median(
        n / c for n, c in zip(times["neuron"], times["cpu"], strict=True)
    )
    result["math_ratio"] = statistics.median(
        n / c for n, c in zip(times["neuron-math"], times["cpu"], strict=True)
    )
    return result


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="128,512,1024", help="comma-separated lengths")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds per length")
    parser.add_argument(
        "--clock",
        choices=sorted(CLOCKS),
        default="wall",
        help="wall: elapsed time; cpu: the process's CPU time (robust on a loaded machine)",
    )
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    args = parser.parse_args(argv)
    global clock
    clock = CLOCKS[args.clock]
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    print(
        "| length | cpu ms | neuron ms | neuron/cpu | neuron math path ms | math/cpu |\n"
        "| ---: | ---: | ---: | ---: | ---: | ---: |"
    )
    for length in (int(x) for x in args.lengths.split(",")):
        r = measure(length, args.rounds)
        print(
            f"| {length} | {r['cpu'] * 1e3:.2f} | {r['neuron'] * 1e3:.2f} | {r['ratio']:.2f} "
            f"| {r['neuron-math'] * 1e3:.2f} | {r['math_ratio']:.2f} |"
        )
    print(
        f"forward+backward of causal SDPA, batch 2, 8 heads, head dim 64, float32; "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads, {args.clock} clock"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
