"""Measure ``da-scan --fix`` (safe fixes only) on a copy of any tree of Python files.

    .venv/bin/python -m tools.scan_measure PATH... [--json OUT] [--keep DIR]

Why this exists: the scanner's promise is that its safe fixes never make code worse, and the way
to check that promise on a real project is to fix a copy and look at what came out, without
trusting (or running) the project's code. For each PATH (a file or a folder), its ``.py`` files
are copied, and only those (no pyproject.toml: the default rules apply), then:

1. the copy is scanned (``da-scan --format json``): findings per rule, and how many are safe;
2. the copy is fixed (``da-scan --fix``, the real CLI next to this interpreter);
3. the result is read back: fixes applied (da-scan's own count), files rewritten (bytes changed),
   findings left per rule, the files da-scan refused to rewrite (with its reason), and every
   rewritten file that no longer compiles (this should be 0: a rewrite the fixer writes must
   still be Python). Files are only compiled, never run.

Exit status: 0 measured; 1 a rewritten file fails to compile or da-scan --fix crashed; 2 bad input.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

FIXED_SUMMARY = re.compile(r"Fixed (\d+) findings? in (\d+) files?")
REFUSED = re.compile(r"^da-scan: (?P<path>.+?\.py): (?P<reason>.+)$", re.MULTILINE)
SKIPPED_DIRS = frozenset({".git", ".hg", ".svn", ".tox", ".venv", "venv", "__pycache__"})


def da_scan_command() -> list[str]:
    """The installed ``da-scan`` next to this interpreter (.venv/bin), else the module."""
    script = Path(sys.executable).with_name("da-scan")
    if script.is_file():
        return [str(script)]
    return [sys.executable, "-m", "device_agnostic.scan"]


@dataclass
class ScanRun:
    """One ``da-scan`` process: its exit status, output and the findings it reported."""

    command: list[str]
    returncode: int
    stdout: str
    stderr: str
    findings: list[dict] = field(default_factory=list)
    error: str = ""  # why the run is unusable (a traceback, output that is not JSON)


def run_da_scan(args: Sequence[str], timeout: float = 600) -> ScanRun:
    """Run ``da-scan --format json ARGS`` and parse its report. Exit 0 and 1 are normal (clean,
    findings left); 2 still has a report (an input or a rewrite the tool refused)."""
    command = [*da_scan_command(), "--format", "json", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    run = ScanRun(command, done.returncode, done.stdout, done.stderr)
    if "Traceback (most recent call last)" in done.stderr:
        run.error = "da-scan crashed:\n" + done.stderr[-4000:]
        return run
    try:
        run.findings = json.loads(done.stdout)
    except json.JSONDecodeError:
        run.error = (
            f"da-scan (exit {done.returncode}) printed no JSON report:\n{done.stderr[-4000:]}"
        )
    return run


def fixes_applied(run: ScanRun) -> int | None:
    """da-scan's own count from its ``Fixed N findings in M files`` line (None if missing)."""
    match = FIXED_SUMMARY.search(run.stderr) or FIXED_SUMMARY.search(run.stdout)
    return int(match[1]) if match else None


def copy_python_files(source: Path, target: Path) -> list[Path]:
    """Copy the ``.py`` files of ``source`` (a file or a folder) under ``target``, keeping their
    relative paths; version-control and environment folders are left out. Returns the copies."""
    if source.is_file():
        target.mkdir(parents=True, exist_ok=True)
        return [Path(shutil.copy2(source, target / source.name))]
    copies = []
    for path in sorted(source.rglob("*.py")):
        relative = path.relative_to(source)
        if any(part in SKIPPED_DIRS for part in relative.parts[:-1]) or not path.is_file():
            continue
        destination = target / relative
        destination.parent.mkdir(parents=True, exist_ok=True)
        copies.append(Path(shutil.copy2(path, destination)))
    return copies


