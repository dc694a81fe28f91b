"""The series: ``patches/series`` (the order and the base) and each patch, parsed with unidiff.

``series`` lists one patch file name a line, in order; comment lines start with ``#``, and one of
them records the base the series applies to::

    # base: torch 2.13.0 cf30153c4c131c8164ee7798e5022d810682e2cb

Each patch is ``git format-patch -k --zero-commit --no-signature`` output with paths from the
PyTorch repository root (``torch/...``, ``test/...``).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from email.header import decode_header, make_header
from pathlib import Path
from typing import Literal

from unidiff import PatchSet
from unidiff.constants import (
    DEV_NULL,
    LINE_TYPE_ADDED,
    LINE_TYPE_CONTEXT,
    LINE_TYPE_NO_NEWLINE,
    LINE_TYPE_REMOVED,
)
from unidiff.errors import UnidiffParseError

from tools.patchqueue.errors import BadInput

_BASE_RE = re.compile(r"^#\s*base:\s*torch\s+(\S+)\s+([0-9a-f]{7,40})\s*$")
_SUBJECT_RE = re.compile(r"^Subject:\s*(.*)$")


@dataclass(frozen=True)
class Base:
    """What the series applies to: a torch version (``2.13.0``) and its git commit."""

    version: str
    commit: str

    @property
    def short(self) -> str:
        """The short form used in branch names: ``2.13.0-cf30153c``."""
        return f"{self.version}-{self.commit[:8]}"


@dataclass(frozen=True)
class Hunk:
    """One hunk: the lines it expects (``old``) and the lines it leaves (``new``).

    Lines keep their line ending; a line marked "No newline at end of file" has none.
    """

    index: int  # 1-based position within its file, as a user counts hunks
    header: str  # "@@ -10,6 +10,7 @@"
    old_start: int  # 1-based line of the first old line (for an insertion: the line before it)
    new_start: int  # the same in the patched file
    old: tuple[str, ...]
    new: tuple[str, ...]

    def reversed(self) -> Hunk:
        """The hunk that undoes this one (to recognise a patch already applied)."""
        return Hunk(self.index, self.header, self.new_start, self.old_start, self.new, self.old)


@dataclass(frozen=True)
class FilePatch:
    """What one patch does to one file."""

    path: str  # from the PyTorch repository root, e.g. "torch/amp/grad_scaler.py"
    status: Literal["added", "deleted", "modified"]
    hunks: tuple[Hunk, ...]


@dataclass(frozen=True)
class Patch:
    """One patch file of the series."""

    name: str
    path: Path
    sha256: str
    subject: str
    files: tuple[FilePatch, ...]


@dataclass(frozen=True)
class Series:
    """The whole series, in order, with its base."""

    directory: Path
    base: Base
    patches: tuple[Patch, ...]


def load_series(directory: Path) -> Series:
    """Read ``directory/series`` and parse every patch it names, in order.

    Raises BadInput naming the series file, or the patch (and file) that is missing or corrupted.
    """
    directory = Path(directory)
    series_file = directory / "series"
    try:
        text = series_file.read_text(encoding="utf-8")
    except OSError as exc:
        raise BadInput(f"cannot read the series file {series_file}: {exc.strerror}") from exc
    base: Base | None = None
    names: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            match = _BASE_RE.match(line)
            if match:
                base = Base(match.group(1), match.group(2))
            continue
        if any(ch.isspace() for ch in line) or "/" in line:
            raise BadInput(f"{series_file}:{number}: expected a patch file name, got {line!r}")
        if line in names:
            raise BadInput(f"{series_file}:{number}: {line} is listed twice")
        names.append(line)
    if base is None:
        raise BadInput(
            f"{series_file}: no base recorded; add a line like "
            "'# base: torch 2.13.0 cf30153c4c131c8164ee7798e5022d810682e2cb'"
        )
    patches = tuple(parse_patch(directory / name) for name in names)
    return Series(directory, base, patches)


# Patches already parsed in this process, by path and content: a process that loads the series
# many times (the kill tests run the CLI in-process after each of 600 kills) parses each patch
# once; an edited patch has new content and is parsed again.
_PARSED: dict[tuple[Path, str], Patch] = {}


def parse_patch(path: Path) -> Patch:
    """Parse one ``git format-patch`` file; raises BadInput naming the patch and the file."""
    name = path.name
    try:
        data = path.read_bytes()
    except FileNotFoundError as exc:
        raise BadInput(f"{name}: listed in the series but {path} does not exist") from exc
    except OSError as exc:
        raise BadInput(f"{name}: cannot read {path}: {exc.strerror}") from exc
    digest = hashlib.sha256(data).hexdigest()
    key = (path, digest)
    if key not in _PARSED:
        _PARSED[key] = _parse_patch_bytes(name, path, data, digest)
    return _PARSED[key]


def _parse_patch_bytes(name: str, path: Path, data: bytes, digest: str) -> Patch:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"{name}: not UTF-8 text (byte {exc.start}); corrupted?") from exc
    lines = text.split("\n")
    subject = _subject(lines)
    # Parse file by file, so that an error names the file it is in.
    starts = [i for i, line in enumerate(lines) if line.startswith("diff --git ")]
    if not starts:
        raise BadInput(f"{name}: no 'diff --git' section; corrupted or not a format-patch file")
    files: list[FilePatch] = []
    for k, start in enumerate(starts):
        end = starts[k + 1] if k + 1 < len(starts) else len(lines)
        section = "\n".join(lines[start:end])
        if k + 1 < len(starts) or text.endswith("\n"):
            section += "\n"
        header = lines[start][len("diff --git ") :]
        _check_hunk_headers(name, lines, start, end)
        files.append(_parse_file_section(name, header, section))
    return Patch(name, path, digest, subject, tuple(files))


_HUNK_HEADER_RE = re.compile(r"^@@ -\d+(?:,\d+)? \+\d+(?:,\d+)? @@(?: .*)?$")


def _check_hunk_headers(name: str, lines: list[str], start: int, end: int) -> None:
    """Raise BadInput at the first malformed ``@@`` line of a file section.

    unidiff skips a header it cannot read together with the lines under it, so a corrupted
    header would otherwise lose a hunk silently (an added file would come out empty).
    """
    for number in range(start, end):
        line = lines[number]
        if line.startswith("@@") and not _HUNK_HEADER_RE.match(line):
            raise BadInput(
                f"{name}:{number + 1}: malformed hunk header {line[:60]!r}; expected "
                "'@@ -START,COUNT +START,COUNT @@'; corrupted patch file?"
            )


def _subject(lines: list[str]) -> str:
    """The Subject header, unfolded and decoded (RFC 2047), as ``git am -k`` commits it."""
    for number, line in enumerate(lines):
        if not line.strip() or line.startswith("diff --git "):
            break
        match = _SUBJECT_RE.match(line)
        if match:
            parts = [match.group(1)]
            for more in lines[number + 1 :]:
                if not more[:1].isspace() or not more.strip():
                    break
                parts.append(more)
            raw = "".join(parts)
            return str(make_header(decode_header(raw))).strip()
    return ""


def _parse_file_section(name: str, header: str, section: str) -> FilePatch:
    label = header.split(" b/")[-1] if " b/" in header else header
    try:
        parsed = PatchSet(section)
    except UnidiffParseError as exc:
        raise BadInput(f"{name}: {label}: corrupted diff: {exc}") from exc
    if len(parsed) != 1:
        raise BadInput(f"{name}: {label}: expected one file in this diff section")
    pfile = parsed[0]
    if pfile.is_binary_file:
        raise BadInput(f"{name}: {label}: binary patches are not supported")
    if pfile.is_rename:
        raise BadInput(f"{name}: {label}: renames are not supported")
    path = pfile.path
    if path.startswith("/") or ".." in Path(path).parts:
        raise BadInput(f"{name}: {label}: unsafe path {path!r}")
    if pfile.source_file == DEV_NULL:
        status: Literal["added", "deleted", "modified"] = "added"
    elif pfile.target_file == DEV_NULL:
        status = "deleted"
    else:
        status = "modified"
    if status != "deleted" and len(pfile) == 0 and pfile.source_file is None:
        raise BadInput(f"{name}: {label}: no '---'/'+++' header; corrupted diff")
    headers = sum(line.startswith("@@") for line in section.split("\n"))
    if headers != len(pfile):
        raise BadInput(
            f"{name}: {label}: {headers} hunk headers but {len(pfile)} hunks could be read; "
            "corrupted diff"
        )
    if status == "added" and pfile.source_file == DEV_NULL and not len(pfile):
        raise BadInput(f"{name}: {label}: an added file with a '+++' header but no hunk")
    hunks = tuple(_convert_hunk(index, hunk) for index, hunk in enumerate(pfile, 1))
    if status == "modified" and not hunks:
        raise BadInput(f"{name}: {label}: a modified file without hunks (mode change only?)")
    return FilePatch(path, status, hunks)


def _convert_hunk(index: int, hunk) -> Hunk:
    old: list[str] = []
    new: list[str] = []
    last_type = None
    for line in hunk:
        kind = line.line_type
        if kind == LINE_TYPE_CONTEXT:
            old.append(line.value)
            new.append(line.value)
        elif kind == LINE_TYPE_REMOVED:
            old.append(line.value)
        elif kind == LINE_TYPE_ADDED:
            new.append(line.value)
        elif kind == LINE_TYPE_NO_NEWLINE:
            # The marker belongs to the line before it: that line has no line ending.
            if last_type in (LINE_TYPE_CONTEXT, LINE_TYPE_REMOVED):
                old[-1] = old[-1].removesuffix("\n")
            if last_type in (LINE_TYPE_CONTEXT, LINE_TYPE_ADDED):
                new[-1] = new[-1].removesuffix("\n")
            continue
        else:  # a blank separator line unidiff attached after the hunk
            continue
        last_type = kind
    header = (
        f"@@ -{hunk.source_start},{hunk.source_length} +{hunk.target_start},{hunk.target_length} @@"
    )
    return Hunk(index, header, hunk.source_start, hunk.target_start, tuple(old), tuple(new))
