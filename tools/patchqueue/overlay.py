"""Apply, inspect and revert the series on an installed torch package, byte-exactly, surviving
a kill or a power loss at any point.

Every patched file is computed in memory first; nothing is written unless the whole series
applies. The state directory next to the package is a write-ahead journal:

1. the original bytes (and modes) of every file to be changed, and ``state.json`` with state
   ``applying`` listing every file, test file and folder the apply will write, are written to
   ``<state>.new`` and then renamed to the state directory in one step (before that rename the
   target is untouched; a leftover ``.new`` is simply deleted);
2. the target's files are replaced one by one, each atomically (tools.patchqueue.fsops);
3. ``state.json`` becomes ``applied``.

revert marks the record ``reverting`` before it restores anything. A command killed anywhere
leaves a record that says what to do: :func:`recover_overlay`, which every command on the
target runs first, rolls an interrupted apply back and finishes an interrupted revert, so the
target ends byte-identical to stock (or stays fully applied when the kill came before a revert
started). A write that fails (full disk, read-only file) is rolled back the same way; if even
the rollback cannot write, the record is kept and ``scripts/patches recover`` finishes it once
the cause is fixed.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

from tools.patchqueue import fsops
from tools.patchqueue.engine import Plan, plan_series
from tools.patchqueue.errors import BadInput, Conflict, Interrupted, WriteFailed
from tools.patchqueue.series import Series
from tools.patchqueue.targets import InstalledTorch, refuse_links

STATE_FORMAT = 2


def _sha(data: bytes | None) -> str | None:
    return None if data is None else hashlib.sha256(data).hexdigest()


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


class RestoreIncomplete(Exception):
    """A restore that could not write everything back; the journal stays for ``recover``."""


@dataclass
class OverlayResult:
    """What apply did: the plan, the files changed and the test files written."""

    plan: Plan | None
    changed: list[str]
    tests: list[Path]
    message: str


def _staging_dir(target: InstalledTorch) -> Path:
    return target.state_dir.with_name(target.state_dir.name + ".new")


def _trash_dir(target: InstalledTorch) -> Path:
    return target.state_dir.with_name(target.state_dir.name + ".trash")


def read_journal(target: InstalledTorch) -> dict | None:
    """The record in the state directory, whatever its state; None when there is none."""
    state_dir = target.state_dir
    if state_dir.is_symlink():
        raise BadInput(f"{state_dir}: is a symbolic link; the patch tools' record never is")
    if not state_dir.exists():
        return None
    state_file = state_dir / "state.json"
    try:
        state = json.loads(state_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(
            f"{state_dir}: exists but its state.json is unreadable ({exc}); it was not written "
            "by this tool (whose record is always complete); move it aside after checking "
            "the files against its backups/"
        ) from exc
    if state.get("format") != STATE_FORMAT:
        raise BadInput(
            f"{state_file}: record format {state.get('format')!r}, this tool writes "
            f"{STATE_FORMAT}; revert with the version of the tool that applied it"
        )
    return state


def load_state(target: InstalledTorch) -> dict | None:
    """The record of the applied series, or None when nothing is applied.

    Raises BadInput for the record of an interrupted apply or revert (recover it first).
    """
    state = read_journal(target)
    if state is not None and state.get("state") != "applied":
        raise BadInput(
            f"{target.state_dir}: an interrupted {state.get('state')} (the process was killed "
            f"or a write failed); run: scripts/patches recover {target.torch_dir}"
        )
    return state


def series_record(series: Series) -> list[dict]:
    """How ``state.json`` names a series: each patch's file name and sha256, in order."""
    return [{"name": p.name, "sha256": p.sha256} for p in series.patches]


