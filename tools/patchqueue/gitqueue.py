"""Apply, inspect and revert the series on a PyTorch git checkout.

apply commits the series on a new branch with ``git am -3 -k``. On any failure it runs
``git am --abort``, returns to the original branch (or detached commit) and deletes the new
branch: HEAD, index, work tree and branch list are as before. A small record in
``.git/device-agnostic-patches.json`` remembers the original branch for revert.

The record is written before the first git command that changes anything (state
``applying``), becomes ``applied`` when ``git am`` has finished, and ``reverting`` before revert
changes anything, so a command killed anywhere leaves a record that says what it was doing:
:func:`recover_git`, which every command on the checkout runs first, undoes an interrupted
apply exactly as ``git am --abort`` plus a checkout of the original branch and the deletion of
the half-made branch would, and finishes an interrupted revert.
"""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from pathlib import Path

from tools.patchqueue import fsops
from tools.patchqueue.engine import plan_series
from tools.patchqueue.errors import BadInput, Conflict, GitKilled
from tools.patchqueue.series import Series
from tools.patchqueue.targets import GitCheckout

RECORD_NAME = "device-agnostic-patches.json"
# The git commands that change the checkout: each one is a fault point (tools.patchqueue.fsops).
_CHANGING = {"am", "branch", "checkout", "reset"}


def _git(root: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    if args[0] in _CHANGING:
        fsops.checkpoint(f"git {' '.join(args)}")
    result = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, check=False
    )
    if check and result.returncode < 0:
        raise GitKilled(f"git {' '.join(args)} was killed by {signal_name(result.returncode)}")
    if check and result.returncode != 0:
        raise BadInput(f"git {' '.join(args)} failed in {root}: {result.stderr.strip()}")
    return result


def signal_name(returncode: int) -> str:
    """``SIGKILL`` for a child's return code -9."""
    try:
        return signal.Signals(-returncode).name
    except ValueError:
        return f"signal {-returncode}"


def git_dir(root: Path) -> Path:
    """The checkout's git folder (absolute)."""
    return Path(_git(root, "rev-parse", "--absolute-git-dir").stdout.strip())


def default_branch(series: Series) -> str:
    """``device-agnostic/<version>-<commit8>``."""
    return f"device-agnostic/{series.base.short}"


def _record_path(root: Path) -> Path:
    return git_dir(root) / RECORD_NAME


def _load_record(root: Path) -> dict | None:
    path = _record_path(root)
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise BadInput(
            f"{path}: unreadable ({exc}); this tool writes it atomically, so something else "
            "changed it; check the branches by hand and delete it"
        ) from exc
    record.setdefault("state", "applied")  # records written before states existed
    return record


def _write_record(root: Path, record: dict) -> None:
    fsops.write_file(_record_path(root), (json.dumps(record, indent=2) + "\n").encode(), 0o644)


def _applied(record: dict | None) -> dict | None:
    """``record`` when it is a complete apply; BadInput when it is an interrupted one."""
    if record is not None and record["state"] != "applied":
        raise BadInput(
            f"an interrupted {record['state']} of the series (the process was killed); run: "
            "scripts/patches recover CHECKOUT"
        )
    return record


def _branch_exists(root: Path, branch: str) -> bool:
    ref = f"refs/heads/{branch}"
    return _git(root, "rev-parse", "--verify", "-q", ref, check=False).returncode == 0


def _current_ref(root: Path) -> tuple[str | None, str]:
    """(branch name or None when detached, HEAD commit)."""
    head = _git(root, "rev-parse", "HEAD").stdout.strip()
    symbolic = _git(root, "symbolic-ref", "-q", "--short", "HEAD", check=False)
    return (symbolic.stdout.strip() or None), head


def _dirty(root: Path) -> list[str]:
    out = _git(root, "status", "--porcelain", "--untracked-files=no").stdout
    return [line for line in out.splitlines() if line.strip()]


def _operation_in_progress(root: Path) -> str | None:
    folder = git_dir(root)
    for name in ("rebase-apply", "rebase-merge", "MERGE_HEAD", "CHERRY_PICK_HEAD"):
        if (folder / name).exists():
            return name
    return None


def require_clean_and_idle(root: Path) -> None:
    """Raise BadInput unless the checkout has no uncommitted changes and no git operation
    (merge, rebase, am, ...) in progress."""
    dirty = _dirty(root)
    if dirty:
        raise BadInput(
            f"{root}: the checkout has uncommitted changes; commit or stash them first:\n  "
            + "\n  ".join(dirty[:20])
        )
    busy = _operation_in_progress(root)
    if busy:
        raise BadInput(f"{root}: a git operation is in progress ({busy}); finish or abort it")


