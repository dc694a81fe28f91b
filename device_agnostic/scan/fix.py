"""``da-scan --fix`` / ``--diff``: rewrite files, only where the rewrite is proven harmless.

Detection stays with ``ast``; libcst (``fix_apply``) is imported, and a file parsed with it, only
when that file has a finding the fixer may apply. A rewritten file is written only when it
compiles and a fresh scan of it has no more findings than were left unfixed; otherwise it is left
byte for byte as it was and the reason is reported. Writes are atomic (a temporary file in the
same directory, then ``os.replace``) and keep the file's mode, owner and group; a file with hard
links (the rename would split them) or one changed since it was read is left alone, with the
reason.
"""

from __future__ import annotations

import difflib
import os
import stat
import tempfile
import tokenize
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from io import BytesIO
from itertools import repeat

from .engine import DEFAULT_LIMITS, Limits, scan_source
from .parallel import default_jobs
from .rules import SAFE, Finding, Rule
from .rules.cuda_api import review_mocked
from .versions import limit

# Rules with a rewrite for at least some uses (fix_edits.FIXABLE_RULES; repeated here so that
# deciding which files need libcst does not import it).
FIXABLE_RULES = frozenset(
    {"DA101", "DA102", "DA103", "DA104", "DA105", "DA106", "DA107", "DA108", "DA110", "DA111"}
)


def fixable(finding: Finding, unsafe: bool) -> bool:
    """Whether the fixer may try ``finding``: a rule with rewrites, a replacement, and a safe
    one unless ``unsafe``. Some uses are still left (see ``fix_edits``), so this is an upper
    bound: it picks the files worth a libcst parse."""
    if finding.rule == "DA111" and "`torch.cuda.nvtx.range`" not in finding.message:
        return False  # only nvtx.range has a rewrite (fix_edits._nvtx)
    return (
        finding.kind == "finding"
        and finding.rule in FIXABLE_RULES
        and bool(finding.replacement)
        and (unsafe or finding.fix_safety == SAFE)
    )


# libcst takes 0.1-5 s a file; from a few files on, worker processes (about 0.3 s each to start
# and import libcst) win.
MIN_FILES_FOR_POOL = 4


@dataclass(frozen=True)
class Keep:
    """The findings a report shows, by rule id: the ``keep`` filter as an object that worker
    processes can receive (a closure over the configuration cannot be pickled)."""

    rule_ids: frozenset[str]
    torch_version: tuple[int, int] | None = None  # rewrites newer than this are not offered
    mocked: frozenset[str] = frozenset()  # torch.cuda names a test in the scan mocks: review
    limits: Limits = DEFAULT_LIMITS  # what the scan parses (a skipped file is never fixed)

    def __call__(self, finding: Finding) -> bool:
        return finding.rule in self.rule_ids


@dataclass
class FileFix:
    """What fixing one file did: ``after`` is ``before`` unless it was rewritten correctly."""

    path: str
    before: bytes
    after: bytes
    fixed: int = 0
    remaining: list[Finding] = field(default_factory=list)
    error: str = ""

    @property
    def changed(self) -> bool:
        return self.after != self.before


def _compiles(path: str, data: bytes) -> str:
    """'' if ``data`` compiles, else why not."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            compile(data, path, "exec", dont_inherit=True)
    except (SyntaxError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return ""


def fix_source(
    path: str,
    data: bytes,
    rules: Sequence[Rule],
    unsafe: bool,
    keep: Callable[[Finding], bool] = lambda f: True,
) -> FileFix:
    """Fix the source ``data`` of ``path`` in memory. ``keep`` filters the findings as the
    report does (select/ignore), so an ignored rule is never fixed."""
    limits = getattr(keep, "limits", DEFAULT_LIMITS)
    findings = [f for f in scan_source(path, data, rules, limits) if keep(f)]
    findings = review_mocked(findings, getattr(keep, "mocked", frozenset()))
    findings = limit(findings, getattr(keep, "torch_version", None))
    result = FileFix(path, data, data, remaining=findings)
    todo = [f for f in findings if fixable(f, unsafe)]
    if not todo:
        return result
    from .fix_apply import apply_fixes  # libcst: only for files with something to fix

    try:
        after, applied = apply_fixes(path, data, todo)
    except Exception as exc:
        result.error = f"not fixed: libcst could not rewrite it ({type(exc).__name__}: {exc})"
        return result
    if not applied or after == data:
        return result
    why = _compiles(path, after)
    if why:
        result.error = f"not fixed: the rewrite would not compile ({why})"
        return result
    remaining = [f for f in scan_source(path, after, rules, limits) if keep(f)]
    remaining = review_mocked(remaining, getattr(keep, "mocked", frozenset()))
    if len(remaining) > len(findings) - len(applied):
        result.error = "not fixed: the rewrite did not remove the findings it was for"
        return result
    result.after, result.fixed, result.remaining = after, len(applied), remaining
    return result


def fix_file(
    path: str,
    rules: Sequence[Rule],
    unsafe: bool,
    keep: Callable[[Finding], bool] = lambda f: True,
    write: bool = True,
) -> FileFix:
    """Read, fix and (with ``write``) atomically rewrite one file."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
            read = os.fstat(handle.fileno())
    except OSError as exc:
        return FileFix(path, b"", b"", error=f"not fixed: cannot read: {exc.strerror or exc}")
    result = fix_source(path, data, rules, unsafe, keep)
    if write and result.changed:
        try:
            write_atomic(path, result.after, original=data, read=read)
        except (OSError, NotWritten) as exc:
            result.after, result.fixed = result.before, 0
            if isinstance(exc, NotWritten):
                result.error = f"not fixed: {exc}"
            else:
                result.error = f"not fixed: cannot write: {exc.strerror or exc}"
    return result