def apply_overlay(
    series: Series, target: InstalledTorch, tests_dir: Path | None, *, force: bool = False
) -> OverlayResult:
    """Overlay the whole series on ``target``, all or nothing.

    Raises BadInput (wrong version, unusable state, tests folder in the way, a link on the
    way), Conflict (a patch does not apply): in both cases nothing was written; WriteFailed or
    Interrupted: rolled back (the message says if the rollback needs ``recover``).
    """
    target.check_base(series.base, force=force)
    state = load_state(target)
    names = series_record(series)
    if state is not None:
        if state["series"] == names:
            return OverlayResult(None, [], [], "the series is already applied; nothing to do")
        raise BadInput(
            f"{target.torch_dir}: another series is applied ({len(state['series'])} patches, "
            f"recorded in {target.state_dir}); revert it first"
        )
    plan = plan_series(series, target.read, target.scope)
    if not plan.clean:
        bad = [o for o in plan.outcomes if o.state != "applies"]
        raise Conflict(
            "the series does not apply; nothing was changed:\n"
            + "\n".join(o.describe() for o in bad)
        )
    tests_dir = (Path(tests_dir) if tests_dir else target.state_dir / "tests").resolve()
    changed = {
        path: data
        for path, data in plan.files.items()
        if target.scope(path) == "target" and data != plan.original[path]
    }
    tests = {
        tests_dir / Path(path).relative_to("test"): data or b""
        for path, data in plan.files.items()
        if target.scope(path) == "tests" and data is not None
    }
    for path in changed:
        refuse_links(target.torch_dir, target.dest(path))
    for dest in tests:
        refuse_links(tests_dir, dest)
        if dest.exists():
            raise BadInput(f"{dest}: the tests folder already has this file; choose --tests-dir")
    journal = _journal(target, series, names, plan, changed, tests, tests_dir)
    _write_journal(target, journal, plan)
    _write_target(target, journal, changed, tests)
    message = f"applied {len(series.patches)} patches to {target.torch_dir}"
    return OverlayResult(plan, sorted(changed), sorted(tests), message)


def _missing_dirs(paths: list[Path]) -> list[str]:
    """Every folder that must be created to write ``paths``, outermost first."""
    created: list[str] = []
    for path in paths:
        missing = []
        folder = path.parent
        while not folder.exists() and not folder.is_symlink():
            missing.append(str(folder))
            folder = folder.parent
        created += [f for f in reversed(missing) if f not in created]
    return created


def _journal(
    target: InstalledTorch,
    series: Series,
    names: list[dict],
    plan: Plan,
    changed: dict[str, bytes | None],
    tests: dict[Path, bytes],
    tests_dir: Path,
) -> dict:
    """The record of everything the apply will write, before it writes anything."""
    files = []
    for path, new in changed.items():
        old = plan.original[path]
        files.append(
            {
                "path": path,
                "backup": None if old is None else str(Path("backups") / path),
                "mode": None if old is None else os.stat(target.dest(path)).st_mode & 0o7777,
                "sha256_before": _sha(old),
                "sha256_after": _sha(new),
            }
        )
    dests = [target.dest(path) for path in changed] + sorted(tests)
    return {
        "format": STATE_FORMAT,
        "state": "applying",
        "torch_dir": str(target.torch_dir),
        "base": {"version": series.base.version, "commit": series.base.commit},
        "series": names,
        "files": files,
        "tests_dir": str(tests_dir),
        "tests": [
            {"path": str(dest), "sha256": _sha(data)} for dest, data in sorted(tests.items())
        ],
        "created_dirs": [d for d in _missing_dirs(dests) if d != str(target.state_dir)],
    }


def _write_journal(target: InstalledTorch, journal: dict, plan: Plan) -> None:
    """Backups and the ``applying`` record, made whole in ``<state>.new``, then renamed into
    place: the commit point after which recovery knows everything it needs."""
    staging = _staging_dir(target)
    try:
        if staging.exists():  # a leftover of a kill before the commit point: never trusted
            fsops.remove_tree(staging)
        fsops.make_dir(staging)
        for entry in journal["files"]:
            if entry["backup"] is None:
                continue
            backup = staging / entry["backup"]
            for folder in _missing_dirs([backup]):
                fsops.make_dir(Path(folder))
            fsops.write_file(backup, plan.original[entry["path"]] or b"", 0o644)
        _write_state(staging, journal)
        fsops.rename(staging, target.state_dir)
    except OSError as exc:
        _remove_quietly(staging)
        raise WriteFailed(
            f"writing the backups to {staging} failed ({_why(exc)}); nothing was changed in "
            f"{target.torch_dir}"
        ) from exc
    except KeyboardInterrupt:
        _remove_quietly(staging)
        raise Interrupted(f"interrupted before any change to {target.torch_dir}") from None


