"""Scan one file: read, parse with ``ast``, run the rules in one walk, honour ``# noqa``.

Inputs the scan cannot analyse are reported as diagnostics of their own, so a scan never stops
at a bad file:

- DA901 (finding) the file does not parse (syntax error, null bytes, nesting too deep);
- DA902 (finding) the file is not valid UTF-8 (nor its declared encoding);
- DA903 (error) the path cannot be read (permissions, not a regular file, vanished);
- DA904 (error) a symbolic link loop (reported by ``discover``).
"""

from __future__ import annotations

import ast
import re
import tokenize
from collections.abc import Sequence
from io import BytesIO

from .rules import ALL_RULES, Context, Finding, Rule
from .rules.guards import settle_guards

SYNTAX_ERROR = "DA901"
NOT_UTF8 = "DA902"
UNREADABLE = "DA903"
SYMLINK_LOOP = "DA904"

INPUT_DIAGNOSTICS: dict[str, str] = {
    SYNTAX_ERROR: "file does not parse",
    NOT_UTF8: "file is not valid UTF-8 (or its declared encoding)",
    UNREADABLE: "path cannot be read",
    SYMLINK_LOOP: "symbolic link loop",
}
ERROR_IDS = frozenset({UNREADABLE, SYMLINK_LOOP})

# Every rule looks for one of these words (case-insensitively): a file with none of them can
# only be checked for syntax, which spares the walk on most of a large tree.
_TRIGGERS = re.compile(rb"cuda|cudnn|nccl|privateuse1", re.IGNORECASE)
_NOQA = re.compile(r"#\s*noqa(?::\s*(?P<codes>[A-Z]+[0-9]+(?:[\s,]+[A-Z]+[0-9]+)*))?", re.I)


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


def _suppressed(finding: Finding, lines: Sequence[str]) -> bool:
    if not 0 < finding.line <= len(lines):
        return False
    match = _NOQA.search(lines[finding.line - 1])
    if match is None:
        return False
    codes = match.group("codes")
    return codes is None or finding.rule in re.split(r"[\s,]+", codes.upper())


def scan_source(path: str, data: bytes, rules: Sequence[Rule] = ALL_RULES) -> list[Finding]:
    """The findings of ``rules`` in the source ``data`` of ``path``, sorted by position."""
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
    lines = text.splitlines()
    return sorted(f for f in findings if not _suppressed(f, lines))


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


def scan_file(path: str, rules: Sequence[Rule] = ALL_RULES) -> list[Finding]:
    """Read and scan one file; an unreadable one gives a DA903 error instead of raising."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as exc:
        return [input_diagnostic(path, UNREADABLE, f"cannot read: {exc.strerror or exc}")]
    return scan_source(path, data, rules)