def validate_checkout(root: Path, commit: str = "HEAD") -> str:
    """The one rule for a PyTorch checkout that apply, verify and export work on; returns the
    full id of ``commit`` in it.

    Raises BadInput unless ``root`` is a git work tree holding ``torch/__init__.py``, without
    uncommitted changes or a git operation (merge, rebase, am, ...) in progress, in which
    ``commit`` names a commit.
    """
    root = Path(root)
    if not root.is_dir():
        raise BadInput(f"{root}: not a directory")
    inside = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--is-inside-work-tree"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    if inside.returncode != 0 or inside.stdout.strip() != "true":
        raise BadInput(f"{root}: not a git checkout (clone pytorch/pytorch there first)")
    top = Path(_git(root, "rev-parse", "--show-toplevel").stdout.strip())
    if top.resolve() != root.resolve():
        raise BadInput(f"{root}: inside the checkout {top}; give its top folder")
    if not (root / "torch" / "__init__.py").is_file():
        raise BadInput(f"{root}: a git checkout, but not of PyTorch (no torch/__init__.py)")
    require_clean_and_idle(root)
    found = _git(root, "rev-parse", "--verify", "-q", f"{commit}^{{commit}}", check=False)
    if found.returncode != 0:
        raise BadInput(
            f"{root}: {commit} is not a commit of this checkout; fetch it (git fetch origin "
            f"{commit}) or name another"
        )
    return found.stdout.strip()


def apply_git(series: Series, target: GitCheckout, branch: str | None) -> str:
    """Commit the series on a new branch of ``target``; all or nothing.

    Raises BadInput (dirty tree, branch exists, an operation in progress) or Conflict (git am
    failed; the checkout is back as it was).
    """
    root = target.root
    record = _applied(_load_record(root))
    current, head = _current_ref(root)
    if branch is None:
        # Named after what the branch really starts from: the series' base, or the commit.
        on_base = series.base.commit.startswith(head) or head.startswith(series.base.commit)
        branch = default_branch(series) if on_base else f"device-agnostic/on-{head[:8]}"
    if record is not None:
        if record["branch"] == current and record["series"] == [p.sha256 for p in series.patches]:
            return f"the series is already applied on branch {current}; nothing to do"
        raise BadInput(
            f"{root}: the series was applied on branch {record['branch']} (from "
            f"{record['original_ref']}); run revert first"
        )
    validate_checkout(root)
    if _branch_exists(root, branch):
        raise BadInput(f"{root}: branch {branch} already exists; delete it or pass --branch")
    for patch in series.patches:
        for fpatch in patch.files:
            if fpatch.status == "added" and (root / fpatch.path).exists():
                raise BadInput(
                    f"{patch.name}: {fpatch.path} would be created but exists in the work tree"
                )
    record = {
        "state": "applying",
        "started": time.time(),
        "branch": branch,
        "original_ref": current or head,
        "original_head": head,
        "detached": current is None,
        "series": [p.sha256 for p in series.patches],
        "names": [p.name for p in series.patches],
        # Checked absent above: after a failed or killed am, any of these is the am's.
        "added": added_paths(series),
    }
    _write_record(root, record)  # the intent, before git changes anything
    try:
        _git(root, "checkout", "-q", "-b", branch)
        am = _git(
            root, "am", "-3", "-k", "--quiet", *[str(p.path) for p in series.patches], check=False
        )
    except BaseException:
        _rollback(root, branch, current, head, record["added"])
        fsops.remove_file(_record_path(root))
        raise
    if am.returncode < 0:  # git died of a signal while we lived: not a conflict
        failed = _failed_patch(root, series)
        _rollback(root, branch, current, head, record["added"])
        fsops.remove_file(_record_path(root))
        raise GitKilled(
            f"git am was killed by {signal_name(am.returncode)} (at {failed or 'a patch'}): not "
            f"a conflict; the checkout is back on {current or head} as it was and branch "
            f"{branch} is deleted; run apply again"
        )
    if am.returncode != 0:
        failed = _failed_patch(root, series)
        _rollback(root, branch, current, head, record["added"])
        fsops.remove_file(_record_path(root))
        detail = _explain(series, target, failed)
        number = next((i for i, p in enumerate(series.patches, 1) if p.name == failed), None)
        which = f"{failed} (patch {number} of {len(series.patches)})" if number else "a patch"
        raise Conflict(
            f"{which}: git am -3 failed; the checkout is back on "
            f"{current or head} as it was and branch {branch} is deleted.\n"
            f"{am_output(am.stdout, am.stderr)}{detail}".rstrip()
        )
    record["state"] = "applied"
    _write_record(root, record)
    count = len(series.patches)
    return f"applied {count} patches as commits on branch {branch} (from {current or head})"