def _write_target(
    target: InstalledTorch,
    journal: dict,
    changed: dict[str, bytes | None],
    tests: dict[Path, bytes],
) -> None:
    """The target's files, then the test files, then ``applied``; rolled back on any failure."""
    created = set(journal["created_dirs"])
    try:
        for entry in journal["files"]:
            dest = target.dest(entry["path"])
            new = changed[entry["path"]]
            if new is None:
                fsops.remove_file(dest)
                continue
            _make_parents(dest, created)
            fsops.write_file(dest, new, entry["mode"])
        for dest, data in sorted(tests.items()):
            _make_parents(dest, created)
            fsops.write_file(dest, data)
        journal["state"] = "applied"
        _write_state(target.state_dir, journal)
    except OSError as exc:
        raise WriteFailed(_rolled_back(target, journal, f"writing failed ({_why(exc)})")) from exc
    except KeyboardInterrupt:
        raise Interrupted(_rolled_back(target, journal, "interrupted")) from None


def _make_parents(dest: Path, planned: set[str]) -> None:
    for folder in _missing_dirs([dest]):
        if folder not in planned:  # pragma: no cover - the journal lists every one
            raise OSError(f"{folder}: not in the journal")
        fsops.make_dir(Path(folder))


def _rolled_back(target: InstalledTorch, journal: dict, what: str) -> str:
    """Roll an apply back after ``what``; the message for the user either way."""
    journal["state"] = "applying"
    try:
        notes = _restore(target, journal)
    except (OSError, RestoreIncomplete) as exc:
        return (
            f"{what}; rolling back failed too ({exc}); the journal in {target.state_dir} is "
            f"kept: fix the cause, then run: scripts/patches recover {target.torch_dir}"
        )
    return "; ".join([f"{what}; rolled back: {target.torch_dir} is as it was", *notes])


def _why(exc: OSError) -> str:
    where = f" ({exc.filename})" if exc.filename else ""
    return f"{exc.strerror or exc}{where}"


def _write_state(state_dir: Path, journal: dict) -> None:
    fsops.write_file(
        state_dir / "state.json", (json.dumps(journal, indent=2) + "\n").encode(), 0o644
    )


def _remove_quietly(folder: Path) -> None:
    try:
        fsops.remove_tree(folder)
    except OSError:
        pass


def _drop_temporary(dest: Path) -> None:
    tmp = fsops.temporary_name(dest)
    if tmp.is_symlink() or tmp.exists():
        fsops.remove_file(tmp)


def _strangers(target: InstalledTorch, journal: dict) -> list[str]:
    """The recorded files whose bytes are neither the original nor the patched ones."""
    return [
        entry["path"]
        for entry in journal["files"]
        if _sha(_read(target.dest(entry["path"])))
        not in (entry["sha256_before"], entry["sha256_after"])
    ]


def _restore(target: InstalledTorch, journal: dict) -> list[str]:
    """Bring back every original file, remove every file and folder the apply created, then the
    record. Idempotent: a kill in here is recovered by running it again.

    Raises RestoreIncomplete (record kept) when some write fails; returns notes on what was
    kept.
    """
    notes: list[str] = []
    state_dir = target.state_dir
    problems: list[str] = []
    for test in journal["tests"]:
        dest = Path(test["path"])
        try:
            _drop_temporary(dest)
            have = _read(dest) if not dest.is_symlink() else None
            if have is None:
                continue
            if _sha(have) == test["sha256"]:
                fsops.remove_file(dest)
            else:
                notes.append(f"kept {dest}: changed since apply")
        except OSError as exc:
            problems.append(f"{dest}: {_why(exc)}")
    for entry in journal["files"]:
        dest = target.dest(entry["path"])
        try:
            _drop_temporary(dest)
            if _sha(_read(dest)) == entry["sha256_before"]:
                continue  # never written, or already restored
            if entry["backup"] is None:
                fsops.remove_file(dest)
                continue
            original = (state_dir / entry["backup"]).read_bytes()
            if _sha(original) != entry["sha256_before"]:
                problems.append(f"{dest}: its backup {state_dir / entry['backup']} is damaged")
                continue
            if not dest.parent.exists():
                os.makedirs(dest.parent)  # pragma: no cover - a folder removed by hand
            fsops.write_file(dest, original, entry["mode"])
        except OSError as exc:
            problems.append(f"{dest}: {_why(exc)}")
    for folder in reversed(journal["created_dirs"]):
        path = Path(folder)
        if path.is_symlink() or not path.is_dir():
            continue
        try:
            fsops.remove_dir(path)
        except OSError:
            if any(path.iterdir()):
                notes.append(f"kept {folder}: it holds files the overlay did not create")
            else:
                problems.append(f"{folder}: cannot remove it")
    if problems:
        raise RestoreIncomplete("could not restore " + "; ".join(problems))
    fsops.remove_tree(state_dir)
    trash = _trash_dir(target)
    if trash.exists():
        fsops.remove_tree(trash)
    return notes


