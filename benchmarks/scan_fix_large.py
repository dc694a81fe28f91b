"""How long ``da-scan --fix`` takes on one large generated file, and how much memory it needs.

    .venv/bin/python benchmarks/scan_fix_large.py                 # 5 MB, a finding every 40 lines
    .venv/bin/python benchmarks/scan_fix_large.py --every 1       # 5 MB, a finding on every line
    .venv/bin/python benchmarks/scan_fix_large.py --mb 1 --every 3 --json out.json
    .venv/bin/python benchmarks/scan_fix_large.py --whole-module  # as before issue 12

The file is module-level code: lines such as ``x12 = torch.randn(4, device="cuda")``,
``torch.cuda.synchronize()`` and ``y14 = x12.cuda()`` (all three safe fixes), one every
``--every`` lines, the rest plain arithmetic. It times ``fix_source`` (scan, rewrite, compile,
re-scan: everything ``--fix`` does for a file except the read and the write) in this process and
reports the wall and CPU time (on a shared machine the CPU time is the steadier figure) and the
peak resident memory it added.
"""

from __future__ import annotations

import argparse
import json
import resource
import sys
import time

from device_agnostic.scan import ALL_RULES
from device_agnostic.scan.engine import INPUT_DIAGNOSTICS, Limits
from device_agnostic.scan.fix import Keep, fix_source


def generate(size: int, every: int) -> bytes:
    """About ``size`` bytes of module-level code with a fixable finding every ``every`` lines."""
    lines = ["import torch", ""]
    total = 0
    i = 0
    while total < size:
        if i % every == 0:
            kind = (i // every) % 3
            if kind == 0:
                line = f'x{i} = torch.randn(4, device="cuda")'
            elif kind == 1:
                line = "torch.cuda.synchronize()"
            else:
                line = f"y{i} = x{i - 2 * every}.cuda()"
        else:
            line = f"z{i} = {i} * 3 + ({i} - 1) // 7"
        lines.append(line)
        total += len(line) + 1
        i += 1
    return ("\n".join(lines) + "\n").encode()


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kB on Linux


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=5.0, help="file size in MB (default 5)")
    parser.add_argument("--every", type=int, default=40, help="a finding every N lines")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument(
        "--whole-module",
        action="store_true",
        help="rewrite with one libcst tree of the whole module, as before issue 12",
    )
    args = parser.parse_args()
    if args.whole_module:
        from device_agnostic.scan import fix_apply

        fix_apply._apply_in_chunks = lambda *args, **kwargs: None  # its fallback is the old way
    data = generate(int(args.mb * 1_000_000), args.every)
    base = _rss_mb()
    start, cpu = time.perf_counter(), time.process_time()
    # No size limit: the point is to time a large file (da-scan skips one over 2 MiB unless
    # --max-file-size says otherwise).
    every_id = frozenset({rule.id for rule in ALL_RULES} | set(INPUT_DIAGNOSTICS))
    keep = Keep(every_id, limits=Limits(max_bytes=0, max_line=0))
    result = fix_source("large.py", data, ALL_RULES, unsafe=False, keep=keep)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    figures = {
        "bytes": len(data),
        "lines": data.count(b"\n"),
        "fixed": result.fixed,
        "remaining": len(result.remaining),
        "error": result.error,
        "seconds": round(seconds, 2),
        "cpu_seconds": round(cpu, 2),
        "peak_rss_added_mb": round(_rss_mb() - base, 1),
        "ms_per_finding": round(1000 * seconds / max(result.fixed, 1), 3),
        "whole_module": args.whole_module,
    }
    for key, value in figures.items():
        print(f"{key}: {value}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as stream:
            json.dump(figures, stream, indent=2)
    return 1 if result.error else 0


if __name__ == "__main__":
    sys.exit(main())
