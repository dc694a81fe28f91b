"""What the profiler costs on neuron: profiled / unprofiled time, measured in one run.

Both profiler paths time every operator on the device through the backend's kineto child
profiler (device_agnostic/neuron/csrc/NeuronKinetoPlugin.cpp: two events of the backend's own
per operator): the legacy torch.autograd.profiler.profile(use_device="neuron") and
torch.profiler.profile(activities=[CPU, PrivateUse1]). This script runs PASSES forward passes of
a small MLP (64 -> 64 -> 64, batch 8, no_grad) on neuron without a profiler and under each, in
interleaved rounds, and prints one JSON line: the fastest round of each kind (a round the
scheduler slowed down does not count), the ratios to the unprofiled time ("ratio": legacy,
"kineto_ratio") and the number of events the last legacy profile recorded (operators and their
device kernels). The profiler's enabling and its post-processing are outside the timed passes.

Usage:
    .venv/bin/python benchmarks/neuron_profiler.py [--rounds 10] [--passes 20]
"""

from __future__ import annotations

import argparse
import json
import time

import torch


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--passes", type=int, default=20)
    args = parser.parse_args()

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64)
    ).to("neuron")
    x = torch.randn(8, 64, device="neuron")

    def passes() -> float:
        start = time.perf_counter()
        for _ in range(args.passes):
            model(x)
        return time.perf_counter() - start

    def profiled_passes() -> tuple[float, torch.autograd.profiler.profile]:
        with torch.autograd.profiler.profile(use_device="neuron") as prof:
            seconds = passes()
        return seconds, prof

    activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.PrivateUse1]

    def kineto_passes() -> float:
        with torch.profiler.profile(activities=activities):
            return passes()

    with torch.no_grad():
        passes(), profiled_passes(), kineto_passes()  # warm up all three
        unprofiled, profiled, kineto = [], [], []
        for _ in range(args.rounds):
            unprofiled.append(passes())
            seconds, prof = profiled_passes()
            profiled.append(seconds)
            kineto.append(kineto_passes())
        events = len(prof.function_events)
    best_unprofiled, best_profiled, best_kineto = min(unprofiled), min(profiled), min(kineto)
    print(
        json.dumps(
            {
                "passes": args.passes,
                "rounds": args.rounds,
                "unprofiled_s": best_unprofiled,
                "profiled_s": best_profiled,
                "kineto_profiled_s": best_kineto,
                "ratio": best_profiled / best_unprofiled,
                "kineto_ratio": best_kineto / best_unprofiled,
                "events": events,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