# What git am prints that is wrong once the tool has aborted the am (and its own numbering,
# which counts the patches given to this am, not the series' file names).
_AM_NOISE = re.compile(
    r"^(hint: .*|Patch failed at .*|When you have resolved this problem.*|If you prefer to skip "
    r"this patch.*|To restore the original branch.*|.*git am --(continue|skip|abort).*|"
    r"To record the empty patch.*|The copy of the patch that failed is found in.*)$"
)


def am_output(stdout: str, stderr: str) -> str:
    """git am's messages (which file and hunk failed) without its own patch numbering and its
    advice to continue, skip or abort: the tool has already aborted."""
    lines = (stdout + "\n" + stderr).splitlines()
    return "\n".join(line for line in lines if line.strip() and not _AM_NOISE.match(line))


def _failed_patch(root: Path, series: Series) -> str | None:
    apply_dir = git_dir(root) / "rebase-apply"
    try:
        index = int((apply_dir / "next").read_text().strip())
    except (OSError, ValueError):
        return None
    if 1 <= index <= len(series.patches):
        return series.patches[index - 1].name
    return None


def added_paths(series: Series) -> list[str]:
    """Every file the series adds (apply checks that none exists before it starts)."""
    return sorted({f.path for p in series.patches for f in p.files if f.status == "added"})


def _remove_added(root: Path, added: list[str]) -> list[str]:
    """Delete the files of ``added`` that exist and git does not track (what a failed or killed
    am left: they were absent before apply), and the folders that leaves empty."""
    removed = []
    for path in added:
        target = root / path
        if not (target.is_file() or target.is_symlink()):
            continue
        tracked = _git(root, "ls-files", "--error-unmatch", "--", path, check=False)
        if tracked.returncode == 0:
            continue
        fsops.remove_file(target)
        removed.append(path)
        folder = target.parent
        while folder != root and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
            folder = folder.parent
    return removed


def _rollback(
    root: Path, branch: str, original: str | None, head: str, added: list[str] = ()
) -> None:
    """Back to ``original`` (a branch; None: ``head`` detached), no ``branch``, and none of the
    files the series adds (``added``); idempotent, so that recovery can run it again after a
    kill anywhere in it."""
    if (git_dir(root) / "rebase-apply").exists():
        _git(root, "am", "--abort", check=False)
    current, now = _current_ref(root)
    if current == branch and _dirty(root):
        # What a killed git am left outside rebase-apply: only ours (the tree was clean before).
        _git(root, "reset", "-q", "--hard")
    if original is not None and current != original:
        _git(root, "checkout", "-q", original)
    elif original is None and (current is not None or now != head):
        _git(root, "checkout", "-q", "--detach", head)
    if _branch_exists(root, branch):
        _git(root, "branch", "-q", "-D", branch)
    _remove_added(root, list(added))


def _am_subjects(apply_dir: Path) -> list[str]:
    """The subjects of the mails a ``git am`` in progress holds (``rebase-apply/0001``, ...)."""
    subjects = []
    for mail in sorted(apply_dir.glob("[0-9][0-9][0-9][0-9]")):
        for line in mail.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("Subject: "):
                subjects.append(line[len("Subject: ") :].strip())
                break
            if not line.strip():
                break
    return subjects


def _recover_unrecorded_am(root: Path, series: Series | None) -> list[str]:
    """A ``git am`` left in progress without this tool's record (its record was removed, the am
    was not aborted): aborted, with the series' new files it left, when it is the series' am;
    else reported, never touched."""
    apply_dir = git_dir(root) / "rebase-apply"
    if not apply_dir.is_dir():
        return []
    subjects = _am_subjects(apply_dir)
    ours = (
        series is not None
        and bool(subjects)
        and subjects == [p.subject.split("\n")[0] for p in series.patches][: len(subjects)]
    )
    if not ours:  # someone's own am: said, never touched
        return [
            f"note: a git am is in progress in {root} (.git/rebase-apply) that is not the "
            "series': finish it (git am --continue) or abort it (git am --abort)"
        ]
    assert series is not None
    _git(root, "am", "--abort", check=False)
    removed = _remove_added(root, added_paths(series))
    left = f"; removed the files it had added: {', '.join(removed)}" if removed else ""
    return [f"recovered: aborted a git am of the series left in progress (.git/rebase-apply){left}"]


