"""The command line: ``scripts/patches {check,apply,status,revert,recover} TARGET`` and
``scripts/patches {verify [--json PATH],lint,shadow DIR,export,refresh} [--series DIR]``.

Exit status: 0 done, 1 a patch conflicts (verify: a patch is not proven), 2 bad input (version,
dirty checkout, corrupted patch, unusable target), 3 the target is busy (another command holds
its lock), 4 a write failed (full disk, read-only file: rolled back, or the message says what
``recover`` needs), 5 a git command was killed by a signal while the tool lived (rolled back as
for 4), 130 interrupted. On 1, 2 and 3 the target is unchanged.

Every command on a target holds the target's lock for its whole run and first recovers what a
killed command left (tools.patchqueue.overlay.recover_overlay, gitqueue.recover_git), saying so.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tools.patchqueue import lock
from tools.patchqueue.capture import capture, index_problems
from tools.patchqueue.engine import plan_series
from tools.patchqueue.errors import BadInput, PatchQueueError
from tools.patchqueue.gitqueue import apply_git, git_dir, git_status, recover_git, revert_git
from tools.patchqueue.lint import RUFF_CONFIG, lint_series
from tools.patchqueue.overlay import (
    apply_overlay,
    overlay_status,
    recover_overlay,
    revert_overlay,
)
from tools.patchqueue.series import Series, load_series
from tools.patchqueue.targets import GitCheckout, InstalledTorch, Target, open_target
from tools.patchqueue.verify import (
    DEFAULT_TIMEOUT,
    ensure_patched_shadow,
    installed_torch,
    verify_series,
)

DEFAULT_SERIES = Path(__file__).resolve().parents[2] / "patches"


def check(series: Series, target: Target) -> tuple[list[str], int]:
    """Dry-run the series on ``target``: one line per patch and 0, or 1 on any conflict."""
    notes = []
    if isinstance(target, InstalledTorch):
        target.check_base(series.base, force=True)
        if target.version()[1] is None:
            notes.append("note: version.py has no git_version; the commit is not checked")
    plan = plan_series(series, target.read, target.scope)
    lines = [o.describe() for o in plan.outcomes]
    conflicts = sum(o.state == "conflicts" for o in plan.outcomes)
    lines.append(
        f"{len(series.patches)} patches: "
        f"{sum(o.state == 'applies' for o in plan.outcomes)} apply, "
        f"{sum(o.state == 'already applied' for o in plan.outcomes)} already applied, "
        f"{conflicts} conflict"
    )
    return notes + lines, 1 if conflicts else 0


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="patches",
        description="Check, apply, inspect and revert the device-agnostic patch series on a "
        "PyTorch git checkout or an installed torch package. Exit status: 0 done, 1 a patch "
        "conflicts, 2 bad input, 3 the target is busy (another command holds it), 4 a write "
        "failed (rolled back, or the message says what recover needs), 5 a git command was "
        "killed by a signal (rolled back as for 4), 130 interrupted; on 1, "
        "2 and 3 the target is unchanged. Every command first recovers what a killed command "
        "left on the target.",
    )
    parser.add_argument(
        "--series",
        type=Path,
        default=DEFAULT_SERIES,
        help="folder holding the series file and the patches (default: %(default)s)",
    )
    parser.add_argument(
        "--lock-wait",
        type=float,
        default=lock.DEFAULT_WAIT,
        help="seconds to wait for another command holding the target (default: %(default)s)",
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
    sub.add_argument(
        "--force",
        action="store_true",
        help="installed torch: apply although version.py has no git_version to check",
    )
    sub = commands.add_parser(
        "capture",
        help="write the series applied in a checkout (by apply, then edited with git: rebase -i, "
        "commit --amend) back to the patch files, in their format with fresh index lines; "
        "refuses a branch that does not match the series",
    )
    sub.add_argument("target", type=Path, help="the PyTorch git checkout the series is applied in")
    sub = commands.add_parser("status", help="which patches are applied")
    sub.add_argument("target", type=Path, help=target_help)
    sub = commands.add_parser("revert", help="undo apply, byte for byte")
    sub.add_argument("target", type=Path, help=target_help)
    sub.add_argument(
        "--force",
        action="store_true",
        help="installed torch: restore even files changed since apply",
    )
    sub = commands.add_parser(
        "recover",
        help="finish what a killed or failed apply/revert left (every command does this first)",
    )
    sub.add_argument("target", type=Path, help=target_help)
    sub.add_argument(
        "--force",
        action="store_true",
        help="installed torch: roll back although files were changed since the interrupted apply",
    )
    sub = commands.add_parser(
        "verify",
        help="prove each patch: its tests fail on stock torch and pass with the series, on "
        "neuron and without it (a CI device or a named mock), and its files are lint clean; "
        "never modifies the installed torch",
    )
    sub.add_argument("--json", type=Path, help="also write the report as JSON to this file")
    sub.add_argument(
        "--series", type=Path, default=argparse.SUPPRESS, help="as --series before the command"
    )
    sub.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        help="seconds per test-file run (default: %(default)s)",
    )
    sub.add_argument(
        "--jobs", type=int, default=2, help="test-file runs at once (default: %(default)s)"
    )
    sub.add_argument(
        "--keep", type=Path, help="build the shadow torch in this (new) folder and keep it"
    )
    sub.add_argument(
        "--fresh",
        action="store_true",
        help="run each test file as `python FILE` in a new interpreter, as PyTorch's CI does "
        "(slower; by default each runs in a fork of an interpreter that imported torch)",
    )
    sub.add_argument(
        "--openreg",
        metavar="PYTHON",
        help="also run every patch's test files in the environment of PYTHON (one whose torch, "
        "the series' base, has PyTorch's OpenReg backend installed), stock and with the series: "
        "the column 'fails before on OpenReg' (a patch with an 'OpenReg: not applicable: <why>' "
        "trailer shows its reason instead)",
    )
    sub = commands.add_parser(
        "lint",
        help="check every file the series patches or adds with PyTorch's own PYFMT (usort, then "
        "ruff format) and ruff check settings; a new unformatted or over-long line counts also "
        "in a file upstream keeps unformatted; exit 1 on any finding (file:line and the fix)",
    )
    sub.add_argument(
        "--series", type=Path, default=argparse.SUPPRESS, help="as --series before the command"
    )
    sub.add_argument(
        "--pytorch",
        type=Path,
        help="also fold each patch's test into the suite its Upstream-Test names, as export "
        "does, in this PyTorch checkout, and lint the folded suites",
    )
    sub.add_argument("--base", help="with --pytorch: the commit of the suites (default: the base)")
    sub = commands.add_parser(
        "shadow",
        help="make (or bring up to date) a patched shadow of the installed torch in DIR; "
        "PYTHONPATH=DIR then imports torch with the series applied",
    )
    sub.add_argument("dir", type=Path, help="a new folder, or one this command made before")
    sub.add_argument(
        "--series", type=Path, default=argparse.SUPPRESS, help="as --series before the command"
    )
    _add_export_refresh(commands)
    return parser


def shadow(args: argparse.Namespace) -> tuple[list[str], int]:
    """Run shadow; one line saying where the patched torch is and whether it was rebuilt."""
    series = load_series(args.series)
    root, rebuilt = ensure_patched_shadow(series, installed_torch(), args.dir)
    state = "built" if rebuilt else "up to date"
    return [f"patched torch ({len(series.patches)} patches) {state}: PYTHONPATH={root}"], 0


def lint(args: argparse.Namespace) -> tuple[list[str], int]:
    """Run lint; one line per patch and file, and 0 when every file is clean, else 1."""
    series = load_series(args.series)
    torch = installed_torch()
    results = lint_series(series, torch)
    stale = index_problems(series, lambda p: torch.read(p) if p.startswith("torch/") else None)
    lines = list(stale)
    dirty = dirty_folds = 0
    for patch, files in results.items():
        for result in files:
            dirty += not result.clean
            lines.append(f"{patch}: {result.describe()}")
    if args.pytorch is not None:
        from tools.patchqueue.export import lint_folds

        folded = lint_folds(series, args.pytorch, args.base)
        dirty_folds = len(folded)
        lines += [f"folded suite: {f.describe()}" for f in folded]
        lines.append(f"folded suites: {len(folded)} findings")
    total = sum(len(files) for files in results.values())
    lines.append(
        f"{total - dirty}/{total} files clean with PyTorch's PYFMT (usort, ruff format) and "
        f"ruff check settings ({RUFF_CONFIG.name}); {len(stale)} stale index lines"
    )
    if dirty:
        lines.append(
            "fix a PYFMT finding in the checkout with `usort format FILE` then `ruff format "
            f"--config {RUFF_CONFIG} FILE` (usort with PyTorch's pyproject.toml), then "
            "capture the series again (docs/patch-queue.md)"
        )
    return lines, 1 if dirty or stale or dirty_folds else 0


def verify(args: argparse.Namespace) -> tuple[list[str], int]:
    """Run verify; the table, and 0 when every patch is proven, else 1."""
    series = load_series(args.series)
    report = verify_series(
        series,
        timeout=args.timeout,
        jobs=args.jobs,
        keep=args.keep,
        fresh=args.fresh,
        openreg=args.openreg,
    )
    lines = report.table()
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report.to_json(), indent=2) + "\n", encoding="utf-8")
        lines.append(f"report: {args.json}")
    return lines, 0 if report.all_proven else 1


def run(argv: list[str]) -> tuple[list[str], int]:
    """Run one command; returns the lines to print and the exit status (raises on failure)."""
    args = _parser().parse_args(argv)
    if args.command == "verify":
        return verify(args)
    if args.command == "shadow":
        return shadow(args)
    if args.command == "lint":
        return lint(args)
    if args.command in ("export", "refresh"):
        return _run_export_refresh(args)
    target = open_target(args.target)
    commands_with_series = ("check", "status", "apply", "capture")
    series = load_series(args.series) if args.command in commands_with_series else None
    where = target.root if isinstance(target, GitCheckout) else target.torch_dir
    held = git_dir(target.root) if isinstance(target, GitCheckout) else where
    with lock.hold(held, wait=args.lock_wait):
        force = args.command == "recover" and args.force
        if isinstance(target, GitCheckout):
            notes = recover_git(target, series or _series_if_readable(args.series))
        else:
            notes = recover_overlay(target, force=force)
        if args.command == "recover":
            return notes or [f"{where}: nothing was interrupted; nothing to recover"], 0
        lines, status = _target_command(args, series, target)
    return notes + lines, status


def _series_if_readable(directory: Path) -> Series | None:
    """The series, for recovery to recognise its own git am; None when it cannot be read."""
    try:
        return load_series(directory)
    except PatchQueueError:
        return None


def _target_command(
    args: argparse.Namespace, series: Series | None, target: Target
) -> tuple[list[str], int]:
    """check, status, apply or revert, under the target's lock, after recovery."""
    if args.command == "revert":
        if isinstance(target, GitCheckout):
            return [revert_git(target)], 0
        return [revert_overlay(target, force=args.force)], 0
    assert series is not None
    if args.command == "capture":
        if not isinstance(target, GitCheckout):
            raise BadInput(f"{target.torch_dir}: capture works on a git checkout only")
        return capture(series, target), 0
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
    result = apply_overlay(series, target, args.tests_dir, force=args.force)
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
    except KeyboardInterrupt:
        print("patches: interrupted", file=sys.stderr)
        return 130
    except OSError as exc:  # reading the target or the series; every write is handled inside
        print(f"patches: error: {exc}; the next command on the target recovers", file=sys.stderr)
        return 4
    print("\n".join(lines))
    return status