def recover_overlay(target: InstalledTorch, *, force: bool = False) -> list[str]:
    """Finish what a killed or failed command left on ``target``; lines saying what was done
    (none when nothing was interrupted).

    An interrupted apply is rolled back (refused, unless ``force``, when a file it wrote has
    been changed since), an interrupted revert is finished; leftovers of a kill before the
    journal's commit point or after its removal are deleted.
    """
    lines = []
    for leftover in (_staging_dir(target), _trash_dir(target)):
        if leftover.is_dir() and not leftover.is_symlink():
            fsops.remove_tree(leftover)
            lines.append(f"recovered: removed {leftover}, left by a killed command")
    journal = read_journal(target)
    if journal is not None:
        _drop_temporary(target.state_dir / "state.json")  # a record update that was killed
    if journal is None or journal.get("state") == "applied":
        return lines
    state = journal.get("state")
    if state not in ("applying", "reverting"):
        raise BadInput(f"{target.state_dir}: unknown record state {state!r}")
    strangers = _strangers(target, journal) if state == "applying" and not force else []
    if strangers:
        raise BadInput(
            f"{target.torch_dir}: an interrupted apply, but files it wrote were changed since "
            f"by something else: {', '.join(strangers)}; recover --force restores the "
            "originals anyway (losing those changes)"
        )
    try:
        notes = _restore(target, journal)
    except (OSError, RestoreIncomplete) as exc:
        raise WriteFailed(
            f"{target.torch_dir}: an interrupted {state} could not be recovered: {exc}; the "
            f"journal in {target.state_dir} is kept; fix the cause and run: "
            f"scripts/patches recover {target.torch_dir}"
        ) from None
    done = "rolled back" if state == "applying" else "finished"
    count = len(journal["series"])
    lines.append(
        f"recovered: an interrupted {state[:-3]} of {count} patches was {done}; "
        f"{target.torch_dir} is stock torch again"
    )
    return lines + [f"recovered: {note}" for note in notes]


def revert_overlay(target: InstalledTorch, *, force: bool = False) -> str:
    """Restore every file the overlay changed, byte for byte, and remove what it created.

    Refuses (BadInput) when a patched file was changed since apply, unless ``force``.
    """
    state = load_state(target)
    if state is None:
        return f"{target.torch_dir}: no series applied; nothing to revert"
    if not force:
        drifted = [
            entry["path"]
            for entry in state["files"]
            if _sha(_read(target.dest(entry["path"]))) != entry["sha256_after"]
        ]
        if drifted:
            raise BadInput(
                "changed since the series was applied: "
                + ", ".join(drifted)
                + "; revert --force restores the originals anyway (losing those changes)"
            )
    try:
        state["state"] = "reverting"
        _write_state(target.state_dir, state)
        notes = _restore(target, state)
    except (OSError, RestoreIncomplete) as exc:
        raise WriteFailed(
            f"revert failed ({exc}); the record in {target.state_dir} is kept; fix the cause "
            f"and run: scripts/patches recover {target.torch_dir}"
        ) from None
    except KeyboardInterrupt:
        raise Interrupted(
            f"revert interrupted; run: scripts/patches recover {target.torch_dir}"
        ) from None
    lines = [f"reverted {len(state['series'])} patches; {len(state['files'])} files restored"]
    return "\n".join(lines + notes)


def overlay_status(series: Series, target: InstalledTorch) -> tuple[list[str], bool]:
    """Lines saying which patches are applied, and whether the recorded series is this one."""
    state = load_state(target)
    if state is None:
        return [f"{p.name}: not applied" for p in series.patches], False
    recorded = {entry["name"]: entry["sha256"] for entry in state["series"]}
    lines = []
    for patch in series.patches:
        if patch.name not in recorded:
            lines.append(f"{patch.name}: not applied")
        elif recorded[patch.name] != patch.sha256:
            lines.append(f"{patch.name}: applied (an older version of this patch file)")
        else:
            lines.append(f"{patch.name}: applied")
    extra = [name for name in recorded if name not in {p.name for p in series.patches}]
    lines += [f"{name}: applied (no longer in the series)" for name in extra]
    lines.append(f"record: {target.state_dir / 'state.json'}; tests: {state['tests_dir']}")
    same = [{"name": p.name, "sha256": p.sha256} for p in series.patches] == state["series"]
    return lines, same
