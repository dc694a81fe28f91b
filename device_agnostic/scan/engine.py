"""Scan one file: read, parse with ``ast``, run the rules in one walk, honour ``# noqa``.

Inputs the scan cannot analyse are reported as diagnostics of their own, so a scan never stops
at a bad file:

- DA901 (finding) the file does not parse (syntax error, null bytes, nesting too deep);
- DA902 (finding) the file is not valid UTF-8 (nor its declared encoding);
- DA903 (error) the path cannot be read (permissions, not a regular file, vanished);
- DA904 (error) a symbolic link loop (reported by ``discover``);
- DA905 (finding) the file is larger than ``--max-file-size`` or has a line longer than
  ``--max-line-length`` (``Limits``): skipped, never parsed. CPython's AST takes 80 to 500 times
  the source's size (a 20 MB generated line took 3.9 GB and minutes), so generated data files
  are not parsed into gigabytes.
"""

from __future__ import annotations

import ast
import bisect
import os
import re
import tokenize
from collections.abc import Sequence
from dataclasses import dataclass
from io import BytesIO, StringIO

from .rules import ALL_RULES, Context, Finding, Rule
from .rules.guards import settle_guards

SYNTAX_ERROR = "DA901"
NOT_UTF8 = "DA902"
UNREADABLE = "DA903"
SYMLINK_LOOP = "DA904"
TOO_LARGE = "DA905"

INPUT_DIAGNOSTICS: dict[str, str] = {
    SYNTAX_ERROR: "file does not parse",
    NOT_UTF8: "file is not valid UTF-8 (or its declared encoding)",
    UNREADABLE: "path cannot be read",
    SYMLINK_LOOP: "symbolic link loop",
    TOO_LARGE: "file skipped: larger than --max-file-size or a line longer than --max-line-length",
}
ERROR_IDS = frozenset({UNREADABLE, SYMLINK_LOOP})

# Every rule looks for one of these words (case-insensitively): a file with none of them can
# only be checked for syntax, which spares the walk on most of a large tree.
_TRIGGERS = re.compile(rb"cuda|cudnn|nccl|privateuse1", re.IGNORECASE)
_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.I)


@dataclass(frozen=True)
class Limits:
    """The largest file (bytes) and longest line (bytes) the scan parses; 0: no limit.

    The defaults let through every file of torch 2.13 (the largest, 1.4 MB, parses in about
    120 MB; the longest line is 1,405 bytes) and keep a generated file from costing more than
    about a gigabyte (docs/scan-safety.md has the measurement)."""

    max_bytes: int = 2 * 1024 * 1024
    max_line: int = 20_000

    def too_large(self, size: int) -> str:
        if self.max_bytes and size > self.max_bytes:
            return (
                f"skipped: {size:,} bytes, over --max-file-size {self.max_bytes:,} "
                "(raise it, or 0 for no limit, to scan it)"
            )
        return ""

    def skip_reason(self, data: bytes) -> tuple[str, int]:
        """Why ``data`` is not parsed ("" when it is), and the line to report it at."""
        reason = self.too_large(len(data))
        if reason or not self.max_line or len(data) <= self.max_line:
            return reason, 1
        for number, line in enumerate(data.splitlines(), 1):
            if len(line) > self.max_line:
                return (
                    f"skipped: line {number} is {len(line):,} bytes long, over "
                    f"--max-line-length {self.max_line:,} (generated data?; raise it, or 0 for "
                    "no limit, to scan it)",
                    number,
                )
        return "", 1


DEFAULT_LIMITS = Limits()


def input_diagnostic(path: str, rule: str, message: str, line: int = 1, col: int = 1) -> Finding:
    kind = "error" if rule in ERROR_IDS else "finding"
    return Finding(path=path, line=line, col=col, rule=rule, message=message, kind=kind)


def _decode(path: str, data: bytes) -> str | Finding:
    try:
        encoding, _ = tokenize.detect_encoding(BytesIO(data).readline)
        return data.decode(encoding)
    except (SyntaxError, LookupError) as exc:
        return input_diagnostic(path, NOT_UTF8, f"cannot decode: {exc}")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        return input_diagnostic(
            path, NOT_UTF8, f"not valid {exc.encoding} at byte {exc.start}", line=line
        )


# Python's line breaks, as ast numbers lines (str.splitlines also breaks at \f, \v, \x1c, ...).
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n|\Z)")


def split_lines(text: str) -> list[str]:
    """The lines of ``text`` with their line breaks, numbered (from 1) as ``ast`` numbers them."""
    return _LINE.findall(text)[:-1]


