"""The edit loop: ``capture CHECKOUT`` writes the series applied in a checkout back to the patch
files, and :func:`index_problems` checks that every patch's ``index`` lines match its content.

A patch is never edited by hand: ``apply`` puts the series on a branch of a PyTorch checkout,
the person edits it there with git (``git rebase -i``, ``git commit --amend``, ...), and
``capture`` turns the branch back into the series with ``git format-patch -k --zero-commit
--no-signature`` (the format every patch file has: the ``From``/``Date`` header of the commit,
which ``git am`` kept; the message with its trailers; fresh ``index`` lines). It refuses a branch
that is not the series: another number of commits, or a subject that is not the patch's at that
place (a reordered or a new commit belongs in the series file first).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from tools.patchqueue import fsops
from tools.patchqueue.engine import plan_series
from tools.patchqueue.errors import BadInput
from tools.patchqueue.gitqueue import _applied, _git, _load_record, validate_checkout
from tools.patchqueue.series import Series
from tools.patchqueue.targets import GitCheckout


def _subjects(root: Path, start: str, branch: str) -> list[tuple[str, str]]:
    """(commit, subject) of each commit from ``start`` to ``branch``, oldest first."""
    log = _git(root, "log", "--reverse", "--format=%H %s", f"{start}..{branch}").stdout
    return [(line[:40], line[41:]) for line in log.splitlines()]


def capture(series: Series, target: GitCheckout) -> list[str]:
    """Write the checkout's applied series (its branch, as edited) back to the patch files;
    one line per patch (rewritten or unchanged). Raises BadInput when the checkout has no
    series applied by ``apply``, is not clean, or its branch does not match the series."""
    root = target.root
    record = _applied(_load_record(root))
    if record is None:
        raise BadInput(
            f"{root}: no series applied by this tool; run `scripts/patches apply {root}` first, "
            "edit the branch with git, then capture"
        )
    branch, start = record["branch"], record["original_head"]
    validate_checkout(root, branch)
    commits = _subjects(root, start, branch)
    if len(commits) != len(series.patches):
        raise BadInput(
            f"{root}: branch {branch} has {len(commits)} commits since {start[:12]}, the series "
            f"{len(series.patches)}: squash or split with git so that each patch is one commit, "
            "or add the new patch to the series file first"
        )
    for number, ((_, subject), patch) in enumerate(zip(commits, series.patches, strict=True), 1):
        if subject != patch.subject:
            raise BadInput(
                f"{root}: commit {number} of {branch} is {subject!r}, but patch {number} of the "
                f"series is {patch.name} ({patch.subject!r}); reorder the branch (git rebase -i) "
                "or the series file so that they match"
            )
    written: dict[Path, bytes] = {}
    lines = []
    for (commit, _), patch in zip(commits, series.patches, strict=True):
        text = _git(
            root, "format-patch", "-k", "--zero-commit", "--no-signature", "--stdout", "-1",
            commit,
        ).stdout  # fmt: skip
        data = text.encode("utf-8")
        if data == patch.path.read_bytes():
            lines.append(f"{patch.name}: unchanged")
            continue
        written[patch.path] = data
        lines.append(f"{patch.name}: rewritten from {commit[:12]}")
    for path, data in written.items():  # each file whole (a temporary file renamed over it)
        fsops.write_file(path, data, 0o644)
    lines.append(
        f"captured {len(series.patches)} commits of {branch} into {series.directory}: "
        f"{len(written)} patch files rewritten; run `scripts/patches lint` and `verify` next"
    )
    return lines


def _blob_id(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def index_problems(series: Series, read) -> list[str]:
    """The ``index OLD..NEW`` lines that do not match the files before and after each patch
    (the series applied one patch at a time on ``read``'s files): a patch edited by hand after
    format-patch. Empty when every one matches."""
    state: dict[str, bytes | None] = {}

    def current(path: str) -> bytes | None:
        return state[path] if path in state else read(path)

    problems = []
    for patch in series.patches:
        one = Series(series.directory, series.base, (patch,))
        plan = plan_series(one, current, lambda _: "target")
        if not plan.clean:
            problems.append(f"{patch.name}: does not apply in order; index lines not checked")
            continue
        indexes = _index_lines(patch.path)
        for path, (old, new) in indexes.items():
            before = plan.original.get(path)
            after = plan.files.get(path)
            for label, short, data in (("old", old, before), ("new", new, after)):
                expected = "0" * 40 if data is None else _blob_id(data)
                if not expected.startswith(short):
                    problems.append(
                        f"{patch.name}: {path}: index line's {label} blob {short} is not the "
                        f"file's ({expected[: len(short)]}): the patch was edited after "
                        "format-patch; capture it again (docs/patch-queue.md)"
                    )
        state.update(plan.files)
    return problems


def _index_lines(path: Path) -> dict[str, tuple[str, str]]:
    """Per file of a patch, the (old, new) abbreviated blob ids of its ``index`` line."""
    result: dict[str, tuple[str, str]] = {}
    current = None
    for line in path.read_text(encoding="utf-8").split("\n"):
        if line.startswith("diff --git "):
            current = line.split(" b/", 1)[-1]
        elif line.startswith("index ") and current is not None:
            ids = line.split()[1]
            old, _, new = ids.partition("..")
            result[current] = (old, new)
            current = None
    return result
