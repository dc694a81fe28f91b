"""The command line: ``scripts/patches {check,apply,status,revert} TARGET``.

Exit status: 0 done, 1 a patch conflicts, 2 bad input (version, dirty checkout, corrupted
patch, unusable target). On 1 and 2 the target is unchanged.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from tools.patchqueue.engine import plan_series
from tools.patchqueue.errors import PatchQueueError
from tools.patchqueue.gitqueue import apply_git, git_status, revert_git
from tools.patchqueue.overlay import apply_overlay, overlay_status, revert_overlay
from tools.patchqueue.series import Series, load_series
from tools.patchqueue.targets import GitCheckout, InstalledTorch, Target, open_target

DEFAULT_SERIES = Path(__file__).resolve().parents[2] / "patches"


def check(series: Series, target: Target) -> tuple[list[str], int]:
    """Dry-run the series on ``target``: one line per patch and 0, or 1 on any conflict."""
    if isinstance(target, InstalledTorch):
        target.check_base(series.base)
    plan = plan_series(series, target.read, target.scope)
    lines = [o.describe() for o in plan.outcomes]
    conflicts = sum(o.state == "conflicts" for o in plan.outcomes)
    lines.append(
        f"{len(series.patches)} patches: "
        f"{sum(o.state == 'applies' for o in plan.outcomes)} apply, "
        f"{sum(o.state == 'already applied' for o in plan.outcomes)} already applied, "
        f"{conflicts} conflict"
    )
    return lines, 1 if conflicts else 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="patches",
        description="Check, apply, inspect and revert the device-agnostic patch series on a "
        "PyTorch git checkout or an installed torch package. Exit status: 0 done, 1 a patch "
        "conflicts, 2 bad input; on 1 and 2 the target is unchanged.",
    )
    parser.add_argument(
        "--series",
        type=Path,
        default=DEFAULT_SERIES,
        help="folder holding the series file and the patches (default: %(default)s)",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    target_help = "a PyTorch git checkout, or an installed torch (…/site-packages/torch)"
    sub = commands.add_parser("check", help="dry-run the whole series; changes nothing")
    sub.add_argument("target", type=Path, help=target_help)
    sub = commands.add_parser("apply", help="apply the whole series, all or nothing")
    sub.add_argument("target", type=Path, help=target_help)
    sub.add_argument(
        "--branch", help="checkout: the new branch (default device-agnostic/<version>-<commit>)"
    )
    sub.add_argument(
        "--tests-dir",
        type=Path,
        help="installed torch: where the test/ files the series adds go "
        "(default: <site-packages>/.device_agnostic_patches/tests)",
    )
    sub = commands.add_parser("status", help="which patches are applied")
    sub.add_argument("target", type=Path, help=target_help)
    sub = commands.add_parser("revert", help="undo apply, byte for byte")
    sub.add_argument("target", type=Path, help=target_help)
    sub.add_argument(
        "--force",
        action="store_true",
        help="installed torch: restore even files changed since apply",
    )
    return parser


def run(argv: list[str]) -> tuple[list[str], int]:
    """Run one command; returns the lines to print and the exit status (raises on failure)."""
    args = _parser().parse_args(argv)
    target = open_target(args.target)
    if args.command == "revert":
        if isinstance(target, GitCheckout):
            return [revert_git(target)], 0
        return [revert_overlay(target, force=args.force)], 0
    series = load_series(args.series)
    if args.command == "check":
        return check(series, target)
    if args.command == "status":
        if isinstance(target, GitCheckout):
            return git_status(series, target), 0
        lines, _ = overlay_status(series, target)
        return lines, 0
    # apply
    if isinstance(target, GitCheckout):
        return [apply_git(series, target, args.branch)], 0
    result = apply_overlay(series, target, args.tests_dir)
    lines = [o.describe() for o in result.plan.outcomes] if result.plan else []
    lines += [f"test file: {path}" for path in result.tests]
    return [*lines, result.message], 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m tools.patchqueue``; returns the exit status."""
    try:
        lines, status = run(sys.argv[1:] if argv is None else argv)
    except PatchQueueError as exc:
        print(f"patches: error: {exc}", file=sys.stderr)
        return exc.exit_status
    print("\n".join(lines))
    return status
