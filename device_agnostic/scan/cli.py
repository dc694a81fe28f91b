"""``da-scan``: find CUDA assumptions in Python code.

Exit status (as ruff): 0 clean; 1 findings (syntax errors and undecodable files count as
findings); 2 usage or configuration errors, or inputs that could not be read (the scan of the
rest still runs and is reported).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .config import Config, ConfigError, load_config
from .discover import discover
from .engine import INPUT_DIAGNOSTICS
from .parallel import scan_files
from .report import FORMATS, write
from .rules import ALL_RULES


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
    parser.add_argument("paths", nargs="*", default=["."], metavar="PATH")
    parser.add_argument("--format", choices=FORMATS, default="text")
    parser.add_argument("--select", type=_csv, help="comma-separated ids or prefixes")
    parser.add_argument("--ignore", type=_csv, default=[], help="comma-separated ids or prefixes")
    parser.add_argument("--exclude", type=_csv, default=[], help="comma-separated glob patterns")
    parser.add_argument("--jobs", "-j", type=int, default=0, help="processes (default: cores)")
    parser.add_argument("--output", "-o", help="write the report to this file")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        config = load_config(args.paths[0])
    except ConfigError as exc:
        print(f"da-scan: {exc}", file=sys.stderr)
        return 2
    if args.select is not None:
        config.select = args.select
    config.ignore += args.ignore
    config.exclude += args.exclude

    found = discover(args.paths, config.exclude)
    rule_ids = [rule.id for rule in config.rules()]
    findings = found.errors + scan_files(found.files, rule_ids, args.jobs)
    findings = [f for f in findings if _reported(f.rule, config)]
    if args.output:
        with open(args.output, "w", encoding="utf-8") as stream:
            write(findings, args.format, stream)
    else:
        write(findings, args.format, sys.stdout)
    if any(f.kind == "error" for f in findings):
        return 2
    return 1 if findings else 0


if __name__ == "__main__":
    raise SystemExit(main())