class NotWritten(Exception):
    """A correct rewrite that writing would do harm with; the message says why."""


def _owner_differs(temp: str, info: os.stat_result) -> bool:
    now = os.stat(temp)
    return (now.st_uid, now.st_gid) != (info.st_uid, info.st_gid)


def _check_unchanged(target: str, original: bytes, read: os.stat_result) -> None:
    """Raise NotWritten unless ``target`` is still the file read (same inode, size, mtime and
    bytes): another editor's save between the read and the rename must not be lost. A write in
    the instant between this check and the rename is not seen (POSIX has no rename-if-unchanged)."""
    try:
        with open(target, "rb") as handle:
            now = os.fstat(handle.fileno())
            same = (now.st_dev, now.st_ino, now.st_size, now.st_mtime_ns) == (
                read.st_dev,
                read.st_ino,
                read.st_size,
                read.st_mtime_ns,
            )
            same = same and handle.read() == original
    except OSError:
        same = False
    if not same:
        raise NotWritten("it changed while it was being fixed (left as it is now; fix it again)")


def write_atomic(
    path: str, data: bytes, original: bytes | None = None, read: os.stat_result | None = None
) -> None:
    """Replace the file behind ``path`` (following links) by ``data`` in one rename, so a reader
    or a crash sees the old file or the new one, never half of it; mode, owner and group are
    kept. Raises NotWritten, writing nothing, where the rename would do harm: a file with hard
    links (they would keep the old file), an owner that cannot be kept (not root), or, given
    the ``original`` bytes and the stat ``read`` with them, a file changed since."""
    target = os.path.realpath(path)
    info = os.stat(target)
    if info.st_nlink > 1:
        raise NotWritten(
            f"it has {info.st_nlink} hard links, which the rewrite (a new file renamed over it)"
            " would split; break the links first (cp FILE FILE.new && mv FILE.new FILE)"
        )
    mode = stat.S_IMODE(info.st_mode)
    directory, name = os.path.split(target)
    fd, temp = tempfile.mkstemp(dir=directory, prefix=f".{name}.", suffix=".da-fix")
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        if _owner_differs(temp, info):
            try:
                os.chown(temp, info.st_uid, info.st_gid)
            except PermissionError as exc:
                raise NotWritten(
                    f"cannot keep its owner and group ({info.st_uid}:{info.st_gid}) on the"
                    f" rewritten file: {exc.strerror or exc}"
                ) from None
        os.chmod(temp, mode)  # after chown, which may clear set-id bits
        if original is not None and read is not None:
            _check_unchanged(target, original, read)
        os.replace(temp, target)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def _text(data: bytes) -> list[str]:
    try:
        encoding, _ = tokenize.detect_encoding(BytesIO(data).readline)
        return data.decode(encoding).splitlines(keepends=True)
    except (SyntaxError, LookupError, UnicodeDecodeError):
        return data.decode("utf-8", errors="replace").splitlines(keepends=True)


def unified_diff(result: FileFix) -> str:
    """The change ``result`` makes, as ``diff -u`` prints it."""
    lines = difflib.unified_diff(
        _text(result.before), _text(result.after), f"a/{result.path}", f"b/{result.path}"
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


@dataclass
class FixRun:
    """Fixing every file that needed it: the findings left (all files) and what was done."""

    findings: list[Finding]
    results: list[FileFix]

    @property
    def fixed(self) -> int:
        return sum(r.fixed for r in self.results)

    @property
    def files(self) -> int:
        return sum(r.changed for r in self.results)

    @property
    def failed(self) -> list[FileFix]:
        return [r for r in self.results if r.error]

    def summary(self, unsafe: bool, write: bool) -> str:
        left = [f for f in self.findings if f.kind == "finding"]
        verb = "Fixed" if write else "Would fix"
        text = f"{verb} {self.fixed} finding{'s' * (self.fixed != 1)} in {self.files} file"
        text += f"{'s' * (self.files != 1)} ({len(left)} remaining"
        if not unsafe:
            more = sum(fixable(f, True) for f in left)
            text += f"; {more} more with --unsafe-fixes"
        return text + ")"


def fix_findings(
    findings: Sequence[Finding],
    rules: Sequence[Rule],
    unsafe: bool,
    keep: Callable[[Finding], bool],
    write: bool,
    jobs: int = 1,
) -> FixRun:
    """Fix the files among ``findings`` (a scan's, already filtered by ``keep``) that have a
    fixable finding, on ``jobs`` processes (0: one per core); the other files are not read
    again. ``keep`` must be picklable (``Keep``) when more than one process is used."""
    paths = sorted({f.path for f in findings if fixable(f, unsafe)})
    jobs = jobs or default_jobs()
    args = (repeat(list(rules)), repeat(unsafe), repeat(keep), repeat(write))
    if jobs <= 1 or len(paths) < MIN_FILES_FOR_POOL:
        results = list(map(fix_file, paths, *args))
    else:
        with ProcessPoolExecutor(max_workers=min(jobs, len(paths))) as pool:
            results = list(pool.map(fix_file, paths, *args))
    redone = {r.path for r in results if r.changed}
    left = [f for f in findings if f.path not in redone]
    for r in results:
        if r.changed:
            left += r.remaining
    return FixRun(sorted(left), results)
