"""da-scan against TorchFix 0.7 and against a single-process ``ast.parse``, in one run.

    .venv/bin/python benchmarks/scan_vs_torchfix.py               # the whole torch/ tree (~25 min)
    .venv/bin/python benchmarks/scan_vs_torchfix.py --sample 50   # every 50th file, ~30 s
    .venv/bin/python benchmarks/scan_vs_torchfix.py --json out.json [--torchfix PATH] [TREE]

Issue 5 asks, on the wheel's whole torch/ tree, that da-scan be at least 20x faster than
TorchFix (``torchfix .``, its default rules) and take at most 2.5x the wall time of parsing
every file once in one process (the floor of any AST tool). Timing all three in one run on the
same files is what makes the ratios mean something on a shared machine: a separate run of each
would compare different loads.

All three get the same input: the tree's ``.py`` files copied to a temporary directory (TorchFix
reads ``.py`` only, so the ``.pyi`` stubs that da-scan would also scan are left out; the copy
also keeps the repository's pyproject.toml out of da-scan's configuration lookup). TorchFix
runs from its own virtual environment (``benchmarks/requirements-torchfix.txt``, default
``.bench-venv/``) so it is never installed next to the project; it only parses files with
libcst and never imports torch.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_TORCHFIX = ROOT / ".bench-venv" / "bin" / "torchfix"
SCAN_TARGET = 2.5  # at most this multiple of the single-process ast.parse
TORCHFIX_TARGET = 20.0  # TorchFix must take at least this multiple of da-scan


@dataclass
class Timing:
    """One tool's run: wall time, exit status and what it said it did."""

    seconds: float
    returncode: int
    detail: str = ""
    cpu_seconds: float = 0.0  # user + system of the tool and every process it waited for


def python_files(tree: Path, sample: int) -> list[Path]:
    """The ``.py`` files under ``tree``, relative and sorted; every ``sample``-th when > 1.

    Sorting before sampling makes the sample deterministic, so two runs time the same files.
    """
    found = sorted(
        path.relative_to(tree)
        for path in tree.rglob("*.py")
        if path.is_file() and "__pycache__" not in path.parts
    )
    return found[::sample] if sample > 1 else found


def copy_tree(tree: Path, files: list[Path], dest: Path) -> None:
    """Copy ``files`` (relative to ``tree``) under ``dest/<tree name>``, keeping the layout."""
    for rel in files:
        target = dest / tree.name / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(tree / rel, target)


def parse_all(paths: list[Path]) -> int:
    """Parse every file once with ``ast`` in this process; the number that parsed."""
    parsed = 0
    for path in paths:
        try:
            ast.parse(path.read_bytes(), filename=str(path))
            parsed += 1
        except (SyntaxError, ValueError):
            pass
    return parsed


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_scan(root: Path) -> Timing:
    """The real CLI (``python -m device_agnostic.scan``), JSON report, one process per core."""
    cpu, start = _children_cpu(), time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "device_agnostic.scan", ".", "--format", "json"],
        cwd=root,
        capture_output=True,
        check=False,
    )
    seconds = time.perf_counter() - start
    detail = f"stderr: {proc.stderr.decode(errors='replace').strip()[:300]}"
    if proc.returncode in (0, 1):
        detail = f"{len(json.loads(proc.stdout))} findings"
    return Timing(seconds, proc.returncode, detail, _children_cpu() - cpu)


def time_torchfix(torchfix: Path, root: Path, log: Path | None) -> Timing:
    """``torchfix .`` with its default rules and default jobs (one per core)."""
    cpu, start = _children_cpu(), time.perf_counter()
    proc = subprocess.run([str(torchfix), "."], cwd=root, capture_output=True, check=False)
    seconds = time.perf_counter() - start
    out = proc.stdout.decode(errors="replace")
    err = proc.stderr.decode(errors="replace")
    if log is not None:
        log.write_text(f"exit {proc.returncode}\n--- stdout\n{out}\n--- stderr\n{err}\n")
    violations = sum(1 for line in out.splitlines() if ": TOR" in line)
    last = err.strip().splitlines()[-3:] if err.strip() else []
    detail = f"{violations} violations; " + " | ".join(last)
    return Timing(seconds, proc.returncode, detail, _children_cpu() - cpu)