def recover_git(target: GitCheckout, series: Series | None = None) -> list[str]:
    """Finish what a killed command left on the checkout; lines saying what was done (none when
    nothing was interrupted). ``series`` lets it recognise a ``git am`` of the series left in
    progress without a record."""
    root = target.root
    leftover = fsops.temporary_name(_record_path(root))
    if leftover.exists():  # a record update that was killed: the record itself is whole
        fsops.remove_file(leftover)
    record = _load_record(root)
    if record is None:
        return _recover_unrecorded_am(root, series)
    if record["state"] == "applied":
        return []
    lock = git_dir(root) / "index.lock"
    notes = []
    if lock.exists():
        if lock.stat().st_mtime < record["started"] - 1:
            raise BadInput(
                f"{lock}: exists and is older than the interrupted {record['state']} of this "
                "tool, so another git may be running; when none is, delete it and run again"
            )
        fsops.remove_file(lock)  # left by the git our killed command was running
        notes.append(f"recovered: removed {lock}, left by the killed git")
    original = None if record.get("detached") else record["original_ref"]
    if record["state"] == "applying":
        _rollback(
            root, record["branch"], original, record["original_head"], record.get("added", [])
        )
        fsops.remove_file(_record_path(root))
        return [
            *notes,
            f"recovered: an interrupted apply was rolled back: back on {record['original_ref']}, "
            f"branch {record['branch']} deleted",
        ]
    _finish_revert(root, record)
    back = original or record["original_head"]
    return [*notes, f"recovered: an interrupted revert was finished; back on {back}"]


def _explain(series: Series, target: GitCheckout, failed: str | None) -> str:
    """Our own zero-fuzz dry run names the file and hunk that git am only hints at."""
    try:
        plan = plan_series(series, target.read, target.scope)
    except BadInput:
        return ""
    lines = [o.describe() for o in plan.outcomes if o.state != "applies"]
    return ("\ndry run:\n" + "\n".join(lines)) if lines else ""


def revert_git(target: GitCheckout) -> str:
    """Return to the original branch and delete the series' branch when that is safe.

    Raises BadInput with the commands to run when it is not (uncommitted changes, or commits on
    the branch beyond the series).
    """
    root = target.root
    record = _applied(_load_record(root))
    if record is None:
        return f"{root}: no series applied by this tool; nothing to revert"
    branch, original = record["branch"], record["original_ref"]
    manual = (
        f"to revert by hand: git checkout {original} && git branch -D {branch} "
        f"&& rm {_record_path(root)}"
    )
    if not _branch_exists(root, branch):
        fsops.remove_file(_record_path(root))
        return f"branch {branch} no longer exists; record removed"
    if _dirty(root):
        raise BadInput(f"{root}: the checkout has uncommitted changes; {manual}")
    count = _git(root, "rev-list", "--count", f"{record['original_head']}..{branch}").stdout
    if int(count.strip()) != len(record["series"]):
        raise BadInput(
            f"{root}: branch {branch} has {count.strip()} commits beyond {original}, not the "
            f"series' {len(record['series'])}; not deleting it; {manual}"
        )
    record["state"] = "reverting"
    _write_record(root, record)
    _finish_revert(root, record)
    return f"deleted branch {branch}; back on {original}"


def _finish_revert(root: Path, record: dict) -> None:
    """Leave the series' branch if it is checked out, delete it, remove the record; idempotent."""
    branch, original = record["branch"], record["original_ref"]
    current, _ = _current_ref(root)
    if current == branch:
        if record.get("detached", original == record["original_head"]):
            _git(root, "checkout", "-q", "--detach", record["original_head"])
        else:
            _git(root, "checkout", "-q", original)
    if _branch_exists(root, branch):
        _git(root, "branch", "-q", "-D", branch)
    fsops.remove_file(_record_path(root))


def git_status(series: Series, target: GitCheckout) -> list[str]:
    """Which patches are commits on the series' branch (matched by subject)."""
    root = target.root
    record = _applied(_load_record(root))
    current, _ = _current_ref(root)
    if record is None or not _branch_exists(root, record["branch"]):
        plan = plan_series(series, target.read, target.scope)
        lines = [
            o.describe().replace(": applies", ": not applied (applies)", 1) for o in plan.outcomes
        ]
        return [*lines, f"no branch of this tool; on {current or 'a detached HEAD'}"]
    log = _git(
        root, "log", "--reverse", "--format=%s", f"{record['original_head']}..{record['branch']}"
    ).stdout.splitlines()
    lines = []
    for patch in series.patches:
        state = "applied" if patch.subject and patch.subject in log else "not applied"
        lines.append(f"{patch.name}: {state} (on branch {record['branch']})")
    lines.append(f"branch {record['branch']} from {record['original_ref']}; on {current}")
    return lines
