"""Apply, inspect and revert the series on an installed torch package, byte-exactly.

Every patched file is computed in memory first; files are written only when the whole series
applies. Before writing, the original bytes (and modes) of every file touched are copied to the
state directory; if a write fails midway everything written is restored from those backups and
the state directory is removed, so the target is as it was. ``state.json`` records what is
applied; revert restores every file and removes every file and folder the overlay created.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from tools.patchqueue.engine import Plan, plan_series
from tools.patchqueue.errors import BadInput, Conflict
from tools.patchqueue.series import Series
from tools.patchqueue.targets import STATE_DIR_NAME, InstalledTorch

STATE_FORMAT = 1


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass
class OverlayResult:
    """What apply did: the plan, the files changed and the test files written."""

    plan: Plan | None
    changed: list[str]
    tests: list[Path]
    message: str


def load_state(target: InstalledTorch) -> dict | None:
    """The record of the applied series, or None when nothing is applied."""
    state_file = target.state_dir / "state.json"
    if not target.state_dir.exists():
        return None
    try:
        state = json.loads(state_file.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(
            f"{target.state_dir}: exists but its state.json is unreadable ({exc}); an interrupted "
            "apply? Inspect it: backups/ holds the original files"
        ) from exc
    if state.get("format") != STATE_FORMAT or state.get("state") != "applied":
        raise BadInput(f"{state_file}: not a complete record (state {state.get('state')!r})")
    return state


def series_record(series: Series) -> list[dict]:
    """How ``state.json`` names a series: each patch's file name and sha256, in order."""
    return [{"name": p.name, "sha256": p.sha256} for p in series.patches]


def apply_overlay(series: Series, target: InstalledTorch, tests_dir: Path | None) -> OverlayResult:
    """Overlay the whole series on ``target``, all or nothing.

    Raises BadInput (wrong version, unusable state, tests folder in the way) or Conflict (a
    patch does not apply); in both cases nothing was written.
    """
    target.check_base(series.base)
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
    tests_dir = Path(tests_dir) if tests_dir else target.state_dir / "tests"
    tests_dir = tests_dir.resolve()
    changed = {
        path: data
        for path, data in plan.files.items()
        if target.scope(path) == "target" and data != plan.original[path]
    }
    tests = {
        tests_dir / Path(path).relative_to("test"): data
        for path, data in plan.files.items()
        if target.scope(path) == "tests" and data is not None
    }
    for dest in tests:
        if dest.exists():
            raise BadInput(f"{dest}: the tests folder already has this file; choose --tests-dir")
    _write_all(target, series, names, plan, changed, tests, tests_dir)
    message = f"applied {len(series.patches)} patches to {target.torch_dir}"
    return OverlayResult(plan, sorted(changed), sorted(tests), message)


def _makedirs(directory: Path, created: list[str]) -> None:
    """mkdir -p that records every folder it creates (outermost first)."""
    missing = []
    while not directory.exists():
        missing.append(directory)
        directory = directory.parent
    for folder in reversed(missing):
        folder.mkdir()
        created.append(str(folder))


def _write_all(
    target: InstalledTorch,
    series: Series,
    names: list[dict],
    plan: Plan,
    changed: dict[str, bytes | None],
    tests: dict[Path, bytes | None],
    tests_dir: Path,
) -> None:
    state_dir = target.state_dir
    root = target.site_packages
    files: list[dict] = []
    created_dirs: list[str] = []
    written_tests: list[str] = []
    state = {
        "format": STATE_FORMAT,
        "state": "applying",
        "base": {"version": series.base.version, "commit": series.base.commit},
        "series": names,
        "files": files,
        "created_dirs": created_dirs,
        "tests_dir": str(tests_dir),
        "tests_files": written_tests,
    }
    state_dir.mkdir()
    try:
        # 1. Backups of everything that exists, and a journal, before touching the target.
        for path, new in changed.items():
            old = plan.original[path]
            entry: dict = {"path": path, "backup": None, "mode": None, "sha256_before": None}
            if old is not None:
                backup = state_dir / "backups" / path
                backup.parent.mkdir(parents=True, exist_ok=True)
                backup.write_bytes(old)
                entry.update(
                    backup=str(Path("backups") / path),
                    mode=os.stat(root / path).st_mode & 0o7777,
                    sha256_before=_sha(old),
                )
            entry["sha256_after"] = None if new is None else _sha(new)
            files.append(entry)
        _write_json(state_dir / "state.json", state)
        # 2. The target, then the tests folder.
        for entry in files:
            dest = root / entry["path"]
            new = changed[entry["path"]]
            if new is None:
                dest.unlink()
            else:
                _makedirs(dest.parent, created_dirs)
                with open(dest, "wb") as handle:  # in place: keeps the file's mode
                    handle.write(new)
        for dest, data in sorted(tests.items()):
            _makedirs(dest.parent, created_dirs)
            dest.write_bytes(data or b"")
            written_tests.append(str(dest))
        state["state"] = "applied"
        _write_json(state_dir / "state.json", state)
    except BaseException:
        _restore(root, state, strict=False)
        shutil.rmtree(state_dir, ignore_errors=True)
        raise


def _write_json(path: Path, data: dict) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def _restore(root: Path, state: dict, *, strict: bool) -> None:
    """Put back every backup, remove every created file and folder."""
    state_dir = root / STATE_DIR_NAME
    for dest_name in state["tests_files"]:
        Path(dest_name).unlink(missing_ok=True)
    for entry in state["files"]:
        dest = root / entry["path"]
        if entry["backup"] is None:
            dest.unlink(missing_ok=True)
            continue
        data = (state_dir / entry["backup"]).read_bytes()
        if dest.exists():
            with open(dest, "wb") as handle:
                handle.write(data)
        else:
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_bytes(data)
        os.chmod(dest, entry["mode"])
    for folder in reversed(state["created_dirs"]):
        try:
            Path(folder).rmdir()
        except OSError:
            if strict and Path(folder).exists():
                print(f"note: kept {folder}: it holds files the overlay did not create")


def revert_overlay(target: InstalledTorch, *, force: bool = False) -> str:
    """Restore every file the overlay changed, byte for byte, and remove what it created.

    Refuses (BadInput) when a patched file was changed since apply, unless ``force``.
    """
    state = load_state(target)
    if state is None:
        return f"{target.torch_dir}: no series applied; nothing to revert"
    root = target.site_packages
    if not force:
        drifted = []
        for entry in state["files"]:
            dest = root / entry["path"]
            have = _sha(dest.read_bytes()) if dest.exists() else None
            if have != entry["sha256_after"]:
                drifted.append(entry["path"])
        if drifted:
            raise BadInput(
                "changed since the series was applied: "
                + ", ".join(drifted)
                + "; revert --force restores the originals anyway (losing those changes)"
            )
    _restore(root, state, strict=True)
    shutil.rmtree(target.state_dir)
    return f"reverted {len(state['series'])} patches; {len(state['files'])} files restored"


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
