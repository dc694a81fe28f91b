"""How long ``da-scan`` takes on a tree, against a single-process ``ast.parse`` of every file.

    .venv/bin/python benchmarks/scan_vs_ast.py [TREE]   # default: the installed torch/ package

The floor of any Python AST tool is parsing every file once; issue 5 asks that the whole scan
(discovery, rules, JSON report, all cores) take at most 2.5x that floor. Both are timed in one
run, scan first so that the parse does not benefit from a colder page cache.
"""

from __future__ import annotations

import argparse
import ast
import os
import subprocess
import sys
import sysconfig
import time

from device_agnostic.scan.discover import discover


def parse_all(files: list[str]) -> int:
    parsed = 0
    for path in files:
        try:
            with open(path, "rb") as handle:
                ast.parse(handle.read(), filename=path)
            parsed += 1
        except (SyntaxError, ValueError):
            pass
    return parsed


def main() -> int:
    default_tree = os.path.join(sysconfig.get_paths()["purelib"], "torch")
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree", nargs="?", default=default_tree)
    args = parser.parse_args()
    files = discover([args.tree]).files

    start = time.perf_counter()
    scan = subprocess.run(
        [sys.executable, "-m", "device_agnostic.scan", args.tree, "--format", "json"],
        stdout=subprocess.DEVNULL,
        check=False,
    )
    scan_s = time.perf_counter() - start
    if scan.returncode not in (0, 1):
        print(f"da-scan failed with exit status {scan.returncode}", file=sys.stderr)
        return 1

    start = time.perf_counter()
    parsed = parse_all(files)
    parse_s = time.perf_counter() - start

    print(f"tree: {args.tree} ({len(files)} files, {parsed} parse)")
    print(f"cores: {len(os.sched_getaffinity(0))}")
    print(f"da-scan --format json: {scan_s:.2f} s")
    print(f"ast.parse, one process: {parse_s:.2f} s")
    print(f"ratio: {scan_s / parse_s:.2f}x (target <= 2.5x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
