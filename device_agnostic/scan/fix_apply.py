"""Apply findings' rewrites to one module with libcst, keeping its formatting and comments.

The scanner reports positions from ``ast`` (1-based lines, UTF-8 byte columns); libcst's
PositionProvider counts characters and leaves a node's own parentheses out, as ``ast`` does, so
a finding names the one expression whose span it is. Only the top-level statements that hold a
finding are parsed with libcst, a few at a time (``CHUNK_LINES``), so a large file costs what its
findings do. Only this module imports libcst, and only the fixer imports this module: a scan
never pays for it.
"""

from __future__ import annotations

import ast
import bisect
import tokenize
from collections.abc import Iterator, Sequence
from io import BytesIO

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

from .engine import split_lines, statement_groups
from .fix_edits import BUILDERS, CHECKED, same_code
from .rules import Finding

Span = tuple[int, int, int, int]


def _module_level(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The statements that bind module globals: ``body`` and the blocks of its ``if``/``try``/
    ``with`` statements (``try: import torch``), not function or class bodies."""
    for node in body:
        yield node
        if isinstance(node, ast.If | ast.Try | ast.TryStar | ast.With):
            for block in ("body", "orelse", "finalbody"):
                yield from _module_level(getattr(node, block, []))
            for handler in getattr(node, "handlers", []):
                yield from _module_level(handler.body)


def torch_root(tree: ast.Module) -> tuple[str | None, bool]:
    """The name module-level code reaches torch by, and whether ``import torch`` must be added.

    ``import torch`` / ``import torch.x`` bind ``torch``; ``import torch as t`` binds ``t``. A
    module that binds neither at module level gets ``import torch``, unless it names ``torch``
    anywhere else: ``from x import torch`` means another torch, and an ``import torch`` inside a
    function is a deliberate lazy or optional import that a top-level one would defeat. Then
    nothing in the file is rewritten (``(None, False)``).
    """
    aliases: list[str] = []
    for node in _module_level(tree.body):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "torch" or (alias.name.startswith("torch.") and not alias.asname):
                    aliases.append(alias.asname or "torch")
    if "torch" in aliases:
        return "torch", False
    if aliases:
        return aliases[0], False
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name.split(".", 1)[0]) == "torch":
                    return None, False
    return "torch", True


def _char_col(lines: Sequence[str], line: int, byte_col: int) -> int:
    """The 0-based character column of a 0-based UTF-8 byte offset on 1-based ``line`` (ast
    counts UTF-8 bytes of the decoded line, whatever the file's encoding, a BOM left out)."""
    if not 0 < line <= len(lines):
        return byte_col
    return len(lines[line - 1].encode("utf-8")[:byte_col].decode("utf-8", errors="ignore"))


def _paren_span(node: cst.BaseExpression, pos: CodeRange) -> Span:
    """The span ``ast`` gives ``node``: its own, except that a parenthesised tuple's includes
    its innermost parentheses (libcst leaves every pair out)."""
    span = (pos.start.line, pos.start.column, pos.end.line, pos.end.column)
    if not isinstance(node, cst.Tuple) or not node.lpar or not node.rpar:
        return span
    after = node.lpar[-1].whitespace_after
    before = node.rpar[0].whitespace_before
    if not isinstance(after, cst.SimpleWhitespace) or not isinstance(before, cst.SimpleWhitespace):
        return span  # a line break inside the parentheses: no finding will match
    return (
        span[0],
        span[1] - 1 - len(after.value),
        span[2],
        span[3] + len(before.value) + 1,
    )


def _assigned(node: cst.CSTNode, parent: cst.CSTNode | None) -> bool:
    """Whether ``node`` is written to (``torch.cuda.x = ...``, ``del``, a loop target): that
    patches the CUDA module, it is not a use to move elsewhere."""
    if isinstance(parent, cst.AssignTarget | cst.Del | cst.AsName):
        return True
    targets = (cst.AugAssign, cst.AnnAssign, cst.For, cst.CompFor)
    return isinstance(parent, targets) and parent.target is node


class _Fixer(cst.CSTTransformer):
    """Rewrites the expressions at the findings' spans. Subtrees whose lines hold no finding
    are not entered, and parents are tracked on a stack: on a large module, libcst's parent and
    expression-context providers would cost more than the parse."""

    METADATA_DEPENDENCIES = (PositionProvider,)

    def __init__(self, targets: dict[Span, Finding], root: str) -> None:
        super().__init__()
        self.targets = targets
        self.lines = sorted({span[0] for span in targets})
        self.root = root
        self.applied: list[Finding] = []
        self.stack: list[cst.CSTNode] = []

    def on_visit(self, node: cst.CSTNode) -> bool:
        self.stack.append(node)
        pos = self.get_metadata(PositionProvider, node, None)
        if pos is None:
            return True
        start = pos.start.line
        decorators = getattr(node, "decorators", ())
        if decorators:  # a def's or class's position starts after its decorators
            start = self.get_metadata(PositionProvider, decorators[0]).start.line
        i = bisect.bisect_left(self.lines, start)
        return i < len(self.lines) and self.lines[i] <= pos.end.line

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode):
        self.stack.pop()
        if not isinstance(original_node, cst.BaseExpression) or not self.targets:
            return updated_node
        pos = self.get_metadata(PositionProvider, original_node, None)
        if pos is None:
            return updated_node
        span = _paren_span(original_node, pos)
        finding = self.targets.get(span)
        if finding is None:
            return updated_node
        parent = self.stack[-1] if self.stack else None
        if _assigned(original_node, parent):
            return updated_node
        del self.targets[span]  # one rewrite per span
        build = BUILDERS[finding.rule]
        try:
            # The builder run on the untouched node, with torch spelled "torch", must give
            # exactly the scanner's replacement; the real edit keeps nested fixes and the alias.
            if finding.rule in CHECKED:
                check = build(finding, original_node, parent, "torch")
                if check is None or not same_code(check, finding.replacement):
                    return updated_node
            new = build(finding, updated_node, parent, self.root)
        except (cst.ParserSyntaxError, cst.CSTValidationError):
            return updated_node
        if new is None:
            return updated_node
        self.applied.append(finding)
        return new


def _decode(data: bytes) -> tuple[str, str]:
    """The encoding of ``data`` (as libcst and ast find it) and its text."""
    encoding = tokenize.detect_encoding(BytesIO(data).readline)[0]
    return encoding, data.decode(encoding, errors="replace")


def spans(data: bytes, findings: Sequence[Finding]) -> dict[Span, Finding]:
    """The findings with a rewrite, by their span in libcst's terms (character columns); the
    first one of a span wins."""
    lines = split_lines(_decode(data)[1])
    targets: dict[Span, Finding] = {}
    for f in findings:
        if f.rule not in BUILDERS or not f.replacement:
            continue
        span = (
            f.line,
            _char_col(lines, f.line, f.col - 1),
            f.end_line,
            _char_col(lines, f.end_line, f.end_col - 1),
        )
        targets.setdefault(span, f)
    return targets


def apply_fixes(path: str, data: bytes, findings: Sequence[Finding]) -> tuple[bytes, list[Finding]]:
    """``data`` with the rewrites of ``findings`` applied, and the findings that were applied.

    ``data`` must parse with ``ast`` (the findings came from that parse); a libcst parse error
    propagates as ``libcst.ParserSyntaxError``.
    """
    tree = ast.parse(data, filename=path)
    root, add_import = torch_root(tree)
    if root is None:
        return data, []
    groups = _statement_groups(tree)
    del tree  # a large module's ast outweighs the chunks' libcst trees: freed before them
    targets = spans(data, findings)
    if not targets:
        return data, []
    chunked = _apply_in_chunks(groups, data, targets, root, add_import)
    if chunked is not None:
        return chunked
    return _apply_whole(data, targets, root, add_import)


def _apply_whole(
    data: bytes, targets: dict[Span, Finding], root: str, add_import: bool
) -> tuple[bytes, list[Finding]]:
    """The rewrite with one libcst tree of the whole module: for what ``_apply_in_chunks``
    cannot cut into statements."""
    module = cst.parse_module(data)
    fixer = _Fixer(targets, root)
    fixed = MetadataWrapper(module, unsafe_skip_copy=True).visit(fixer)
    if not fixer.applied:
        return data, []
    if add_import:
        fixed = _add_torch_import(fixed)
    return fixed.bytes, fixer.applied


def _add_torch_import(module: cst.Module) -> cst.Module:
    context = CodemodContext()
    AddImportsVisitor.add_needed_import(context, "torch")
    return AddImportsVisitor(context).transform_module(module)


# libcst costs about 1 ms and 20-35 kB of memory a line of source to parse and place, whatever
# the line holds: one tree of a whole 5 MB module took minutes and gigabytes (issue 12,
# benchmarks/scan_fix_large.py), although only the statements with a finding change. So only
# those are parsed, a few adjacent ones at a time (a parse has a fixed cost worth sharing) and
# up to this many lines (a longer statement is parsed whole): time follows the findings and
# memory the largest chunk.
CHUNK_LINES = 200


def _statement_groups(tree: ast.Module) -> list[tuple[int, int, bool]]:
    """``engine.statement_groups`` as (first line, last line, all imports): each group is a
    module of its own."""
    imports = ast.Import | ast.ImportFrom
    return [
        (first, last, all(isinstance(node, imports) for node in nodes))
        for first, last, nodes in statement_groups(tree)
    ]


def _chunks(
    groups: list[tuple[int, int, bool]], lines: Sequence[int], head: bool
) -> list[tuple[int, int]]:
    """The line ranges to parse: runs of adjacent statement groups holding one of ``lines``.
    With ``head`` the first range starts at line 1 and ends after the first statement that
    follows the leading imports: AddImportsVisitor looks no further to place ``import torch``."""
    starts = [g[0] for g in groups]
    wanted: set[int] = set()
    for line in lines:
        i = bisect.bisect_right(starts, line) - 1
        if i >= 0 and line <= groups[i][1]:
            wanted.add(i)
    chunks: list[tuple[int, int]] = []
    last = -1
    if head and groups:
        last = next((i for i in range(1, len(groups)) if not groups[i][2]), len(groups) - 1)
        chunks.append((1, groups[last][1]))
    for i in sorted(wanted):
        if i <= last:
            continue
        first, end, _ = groups[i]
        if chunks and i == last + 1 and end - chunks[-1][0] < CHUNK_LINES:
            chunks[-1] = (chunks[-1][0], end)
        else:
            chunks.append((first, end))
        last = i
    return chunks


def _apply_in_chunks(
    groups: list[tuple[int, int, bool]],
    data: bytes,
    targets: dict[Span, Finding],
    root: str,
    add_import: bool,
) -> tuple[bytes, list[Finding]] | None:
    """The rewrite made statement by statement (see CHUNK_LINES), or None where a chunk does
    not parse on its own (a decorator whose ``@(`` is a line above its name, a backslash ending
    a statement) or the source does not decode and encode back to the same bytes."""
    encoding, text = _decode(data)
    if text.encode(encoding) != data:
        return None
    lines = split_lines(text)
    by_line = sorted(targets.items(), key=lambda item: item[0])
    starts = [span[0] for span, _ in by_line]
    chunks = _chunks(groups, starts, add_import)
    applied: list[Finding] = []
    pieces: list[str] = []
    done = 0  # lines copied to pieces so far
    head_index = -1
    for first, last in chunks:
        source = "".join(lines[first - 1 : last])
        offset = first - 1
        local = {
            (l1 - offset, c1, l2 - offset, c2): finding
            for (l1, c1, l2, c2), finding in by_line[
                bisect.bisect_left(starts, first) : bisect.bisect_right(starts, last)
            ]
        }
        try:
            module = cst.parse_module(source)
        except cst.ParserSyntaxError:
            return None
        fixer = _Fixer(local, root)
        if local:
            module = MetadataWrapper(module, unsafe_skip_copy=True).visit(fixer)
        applied += fixer.applied
        pieces.append("".join(lines[done:offset]))
        if add_import and head_index < 0:  # the first chunk (see _chunks)
            head_index = len(pieces)
            pieces.append("")
            head = module
        else:
            pieces.append(module.code if fixer.applied else source)
        done = last
    if not applied:
        return data, []
    if head_index >= 0:
        pieces[head_index] = _add_torch_import(head).code
    pieces.append("".join(lines[done:]))
    return "".join(pieces).encode(encoding), applied
