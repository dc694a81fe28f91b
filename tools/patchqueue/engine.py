"""Zero-fuzz hunk application, in memory, and the cumulative dry run of a series.

A hunk applies where its header says, or at an exact offset when its old lines (context and
removed lines, compared byte for byte) occur exactly once elsewhere after the previous hunk; the
offset is reported. As in ``git apply``, a hunk without leading context at line 1 must match at
the start of the file and one without trailing context at its end. Nothing is ever applied at a
guessed place: no fuzz, no whitespace leniency, and a hunk whose lines occur at several other
places is a conflict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from tools.patchqueue.series import FilePatch, Hunk, Patch, Series

Scope = Literal["target", "tests", "skip"]
Reader = Callable[[str], bytes | None]


def split_lines(data: bytes) -> list[str]:
    """Split file bytes into lines that keep their ending; only ``\\n`` ends a line.

    ``surrogateescape`` makes the round trip byte-exact for any bytes.
    """
    text = data.decode("utf-8", "surrogateescape")
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def join_lines(lines: list[str]) -> bytes:
    """The inverse of split_lines."""
    return "".join(lines).encode("utf-8", "surrogateescape")


@dataclass(frozen=True)
class HunkFailure:
    """Why one hunk of one file does not apply."""

    path: str
    hunk: Hunk | None
    reason: str

    def describe(self) -> str:
        """``torch/x.py hunk 2 (@@ -10,6 +10,7 @@): <reason>``."""
        where = (
            f"{self.path} hunk {self.hunk.index} ({self.hunk.header})" if self.hunk else self.path
        )
        return f"{where}: {self.reason}"


class _NoApply(Exception):
    def __init__(self, failures: list[HunkFailure]) -> None:
        super().__init__(failures)
        self.failures = failures


def _locate(lines: list[str], hunk: Hunk, expected: int, low: int) -> int | str:
    """The index where ``hunk.old`` starts, or a reason why there is none."""
    old = list(hunk.old)
    size = len(old)
    if size == 0:
        # A pure insertion carries no context to check: only its stated place is acceptable.
        return expected if low <= expected <= len(lines) else "insertion point past end of file"
    # A hunk without leading context at line 1 must match at the start of the file, and one
    # without trailing context (its last line changed) at its end, as in git apply: otherwise a
    # hunk appending to a file would apply again after its own added lines, doubling them.
    at_start = hunk.old_start <= 1 and (not hunk.new or hunk.old[0] != hunk.new[0])
    at_end = not hunk.new or hunk.old[-1] != hunk.new[-1]

    def anchored(i: int) -> bool:
        return (not at_start or i == 0) and (not at_end or i + size == len(lines))

    if 0 <= expected and lines[expected : expected + size] == old and anchored(expected):
        return expected
    first = old[0]
    matches = [
        i
        for i in range(low, len(lines) - size + 1)
        if lines[i] == first and lines[i : i + size] == old and anchored(i)
    ]
    if len(matches) == 1:
        return matches[0]
    if len(matches) > 1:
        places = ", ".join(str(m + 1) for m in matches[:5])
        return f"its lines occur at several places (lines {places}); refusing to guess"
    unanchored = [
        i
        for i in range(low, len(lines) - size + 1)
        if lines[i] == first and lines[i : i + size] == old
    ]
    if unanchored:
        where = "start" if at_start and unanchored[0] != 0 else "end"
        context = "leading" if where == "start" else "trailing"
        return (
            f"its lines are at line {unanchored[0] + 1}, not at the {where} of the file, where a "
            f"hunk without {context} context must apply (the file has other lines there now)"
        )
    # Say what differs at the stated place, which is what a person fixes.
    for k, want in enumerate(old):
        at = expected + k
        have = lines[at] if 0 <= at < len(lines) else None
        if have != want:
            found = "end of file" if have is None else repr(have.rstrip("\n"))
            return (
                f"context does not match at line {at + 1}: expected {want.rstrip(chr(10))!r}, "
                f"found {found} (and the hunk matches nowhere else)"
            )
    return "context does not match"  # pragma: no cover - the loop above always returns


def apply_file(
    current: bytes | None, fpatch: FilePatch, *, reverse: bool = False
) -> tuple[bytes | None, list[tuple[int, int]]]:
    """Apply (or undo, ``reverse=True``) one file's hunks to its current bytes.

    Returns the new bytes (None: the file is deleted) and the (hunk index, offset) of every hunk
    applied away from its stated line. Raises _NoApply with every failing hunk.
    """
    status = fpatch.status
    if reverse:
        status = {"added": "deleted", "deleted": "added"}.get(status, status)  # type: ignore[assignment]
    hunks = [h.reversed() if reverse else h for h in fpatch.hunks]
    if status == "added":
        if current is not None:
            raise _NoApply(
                [HunkFailure(fpatch.path, None, "the file to be created already exists")]
            )
        return join_lines([line for h in hunks for line in h.new]), []
    if current is None:
        raise _NoApply([HunkFailure(fpatch.path, None, "the file does not exist")])
    lines = split_lines(current)
    result: list[str] = []
    failures: list[HunkFailure] = []
    offsets: list[tuple[int, int]] = []
    position = 0  # first line of `lines` not yet copied to `result`
    carried = 0  # the offset of the previous hunk carries to the next, as patch(1) does
    for hunk in hunks:
        start = hunk.old_start - 1 if hunk.old else hunk.old_start
        expected = start + carried
        found = _locate(lines, hunk, expected, position)
        if isinstance(found, str):
            failures.append(HunkFailure(fpatch.path, hunk, found))
            continue
        if found != expected or carried:
            offsets.append((hunk.index, found - start))
        carried = found - start
        result.extend(lines[position:found])
        result.extend(hunk.new)
        position = found + len(hunk.old)
    if failures:
        raise _NoApply(failures)
    result.extend(lines[position:])
    if status == "deleted":
        if result:
            raise _NoApply([HunkFailure(fpatch.path, None, "the file to delete has other content")])
        return None, offsets
    return join_lines(result), offsets


@dataclass
class PatchOutcome:
    """What the dry run found for one patch."""

    patch: Patch
    state: Literal["applies", "already applied", "conflicts"]
    offsets: list[str] = field(default_factory=list)  # "torch/x.py hunk 2 at offset +3"
    failures: list[HunkFailure] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # paths outside this target's scope

    def describe(self) -> str:
        """One line for people, plus indented details."""
        text = f"{self.patch.name}: {self.state}"
        details = [f"  {f.describe()}" for f in self.failures]
        details += [f"  {o}" for o in self.offsets]
        details += [f"  skipped {s}" for s in self.skipped]
        return "\n".join([text, *details])


@dataclass
class Plan:
    """The cumulative dry run: each patch's outcome and the final content of every file touched.

    ``files`` maps a path from the repository root to its final bytes (None: deleted);
    ``original`` to its bytes before the series (None: absent).
    """

    outcomes: list[PatchOutcome]
    files: dict[str, bytes | None]
    original: dict[str, bytes | None]

    @property
    def clean(self) -> bool:
        """True when every patch applies (none already applied, none in conflict)."""
        return all(o.state == "applies" for o in self.outcomes)


def plan_series(series: Series, read: Reader, scope: Callable[[str], Scope]) -> Plan:
    """Dry-run the whole series in order on a virtual copy of the target; changes nothing.

    A patch that applies changes the virtual copy for the patches after it; one that is already
    applied or conflicts leaves it as it was. A patch is already applied when its reverse applies
    to the target, or to the target with the later patches that are applied taken off first: a
    stack where a later patch edits lines next to an earlier one's (its context holds them) is
    recognised on a fully applied tree, as ``quilt`` pops a stack from the top.
    """
    original: dict[str, bytes | None] = {}
    files: dict[str, bytes | None] = {}

    def current(path: str) -> bytes | None:
        if path not in files:
            data = read(path) if scope(path) == "target" else None
            original[path] = data
            files[path] = data
        return files[path]

    def relevant(patch: Patch) -> tuple[list[FilePatch], list[str]]:
        kept, skipped = [], []
        for fpatch in patch.files:
            where = scope(fpatch.path)
            if where == "skip" or (where == "tests" and fpatch.status != "added"):
                skipped.append(f"{fpatch.path} (outside this target)")
            else:
                kept.append(fpatch)
        return kept, skipped

    def as_found(path: str) -> bytes | None:
        """The target's own bytes, whatever the dry run has applied to its copy since."""
        if path in original:
            return original[path]
        return current(path)  # read now: unchanged so far

    popped: set[int] | None = None

    def popped_from_the_top() -> set[int]:
        # Only when a patch is neither applicable nor directly reversible (a stack on an applied
        # tree), so a plain apply never pays for a second pass over the series.
        nonlocal popped
        if popped is None:
            stack = [
                [f for f in relevant(p)[0] if scope(f.path) == "target"] for p in series.patches
            ]
            popped = _applied_from_the_top(stack, as_found)
        return popped

    outcomes: list[PatchOutcome] = []
    for index, patch in enumerate(series.patches):
        outcome = PatchOutcome(patch, "applies")
        relevant_files, outcome.skipped = relevant(patch)
        forward: dict[str, bytes | None] = {}
        failures: list[HunkFailure] = []
        for fpatch in relevant_files:
            try:
                before = forward[fpatch.path] if fpatch.path in forward else current(fpatch.path)
                forward[fpatch.path], offsets = apply_file(before, fpatch)
                outcome.offsets += [
                    f"{fpatch.path} hunk {i} at offset {off:+d} lines" for i, off in offsets
                ]
            except _NoApply as exc:
                failures += exc.failures
        if not failures:
            files.update(forward)
        elif (
            _already_applied([f for f in relevant_files if scope(f.path) == "target"], current)
            or index in popped_from_the_top()
        ):
            outcome.state = "already applied"
            outcome.offsets = []
        else:
            outcome.state = "conflicts"
            outcome.failures = failures
            outcome.offsets = []
        outcomes.append(outcome)
    return Plan(outcomes, files, original)


