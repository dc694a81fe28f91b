"""torch.compile on neuron vs on the CPU: run time and compile time ratios, measured in one run.

Both devices compile the same small graphs with inductor (device_agnostic/neuron/compile.py
generates the CPU's C++ kernels for neuron): "mlp", a two-layer MLP forward (256 -> 256 -> 256,
GELU, batch 64) followed by a row-wise softmax, whose matmuls inductor leaves to each device's
eager mm (extern_kernels.mm); and "fused_only", the same graph without the matmuls, in which
only generated C++ kernels run. Compile time is the first call after ``torch._dynamo.reset()``
with inductor's caches disabled (otherwise the second device would reuse the first one's
compiled kernels), after one warm-up compile per device (one-time costs), taken alternately on
each device, best of ``--compiles``.
Run time: ``--rounds`` interleaved rounds of ``--calls`` compiled calls each on each device
(alternating which goes first); the run ratio is the median of the rounds' neuron/CPU ratios
(``run_ratio_of_fastest`` compares the fastest rounds, ``run_us``).
Prints one JSON line with both ratios (neuron / CPU).

Usage:
    .venv/bin/python benchmarks/neuron_compile.py [--rounds 20] [--calls 200] [--compiles 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch._dynamo
import torch._inductor.config


def graph(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return torch.softmax(torch.nn.functional.gelu(x @ w1) @ w2, dim=-1)


def fused_only(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    """The same graph without its matmuls: only inductor's generated C++ kernels run."""
    return torch.softmax(torch.nn.functional.gelu(x) * w1[:64] + w2[:64], dim=-1)


GRAPHS = {"mlp": graph, "fused_only": fused_only}


def inputs(device: str) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return tuple(
        t.to(device) for t in (torch.randn(64, 256), torch.randn(256, 256), torch.randn(256, 256))
    )


def compile_seconds(fn, device: str) -> float:
    torch._dynamo.reset()
    args = inputs(device)
    compiled = torch.compile(fn)
    start = time.perf_counter()
    out = compiled(*args)
    elapsed = time.perf_counter() - start
    assert out.device.type == device
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--compiles", type=int, default=3)
    args = parser.parse_args()
    devices = ("cpu", "neuron")

    # One-time costs (inductor's imports, the first C++ build) must not land on the first device.
    with torch._inductor.config.patch(force_disable_caches=True):
        for d in devices:
            torch._dynamo.reset()
            torch.compile(lambda x: x.cos() + 1)(torch.ones(3, device=d))
    results = {}
    for name, fn in GRAPHS.items():
        with torch._inductor.config.patch(force_disable_caches=True):
            compile_times = dict.fromkeys(devices, float("inf"))
            for _ in range(args.compiles):  # alternate, so that both see the same machine load
                for d in devices:
                    compile_times[d] = min(compile_times[d], compile_seconds(fn, d))

        torch._dynamo.reset()
        compiled = {d: torch.compile(fn) for d in devices}
        data = {d: inputs(d) for d in devices}
        for d in devices:
            torch.testing.assert_close(compiled[d](*data[d]).cpu(), fn(*data["cpu"]))
        best = dict.fromkeys(devices, float("inf"))
        round_ratios = []
        for index in range(args.rounds):
            # Alternate which device goes first, so that neither always follows the other.
            this_round = {}
            for d in devices if index % 2 == 0 else devices[::-1]:
                start = time.perf_counter()
                for _ in range(args.calls):
                    compiled[d](*data[d])
                this_round[d] = (time.perf_counter() - start) / args.calls
                best[d] = min(best[d], this_round[d])
            round_ratios.append(this_round["neuron"] / this_round["cpu"])
        results[name] = {
            "run_us": {d: round(best[d] * 1e6, 1) for d in devices},
            # The median of the rounds' ratios: a round's two devices share the machine's load.
            "run_ratio_neuron_over_cpu": round(statistics.median(round_ratios), 3),
            "run_ratio_of_fastest": round(best["neuron"] / best["cpu"], 3),
            "compile_s": {d: round(compile_times[d], 2) for d in devices},
            "compile_ratio_neuron_over_cpu": round(
                compile_times["neuron"] / compile_times["cpu"], 3
            ),
        }
    print(json.dumps(results))


if __name__ == "__main__":
    main()