def main() -> int:
    default_tree = Path(sysconfig.get_paths()["purelib"]) / "torch"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree", nargs="?", type=Path, default=default_tree)
    parser.add_argument("--sample", type=int, default=1, help="every Nth file (default: all)")
    parser.add_argument("--torchfix", type=Path, default=DEFAULT_TORCHFIX)
    parser.add_argument("--json", type=Path, help="write the measurements here")
    parser.add_argument("--torchfix-log", type=Path, help="write TorchFix's output here")
    args = parser.parse_args()
    if not args.torchfix.exists():
        print(
            f"{args.torchfix} not found: python3 -m venv .bench-venv && "
            ".bench-venv/bin/pip install -r benchmarks/requirements-torchfix.txt",
            file=sys.stderr,
        )
        return 2

    tree = args.tree.resolve()
    files = python_files(tree, args.sample)
    with tempfile.TemporaryDirectory(prefix="scan-vs-torchfix-") as tmp:
        root = Path(tmp)
        copy_tree(tree, files, root)
        copied = [root / tree.name / rel for rel in files]
        # Order: da-scan, ast.parse, TorchFix. The copy is fresh, so the page cache is warm for
        # all three; TorchFix goes last because it is by far the longest.
        load_before = os.getloadavg()
        scan = time_scan(root)
        cpu, start = time.process_time(), time.perf_counter()
        parsed = parse_all(copied)
        parse = Timing(
            time.perf_counter() - start,
            0,
            f"{parsed} of {len(copied)} parse",
            time.process_time() - cpu,
        )
        load_mid = os.getloadavg()
        torchfix = time_torchfix(args.torchfix, root, args.torchfix_log)
        load_after = os.getloadavg()

    parse_ratio = scan.seconds / parse.seconds
    torchfix_ratio = torchfix.seconds / scan.seconds
    print(f"tree: {tree} ({len(files)} .py files, sample 1/{args.sample})")
    print(f"cores: {len(os.sched_getaffinity(0))}")
    # The load average (1 min) shows contention from other processes: on 2 cores, anything
    # well above 2 while a tool ran means it shared the CPUs, so compare the CPU times too.
    print(
        f"load average before / after the scans / after TorchFix: "
        f"{load_before[0]:.1f} / {load_mid[0]:.1f} / {load_after[0]:.1f}"
    )
    print(f"{'':24}{'wall':>10}{'cpu':>10}")
    for label, timing in (
        ("ast.parse, one process", parse),
        ("da-scan --format json", scan),
        ("torchfix . (defaults)", torchfix),
    ):
        print(
            f"{label:24}{timing.seconds:9.2f}s{timing.cpu_seconds:9.2f}s  "
            f"(exit {timing.returncode}; {timing.detail})"
        )
    print(f"da-scan / ast.parse: {parse_ratio:.2f}x wall (target <= {SCAN_TARGET}x)")
    print(
        f"torchfix / da-scan:  {torchfix_ratio:.1f}x wall (target >= {TORCHFIX_TARGET}x), "
        f"{torchfix.cpu_seconds / max(scan.cpu_seconds, 1e-9):.1f}x cpu"
    )
    ok = parse_ratio <= SCAN_TARGET and torchfix_ratio >= TORCHFIX_TARGET
    print("PASS" if ok else "MISS")
    if args.json:
        args.json.write_text(
            json.dumps(
                {
                    "tree": str(tree),
                    "files": len(files),
                    "sample": args.sample,
                    "cores": len(os.sched_getaffinity(0)),
                    "python": platform.python_version(),
                    "ast_parse": asdict(parse),
                    "da_scan": asdict(scan),
                    "torchfix": asdict(torchfix),
                    "da_scan_over_ast_parse": parse_ratio,
                    "torchfix_over_da_scan": torchfix_ratio,
                    "torchfix_over_da_scan_cpu": torchfix.cpu_seconds / max(scan.cpu_seconds, 1e-9),
                    "loadavg_1min": {
                        "before": load_before[0],
                        "after_scans": load_mid[0],
                        "after_torchfix": load_after[0],
                    },
                    "pass": ok,
                },
                indent=2,
            )
            + "\n"
        )
    return 0 if scan.returncode in (0, 1) else 1


if __name__ == "__main__":
    raise SystemExit(main())
