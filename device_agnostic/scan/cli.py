"""``da-scan``: find CUDA assumptions in Python code.

Exit status (as ruff): 0 clean; 1 findings (syntax errors and undecodable files count as
findings); 2 usage or configuration errors, or inputs that could not be read (the scan of the
rest still runs and is reported). With --fix: 0 when nothing is left, 1 when findings remain,
2 when a file could not be rewritten (left untouched, reason on stderr). With --diff: 1 when
--fix would change something.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence

from . import __version__
from .config import Config, ConfigError, load_config, parse_size, unknown_rule_ids
from .discover import discover
from .engine import INPUT_DIAGNOSTICS
from .explain import main as explain_main
from .fix import FixRun, Keep, fix_findings, unified_diff
from .parallel import scan_files
from .report import FORMATS, write
from .rules import ALL_RULES
from .rules.cuda_api import mocked_names, review_mocked
from .versions import limit, parse_version


def _csv(value: str) -> list[str]:
    return [part.strip() for part in value.split(",") if part.strip()]


def _reported(rule_id: str, config: Config) -> bool:
    """Rule findings follow select/ignore. Input diagnostics (DA9xx) are hidden only by an ignore
    entry that names them ("DA9", "DA901"): selecting rules must not hide an unscanned file."""
    if rule_id in INPUT_DIAGNOSTICS:
        return not any(
            rule_id.startswith(p.upper()) and p.upper().startswith("DA9") for p in config.ignore
        )
    return config.enabled(rule_id)


def build_parser() -> argparse.ArgumentParser:
    rules = "\n".join(f"  {r.id}  {r.summary} [{r.fix_safety}]" for r in ALL_RULES)
    inputs = "\n".join(f"  {k}  {v}" for k, v in INPUT_DIAGNOSTICS.items())
    parser = argparse.ArgumentParser(
        prog="da-scan",
        description="Find code that assumes CUDA and print the device-generic replacement.",
        epilog=f"rules:\n{rules}\ninputs:\n{inputs}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"da-scan {__version__}")
    parser.add_argument("paths", nargs="*", default=["."], metavar="PATH")
    parser.add_argument("--format", choices=FORMATS, default="text")
    parser.add_argument("--select", type=_csv, help="comma-separated ids or prefixes")
    parser.add_argument("--ignore", type=_csv, default=[], help="comma-separated ids or prefixes")
    parser.add_argument("--exclude", type=_csv, default=[], help="comma-separated glob patterns")
    parser.add_argument(
        "--torch-version",
        metavar="X.Y",
        help="the oldest torch the code supports: rewrites that need a newer one are not offered",
    )
    parser.add_argument(
        "--max-file-size",
        metavar="BYTES",
        help="skip (DA905) files larger than this, such as 2M; 0: no limit (default 2M)",
    )
    parser.add_argument(
        "--max-line-length",
        metavar="BYTES",
        help="skip (DA905) files with a longer line (generated data); 0: no limit (default 20000)",
    )
    parser.add_argument("--jobs", "-j", type=int, default=0, help="processes (default: cores)")
    parser.add_argument("--output", "-o", help="write the report to this file")
    parser.add_argument("--fix", action="store_true", help="apply the safe rewrites in place")
    parser.add_argument(
        "--unsafe-fixes", action="store_true", help="with --fix/--diff, apply review rewrites too"
    )
    parser.add_argument(
        "--diff", action="store_true", help="print what --fix would change; write nothing"
    )
    parser.add_argument(
        "--explain",
        metavar="ID",
        action="append",
        help="print a rule's documentation (why it matters, fix safety, before/after) and exit",
    )
    return parser


def _report_fix_failures(run: FixRun) -> None:
    for result in run.failed:
        print(f"da-scan: {result.path}: {result.error}", file=sys.stderr)


def _diff(run: FixRun, unsafe: bool) -> int:
    """--diff: the diffs on stdout, the count on stderr; exit 1 if anything would change (as
    ruff), 2 if a file could not be fixed."""
    for result in run.results:
        if result.changed:
            sys.stdout.write(unified_diff(result))
    _report_fix_failures(run)
    print(run.summary(unsafe, write=False), file=sys.stderr)
    if run.failed:
        return 2
    return 1 if run.files else 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.explain:
        return explain_main(args.explain)
    try:
        config = load_config(args.paths[0])
    except ConfigError as exc:
        print(f"da-scan: {exc}", file=sys.stderr)
        return 2
    for option, entries in (("--select", args.select), ("--ignore", args.ignore)):
        error = unknown_rule_ids(entries or [], option)
        if error:
            print(f"da-scan: {error}", file=sys.stderr)
            return 2
    if args.select is not None:
        config.select = args.select
    config.ignore += args.ignore
    config.exclude += args.exclude
    if args.torch_version is not None:
        try:
            config.torch_version = parse_version(args.torch_version)
        except ValueError as exc:
            print(f"da-scan: --{exc}", file=sys.stderr)
            return 2
    for option, value, field_name in (
        ("--max-file-size", args.max_file_size, "max_bytes"),
        ("--max-line-length", args.max_line_length, "max_line"),
    ):
        if value is not None:
            try:
                config.limits = dataclasses.replace(
                    config.limits, **{field_name: parse_size(value)}
                )
            except ValueError as exc:
                print(f"da-scan: {option}: {exc}", file=sys.stderr)
                return 2

    found = discover(args.paths, config.exclude)
    rule_ids = [rule.id for rule in config.rules()]
    findings = found.errors + scan_files(found.files, rule_ids, args.jobs, config.limits)
    # A torch.cuda function that a test in the scan mocks is review everywhere (the rewritten
    # code would no longer reach the mock): scan a project with its tests.
    mocked = mocked_names(findings)
    findings = review_mocked(findings, mocked)
    findings = limit([f for f in findings if _reported(f.rule, config)], config.torch_version)
    run = None
    if args.fix or args.diff:
        shown = {r.id for r in ALL_RULES} | set(INPUT_DIAGNOSTICS)
        keep = Keep(
            frozenset(i for i in shown if _reported(i, config)),
            config.torch_version,
            mocked,
            config.limits,
        )
        run = fix_findings(
            findings, config.rules(), args.unsafe_fixes, keep, not args.diff, args.jobs
        )
        if args.diff:
            return _diff(run, args.unsafe_fixes)
        _report_fix_failures(run)
        findings = run.findings
    if args.output:
        with open(args.output, "w", encoding="utf-8") as stream:
            write(findings, args.format, stream)
    else:
        write(findings, args.format, sys.stdout)
    if run is not None:
        # The report stays parseable: the summary joins it only in text on stdout.
        text_out = args.format == "text" and not args.output
        print(
            run.summary(args.unsafe_fixes, write=True), file=sys.stdout if text_out else sys.stderr
        )
        if run.failed:
            return 2
    if any(f.kind == "error" for f in findings):
        return 2
    return 1 if findings else 0


if __name__ == "__main__":
    raise SystemExit(main())
