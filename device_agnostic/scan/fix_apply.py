"""Apply findings' rewrites to one module with libcst, keeping its formatting and comments.

The scanner reports positions from ``ast`` (1-based lines, UTF-8 byte columns); libcst's
PositionProvider counts characters and leaves a node's own parentheses out, as ``ast`` does, so
a finding names the one expression whose span it is. Only this module imports libcst, and only
the fixer imports this module: a scan never pays for it.
"""

from __future__ import annotations

import ast
import bisect
from collections.abc import Iterator, Sequence

import libcst as cst
from libcst.codemod import CodemodContext
from libcst.codemod.visitors import AddImportsVisitor
from libcst.metadata import CodeRange, MetadataWrapper, PositionProvider

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


def _char_col(lines: Sequence[bytes], line: int, byte_col: int) -> int:
    """The 0-based character column of a 0-based UTF-8 byte offset on 1-based ``line``."""
    if not 0 < line <= len(lines):
        return byte_col
    return len(lines[line - 1][:byte_col].decode("utf-8", errors="ignore"))


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


def apply_fixes(path: str, data: bytes, findings: Sequence[Finding]) -> tuple[bytes, list[Finding]]:
    """``data`` with the rewrites of ``findings`` applied, and the findings that were applied.

    ``data`` must parse with ``ast`` (the findings came from that parse); a libcst parse error
    propagates as ``libcst.ParserSyntaxError``.
    """
    tree = ast.parse(data, filename=path)
    root, add_import = torch_root(tree)
    if root is None:
        return data, []
    lines = data.splitlines()
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
    if not targets:
        return data, []
    module = cst.parse_module(data)
    fixer = _Fixer(targets, root)
    fixed = MetadataWrapper(module, unsafe_skip_copy=True).visit(fixer)
    if not fixer.applied:
        return data, []
    if add_import:
        context = CodemodContext()
        AddImportsVisitor.add_needed_import(context, "torch")
        fixed = AddImportsVisitor(context).transform_module(fixed)
    return fixed.bytes, fixer.applied
