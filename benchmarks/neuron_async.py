"""Asynchronous mode (NEURON_LAUNCH_BLOCKING=0): do two streams' independent work overlap?

Each stream of the asynchronous mode runs its work on its own worker thread
(device_agnostic/neuron/csrc/NeuronAsync.cpp). This script gives two streams one chain each of
LINKS matmuls (SIZE x SIZE, float32) and measures, in interleaved rounds, the fastest of ROUNDS:

- ``a_s``, ``b_s``: one chain alone on stream A, on stream B;
- ``serial_s``: both chains on stream A, one after the other (the sum, in one stream);
- ``both_s``: chain 1 on stream A and chain 2 on stream B, issued together.

and prints ``both/serial`` (about 0.5 when the streams overlap perfectly, 1.0 when they do not)
and ``both/longer`` (about 1.0 when they overlap perfectly, 2.0 when they do not). Each worker
must use one core (OMP_NUM_THREADS=1, set here before torch is imported unless given), or one
stream's matmul would already occupy every core and there would be nothing left to overlap.

On a machine shared with other jobs the wall-clock ratios depend on idle cores, so the overlap
is also measured from the work's own execution intervals: each chain is bracketed by timing
events, and ``overlap`` is the time both chains were executing divided by the shorter chain's
execution time (1.0: the shorter chain ran entirely while the other ran; 0.0: serialized). The
median over rounds is printed.

Finally ``issue`` compares how long the host takes to issue a chain (before any
synchronization) with how long the chain takes to run, in asynchronous mode; and ``small_ops``
runs a loop of small elementwise operators (1e3 elements) in a synchronous child and an
asynchronous child (the mode is read once per process), giving the per-operator cost of the
asynchronous path (a Meta-kernel call, an allocation and a queue hand-off per operator).

Usage:
    .venv/bin/python benchmarks/neuron_async.py [--rounds 7] [--links 8] [--size 512]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

# Both must be set before torch (and its OpenMP runtime) is loaded: the mode is read once per
# process, and a worker thread takes its OpenMP thread count from the environment.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("NEURON_LAUNCH_BLOCKING", "0")

import torch

SMALL_OPS_CHILD = """
import json, sys, time
import torch
x = torch.randn(1000, device="neuron")
y = torch.randn(1000, device="neuron")
def loop(n):
    z = x
    start = time.perf_counter()
    for _ in range(n):
        z = z * 0.5 + y
    torch.accelerator.synchronize()
    return (time.perf_counter() - start) / (2 * n)
loop(200)
print(json.dumps({"per_op_s": min(loop(int(sys.argv[1])) for _ in range(int(sys.argv[2])))}))
"""


def small_ops(blocking: str, ops: int, rounds: int) -> float:
    env = dict(os.environ, NEURON_LAUNCH_BLOCKING=blocking)
    completed = subprocess.run(
        [sys.executable, "-c", SMALL_OPS_CHILD, str(ops), str(rounds)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    )
    return json.loads(completed.stdout.strip().splitlines()[-1])["per_op_s"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--links", type=int, default=8)
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--small-ops", type=int, default=2000, help="operators per small-op round")
    args = parser.parse_args()
    if os.environ["NEURON_LAUNCH_BLOCKING"] != "0":
        parser.error("this benchmark measures the asynchronous mode: unset NEURON_LAUNCH_BLOCKING")

    device = "neuron"
    torch.manual_seed(0)
    x = torch.randn(args.size, args.size).to(device)
    w = (torch.randn(args.size, args.size) / args.size**0.5).to(device)
    stream_a = torch.Stream(device=device)
    stream_b = torch.Stream(device=device)

    def chain() -> torch.Tensor:
        y = x
        for _ in range(args.links):
            y = y @ w
        return y

    def timed(plan: list[torch.Stream]) -> tuple[float, list[tuple[torch.Event, torch.Event]]]:
        """Run one chain per entry of ``plan`` on that stream; wall time and each chain's events."""
        torch.accelerator.synchronize()
        marks = []
        start = time.perf_counter()
        for stream in plan:
            with stream:
                begin, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
                begin.record()
                chain()
                end.record()
                marks.append((begin, end))
        torch.accelerator.synchronize()
        return time.perf_counter() - start, marks

    for plan in ([stream_a], [stream_b], [stream_a, stream_b]):  # warm up both workers
        timed(plan)
    results: dict[str, list[float]] = {"a": [], "b": [], "serial": [], "both": [], "overlap": []}
    issue, run = [], []
    for _ in range(args.rounds):
        results["a"].append(timed([stream_a])[0])
        results["b"].append(timed([stream_b])[0])
        results["serial"].append(timed([stream_a, stream_a])[0])
        seconds, ((begin1, end1), (begin2, end2)) = timed([stream_a, stream_b])
        results["both"].append(seconds)
        # Every time relative to chain 1's start (events on either stream share one clock).
        first = (0.0, begin1.elapsed_time(end1))
        second = (begin1.elapsed_time(begin2), begin1.elapsed_time(end2))
        shared = max(0.0, min(first[1], second[1]) - max(first[0], second[0]))
        shorter = min(first[1] - first[0], second[1] - second[0])
        results["overlap"].append(shared / shorter if shorter > 0 else 0.0)
        # Issue speed: the host's time to issue one chain against the chain's run time.
        torch.accelerator.synchronize()
        start = time.perf_counter()
        chain()
        issued = time.perf_counter() - start
        torch.accelerator.synchronize()
        issue.append(issued)
        run.append(time.perf_counter() - start)
    best = {k: min(v) for k, v in results.items() if k != "overlap"}
    longer = max(best["a"], best["b"])
    per_op_sync = min(small_ops("1", args.small_ops, args.rounds) for _ in range(2))
    per_op_async = min(small_ops("0", args.small_ops, args.rounds) for _ in range(2))
    print(
        json.dumps(
            {
                "rounds": args.rounds,
                "links": args.links,
                "size": args.size,
                "cpus": len(os.sched_getaffinity(0)),
                "load1": os.getloadavg()[0],
                "a_s": best["a"],
                "b_s": best["b"],
                "serial_s": best["serial"],
                "both_s": best["both"],
                "both/serial": best["both"] / best["serial"],
                "both/longer": best["both"] / longer,
                "overlap_median": statistics.median(results["overlap"]),
                "overlap_min": min(results["overlap"]),
                "issue_s": min(issue),
                "chain_run_s": min(run),
                "issue/run": min(issue) / min(run),
                "small_op_sync_us": per_op_sync * 1e6,
                "small_op_async_us": per_op_async * 1e6,
                "small_op_async/sync": per_op_async / per_op_sync,
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