def compile_error(path: Path) -> str | None:
    """Why ``path`` does not compile (``None`` when it does). Compiling never runs the code."""
    try:
        compile(path.read_bytes(), str(path), "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


@dataclass
class Measurement:
    """What da-scan --fix did to a copy of the inputs."""

    inputs: list[str]
    files: int = 0
    findings_per_rule: dict[str, int] = field(default_factory=dict)
    safe_per_rule: dict[str, int] = field(default_factory=dict)
    fixes_applied: int | None = None
    files_rewritten: list[str] = field(default_factory=list)
    remaining_per_rule: dict[str, int] = field(default_factory=dict)
    broken_rewrites: dict[str, str] = field(default_factory=dict)  # path -> compile error
    refused_rewrites: dict[str, str] = field(default_factory=dict)  # path -> da-scan's reason
    fix_exit: int = 0
    fix_messages: str = ""  # da-scan's stderr (refused rewrites are named there)
    errors: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return asdict(self)


def _per_rule(findings: Sequence[dict], safe_only: bool = False) -> dict[str, int]:
    counts = Counter(
        f["rule"]
        for f in findings
        if f.get("kind", "finding") == "finding"
        and (not safe_only or f.get("fix_safety") == "safe")
    )
    return dict(sorted(counts.items()))


def measure(sources: Sequence[Path], workdir: Path, jobs: int = 0) -> Measurement:
    """Copy ``sources`` under ``workdir``, scan the copy, fix it (safe fixes) and compare."""
    result = Measurement([str(s) for s in sources])
    copies: list[Path] = []
    for index, source in enumerate(sources):
        copies += copy_python_files(source, workdir / f"{index}-{source.resolve().name}")
    result.files = len(copies)
    if not copies:
        result.errors.append("no .py files in the inputs")
        return result
    before = {path: path.read_bytes() for path in copies}
    compiled_before = {path for path in copies if compile_error(path) is None}

    job_args = ["--jobs", str(jobs)] if jobs else []
    scan = run_da_scan([*job_args, str(workdir)])
    if scan.error:
        result.errors.append(scan.error)
    result.findings_per_rule = _per_rule(scan.findings)
    result.safe_per_rule = _per_rule(scan.findings, safe_only=True)

    fix = run_da_scan(["--fix", *job_args, str(workdir)])
    result.fix_exit = fix.returncode
    result.fix_messages = fix.stderr[-4000:]
    if fix.error:
        result.errors.append(fix.error)
    result.fixes_applied = fixes_applied(fix)
    result.remaining_per_rule = _per_rule(fix.findings)
    for match in REFUSED.finditer(fix.stderr):
        path = Path(match["path"])
        shown = str(path.relative_to(workdir)) if path.is_relative_to(workdir) else str(path)
        result.refused_rewrites[shown] = match["reason"]
    for path in copies:
        if path.read_bytes() == before[path]:
            continue
        shown = str(path.relative_to(workdir))
        result.files_rewritten.append(shown)
        error = compile_error(path)
        if error is not None and path in compiled_before:
            result.broken_rewrites[shown] = error
    return result


def render(result: Measurement) -> str:
    rules = sorted({*result.findings_per_rule, *result.remaining_per_rule})
    lines = [
        f"inputs: {', '.join(result.inputs)}",
        f"files: {result.files}",
        "",
        "| rule | findings | safe | remaining after --fix |",
        "| --- | ---: | ---: | ---: |",
    ]
    for rule in rules:
        lines.append(
            f"| {rule} | {result.findings_per_rule.get(rule, 0)} | "
            f"{result.safe_per_rule.get(rule, 0)} | {result.remaining_per_rule.get(rule, 0)} |"
        )
    lines += [
        "",
        f"fixes applied: {'unknown' if result.fixes_applied is None else result.fixes_applied}",
        f"files rewritten: {len(result.files_rewritten)}",
        f"rewrites that fail to compile: {len(result.broken_rewrites)}",
    ]
    lines += [f"  {path}: {error}" for path, error in sorted(result.broken_rewrites.items())]
    lines.append(f"rewrites da-scan refused (file left as it was): {len(result.refused_rewrites)}")
    lines += [f"  {path}: {why}" for path, why in sorted(result.refused_rewrites.items())]
    if result.fix_exit not in (0, 1):
        lines.append(f"da-scan --fix exit {result.fix_exit}:\n{result.fix_messages.rstrip()}")
    lines += [f"error: {error}" for error in result.errors]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tools.scan_measure", description=__doc__.splitlines()[0]
    )
    parser.add_argument("paths", nargs="+", type=Path, metavar="PATH")
    parser.add_argument("--json", type=Path, help="write the measurement as JSON here")
    parser.add_argument("--keep", type=Path, help="fix the copy in this (new) folder and keep it")
    parser.add_argument("--jobs", "-j", type=int, default=0, help="da-scan processes")
    args = parser.parse_args(argv)
    missing = [str(p) for p in args.paths if not p.exists()]
    if missing:
        print(f"scan_measure: no such file or folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    if args.keep is not None and args.keep.exists() and any(args.keep.iterdir()):
        print(f"scan_measure: --keep {args.keep} is not empty", file=sys.stderr)
        return 2

    if args.keep is not None:
        args.keep.mkdir(parents=True, exist_ok=True)
        result = measure(args.paths, args.keep, args.jobs)
    else:
        with tempfile.TemporaryDirectory(prefix="scan_measure-") as tmp:
            result = measure(args.paths, Path(tmp), args.jobs)
    print(render(result), end="")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result.to_json(), indent=2) + "\n", encoding="utf-8")
    return 1 if result.broken_rewrites or result.errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