def _already_applied(fpatches: list[FilePatch], current: Callable[[str], bytes | None]) -> bool:
    return _reversed(fpatches, current) is not None


def _reversed(
    fpatches: list[FilePatch], current: Callable[[str], bytes | None]
) -> dict[str, bytes | None] | None:
    """The files after taking ``fpatches`` off, or None when their reverse does not apply."""
    if not fpatches:
        return None
    state: dict[str, bytes | None] = {}
    for fpatch in reversed(fpatches):
        try:
            before = state[fpatch.path] if fpatch.path in state else current(fpatch.path)
            state[fpatch.path], _ = apply_file(before, fpatch, reverse=True)
        except _NoApply:
            return None
    return state


def _applied_from_the_top(
    stack: list[list[FilePatch]], current: Callable[[str], bytes | None]
) -> set[int]:
    """Indices of the patches found applied when the stack is popped from its last patch down.

    Each patch whose reverse applies is taken off (in memory) before the one below it is tried,
    so a patch whose lines a later applied patch's context holds is still recognised.
    """
    popped_state: dict[str, bytes | None] = {}

    def below(path: str) -> bytes | None:
        return popped_state[path] if path in popped_state else current(path)

    applied: set[int] = set()
    for index in reversed(range(len(stack))):
        taken_off = _reversed(stack[index], below)
        if taken_off is not None:
            popped_state.update(taken_off)
            applied.add(index)
    return applied
