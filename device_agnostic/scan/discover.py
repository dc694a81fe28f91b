"""Find the Python files under the paths given: directories walked, exclusions applied.

Symbolic links are followed (a linked directory is part of the project), but every directory is
entered once: a link back to a directory already on the path is a loop, reported as DA904, and a
second route to the same directory is skipped. Anything that cannot be listed or is not a regular
file is reported as DA903; none of this stops the walk.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from fnmatch import fnmatch

from .engine import SYMLINK_LOOP, UNREADABLE, input_diagnostic
from .rules import Finding

DEFAULT_EXCLUDE = (
    ".git",
    ".hg",
    ".svn",
    ".venv",
    "venv",
    "__pycache__",
    ".tox",
    ".nox",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    "node_modules",
    ".eggs",
)
SUFFIXES = (".py", ".pyi")


@dataclass
class Discovery:
    files: list[str] = field(default_factory=list)
    errors: list[Finding] = field(default_factory=list)


def is_excluded(path: str, patterns: Iterable[str]) -> bool:
    """Whether ``path`` matches a pattern: by its name (``build``, ``*_pb2.py``) or by its
    path (``tests/fixtures/*``, matched against the end of the path)."""
    normalized = path.replace(os.sep, "/").rstrip("/")
    name = normalized.rsplit("/", 1)[-1]
    for pattern in patterns:
        pattern = pattern.rstrip("/")
        if fnmatch(name, pattern) or fnmatch(normalized, pattern):
            return True
        if "/" in pattern and fnmatch(normalized, f"*/{pattern.lstrip('/')}"):
            return True
    return False


def discover(paths: Iterable[str], exclude: Iterable[str] = ()) -> Discovery:
    """The files to scan under ``paths`` (sorted, each once) and the paths that failed.

    A file named explicitly is scanned even when an exclude pattern matches it, as ruff does.
    """
    patterns = (*DEFAULT_EXCLUDE, *exclude)
    result = Discovery()
    seen_files: set[str] = set()
    for path in paths:
        try:
            st = os.stat(path)
        except OSError as exc:
            code, reason = _stat_failure(path, exc)
            result.errors.append(input_diagnostic(path, code, reason))
            continue
        if stat.S_ISDIR(st.st_mode):
            _walk(path, patterns, result, seen_files, ancestors=set(), seen_dirs=set())
        else:
            _add_file(path, st, result, seen_files)
    result.files.sort()
    return result


def _stat_failure(path: str, exc: OSError) -> tuple[str, str]:
    if exc.errno == 40:  # ELOOP
        return SYMLINK_LOOP, "symbolic link loop"
    if os.path.islink(path) and not os.path.exists(path):
        return UNREADABLE, "broken symbolic link"
    return UNREADABLE, f"cannot read: {exc.strerror or exc}"


def _add_file(path: str, st: os.stat_result, result: Discovery, seen: set[str]) -> None:
    if not stat.S_ISREG(st.st_mode):
        # A FIFO or device would block or never end when read.
        result.errors.append(input_diagnostic(path, UNREADABLE, "not a regular file"))
        return
    key = os.path.realpath(path)
    if key not in seen:
        seen.add(key)
        result.files.append(path)


def _walk(
    directory: str,
    patterns: tuple[str, ...],
    result: Discovery,
    seen_files: set[str],
    ancestors: set[tuple[int, int]],
    seen_dirs: set[tuple[int, int]],
) -> None:
    try:
        st = os.stat(directory)
        key = (st.st_dev, st.st_ino)
        if key in ancestors:
            result.errors.append(
                input_diagnostic(directory, SYMLINK_LOOP, "symbolic link loop (not followed)")
            )
            return
        if key in seen_dirs:
            return
        seen_dirs.add(key)
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda entry: entry.name)
    except OSError as exc:
        code, reason = _stat_failure(directory, exc)
        result.errors.append(input_diagnostic(directory, code, reason))
        return
    ancestors = ancestors | {key}
    for entry in entries:
        if is_excluded(entry.path, patterns):
            continue
        if entry.is_symlink() and not os.path.exists(entry.path):
            try:
                os.stat(entry.path)
            except OSError as exc:
                if exc.errno == 40 or entry.name.endswith(SUFFIXES):
                    code, reason = _stat_failure(entry.path, exc)
                    result.errors.append(input_diagnostic(entry.path, code, reason))
            continue
        if entry.is_dir():
            _walk(entry.path, patterns, result, seen_files, ancestors, seen_dirs)
        elif entry.name.endswith(SUFFIXES):
            try:
                _add_file(entry.path, entry.stat(), result, seen_files)
            except OSError as exc:
                code, reason = _stat_failure(entry.path, exc)
                result.errors.append(input_diagnostic(entry.path, code, reason))