def statement_groups(tree: ast.Module) -> list[tuple[int, int, list[ast.stmt]]]:
    """The module's top-level statements as (first line, last line, statements), those that
    share a line (``a = 1; b = 2``) merged: each group's lines tokenize and parse on their own
    (but for oddities such as a backslash after a statement)."""
    groups: list[tuple[int, int, list[ast.stmt]]] = []
    for node in tree.body:
        decorators = getattr(node, "decorator_list", [])
        first = min([node.lineno, *(d.lineno for d in decorators)])
        last = node.end_lineno or node.lineno
        if groups and first <= groups[-1][1]:
            groups[-1][2].append(node)
            groups[-1] = (groups[-1][0], max(groups[-1][1], last), groups[-1][2])
        else:
            groups.append((first, last, [node]))
    return groups


def _comments(text: str, tree: ast.Module, findings: Sequence[Finding]) -> dict[int, str]:
    """The comments on the findings' lines that mention noqa, by line. Tokens, not text: a
    ``"# noqa"`` in a string (or on a line of a multi-line string) is no comment. Only the
    top-level statements holding such a line are tokenized (tokenize is slow); where one does
    not tokenize on its own, its lines are searched whole, as before."""
    lines = split_lines(text)
    wanted = {f.line for f in findings if 0 < f.line <= len(lines)}
    wanted = {line for line in wanted if _NOQA.search(lines[line - 1])}
    if not wanted:
        return {}
    groups = statement_groups(tree)
    starts = [first for first, _, _ in groups]
    comments: dict[int, str] = {}
    held: set[int] = set()
    for line in wanted:
        i = bisect.bisect_right(starts, line) - 1
        if i >= 0 and line <= groups[i][1]:
            held.add(i)
        else:  # not in a statement (no finding should be): the line, as before
            comments[line] = lines[line - 1]
    for i in sorted(held):
        first, last, _ = groups[i]
        source = "".join(lines[first - 1 : last])
        try:
            for token in tokenize.generate_tokens(StringIO(source).readline):
                if token.type == tokenize.COMMENT:
                    comments[token.start[0] + first - 1] = token.string
        except (tokenize.TokenError, SyntaxError):
            comments.update((n, lines[n - 1]) for n in range(first, last + 1))
    return comments


def _suppressed(finding: Finding, comments: dict[int, str]) -> bool:
    match = _NOQA.search(comments.get(finding.line, ""))
    if match is None:
        return False
    codes = match.group("codes")
    return codes is None or finding.rule in re.split(r"[\s,]+", codes.upper())


def scan_source(
    path: str, data: bytes, rules: Sequence[Rule] = ALL_RULES, limits: Limits = DEFAULT_LIMITS
) -> list[Finding]:
    """The findings of ``rules`` in the source ``data`` of ``path``, sorted by position."""
    reason, line = limits.skip_reason(data)
    if reason:
        return [input_diagnostic(path, TOO_LARGE, reason, line=line)]
    text = _decode(path, data)
    if isinstance(text, Finding):
        return [text]
    try:
        tree = ast.parse(text, filename=path)
    except SyntaxError as exc:
        return [
            input_diagnostic(
                path,
                SYNTAX_ERROR,
                f"syntax error: {exc.msg}",
                exc.lineno or 1,
                exc.offset or 1,
            )
        ]
    except (ValueError, RecursionError, MemoryError) as exc:
        return [input_diagnostic(path, SYNTAX_ERROR, f"cannot parse: {exc!r}")]
    if not rules or _TRIGGERS.search(data) is None:
        return []
    findings = list(run_rules(path, tree, rules))
    if not findings:
        return []
    comments = _comments(text, tree, findings)
    return sorted(f for f in findings if not _suppressed(f, comments))


def run_rules(path: str, tree: ast.Module, rules: Sequence[Rule]) -> list[Finding]:
    """One walk over ``tree`` calling each rule on the node types it visits."""
    nodes = list(ast.walk(tree))
    ctx = Context(path, nodes)
    dispatch: dict[type, list[Rule]] = {}
    for rule in rules:
        for node_type in rule.node_types:
            dispatch.setdefault(node_type, []).append(rule)
    findings = [
        finding
        for node in nodes
        for rule in dispatch.get(type(node), ())
        for finding in rule.visit(node, ctx)
    ]
    # A guard is only as safe as what it guards: settled once every rule has spoken.
    return settle_guards(findings, nodes, ctx)


def scan_file(
    path: str, rules: Sequence[Rule] = ALL_RULES, limits: Limits = DEFAULT_LIMITS
) -> list[Finding]:
    """Read and scan one file; an unreadable one gives a DA903 error instead of raising, one
    over the size limit a DA905 finding without being read."""
    try:
        with open(path, "rb") as handle:
            reason = limits.too_large(os.fstat(handle.fileno()).st_size)
            if reason:
                return [input_diagnostic(path, TOO_LARGE, reason)]
            data = handle.read()
    except OSError as exc:
        return [input_diagnostic(path, UNREADABLE, f"cannot read: {exc.strerror or exc}")]
    return scan_source(path, data, rules, limits)