# --- export and refresh (tools/patchqueue/export.py, tools/patchqueue/refresh.py) -------------


def _add_export_refresh(commands: argparse._SubParsersAction) -> None:
    sub = commands.add_parser(
        "export",
        help="one branch per patch in a PyTorch checkout and one folder per patch with the draft "
        "PR's title, body, labels and commands; never pushes, never touches a network",
    )
    sub.add_argument("--pytorch", type=Path, required=True, help="a clean PyTorch git checkout")
    sub.add_argument("--out", type=Path, help="a new (or empty) folder (not with --abort)")
    sub.add_argument(
        "--abort",
        action="store_true",
        help="only remove what an interrupted export left in the checkout (its branches, "
        "temporary worktree and folders; every export does this first)",
    )
    sub.add_argument(
        "--stack",
        action="store_true",
        help="each branch on the previous one (default: each on the base, after checking that "
        "every patch applies alone)",
    )
    sub.add_argument(
        "--base",
        help="cut the branches from this commit or ref of the checkout (e.g. origin/main; "
        "default: the series' base); it must be on main, which the PRs are opened against",
    )
    sub.add_argument("--verify-json", type=Path, help="the JSON of `verify --json`, as evidence")
    sub.add_argument("--remote", default="origin", help="the remote in commands.sh (%(default)s)")
    sub.add_argument("--head-owner", help="your GitHub fork's owner, for gh's --head OWNER:BRANCH")
    sub.add_argument(
        "--author",
        help="'Full Name <email>' of the person the commits are authored by (default: git "
        "config user.name/user.email of the checkout); placeholders are refused",
    )
    sub.add_argument(
        "--series", type=Path, default=argparse.SUPPRESS, help="as --series before the command"
    )
    sub = commands.add_parser(
        "refresh",
        help="carry the series onto another PyTorch (checkout or installed torch): per patch "
        "applies / with offset / already upstream / conflicts; rewrites only if all apply",
    )
    sub.add_argument(
        "--onto",
        type=Path,
        required=True,
        help="a PyTorch git checkout, or an installed torch package folder of another version",
    )
    sub.add_argument(
        "--write",
        action="store_true",
        help="when every patch applies, rewrite the patch files and the series' base line",
    )
    sub.add_argument(
        "--series", type=Path, default=argparse.SUPPRESS, help="as --series before the command"
    )


def _run_export_refresh(args: argparse.Namespace) -> tuple[list[str], int]:
    from tools.patchqueue.export import export
    from tools.patchqueue.refresh import refresh, report

    if args.command == "export" and args.abort:
        from tools.patchqueue.export import recover_export

        return recover_export(args.pytorch) or [
            f"{args.pytorch}: no interrupted export; nothing to remove"
        ], 0
    if args.command == "export" and args.out is None:
        raise BadInput("export needs --out FOLDER (or --abort)")
    series = load_series(args.series)
    if args.command == "export":
        lines = export(
            series,
            args.pytorch,
            args.out,
            stack=args.stack,
            verify_json=args.verify_json,
            remote=args.remote,
            head_owner=args.head_owner,
            author=args.author,
            base=args.base,
        )
        return lines, 0
    result = refresh(series, args.onto, write=args.write)
    return report(series, args.onto, result, args.write), 0 if result.clean else 1
