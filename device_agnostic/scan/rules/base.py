"""What every rule shares: the finding it reports and the context it reads names through."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass

SAFE = "safe"  # the rewrite behaves the same on CUDA; --fix may apply it
REVIEW = "review"  # the rewrite may change behaviour; only an explicit opt-in applies it

CUDA_DEVICE = re.compile(r"^cuda(:\d+)?$")

# The current accelerator's device type, and "cuda" on a machine without one: generated code then
# behaves exactly as the CUDA code it replaces there (``x.is_cuda`` stays False, a
# ``GradScaler`` for CUDA still disables itself with its warning) instead of failing on None.
ACCELERATOR_TYPE = 'getattr(torch.accelerator.current_accelerator(), "type", "cuda")'


@dataclass(frozen=True, order=True)
class Finding:
    """One diagnostic: a rule's finding, or an input the scan could not read (``kind="error"``).

    ``line`` and ``col`` are 1-based (as editors and SARIF count); ``replacement`` is the generic
    code that replaces the flagged expression, and ``fix_safety`` says whether a fixer may apply
    it unasked (``"safe"``) or only after review (``"review"``).
    """

    path: str
    line: int
    col: int
    rule: str
    message: str
    end_line: int = 0
    end_col: int = 0
    replacement: str = ""
    fix_safety: str = ""
    kind: str = "finding"

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Finding:
        return cls(**data)


class Context:
    """The module being scanned: its path, and the names its imports bind.

    Import aliases are resolved module-wide (not per scope): ``import torch as t``,
    ``from torch import cuda`` and ``from torch.cuda import amp`` all make ``qualname`` return
    the ``torch.…`` name a use refers to.
    """

    def __init__(self, path: str, nodes: Iterable[ast.AST]) -> None:
        nodes = list(nodes)
        self.path = path
        # ids of nodes a rule already reported as part of an enclosing node
        self.claimed: set[int] = set()
        # ids of nodes whose finding must be "review", with the reason (an enclosing node
        # decided it: a call's arguments that do not fit the replacement, say)
        self.review: dict[int, str] = {}
        self.aliases: dict[str, str] = {}
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.aliases[alias.asname] = alias.name
                    else:
                        top = alias.name.split(".", 1)[0]
                        self.aliases[top] = top
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if alias.name != "*":
                        self.aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
        # Code that uses torch without importing it (snippets, notebooks) still means torch.
        self.aliases.setdefault("torch", "torch")
        self._nodes = nodes
        self._functions: dict[int, ast.FunctionDef | ast.AsyncFunctionDef] | None = None

    def enclosing_function(self, node: ast.AST) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
        """The innermost function (not lambda) whose body holds ``node``; None at module level.

        Computed on first use only, so files that never ask pay nothing."""
        if self._functions is None:
            self._functions = {}
            functions = [
                n for n in self._nodes if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
            ]
            # Outer functions first: an inner function's mapping overwrites its parent's.
            for function in sorted(functions, key=lambda f: (f.lineno, -(f.end_lineno or 0))):
                for statement in function.body:
                    for child in ast.walk(statement):
                        self._functions[id(child)] = function
        return self._functions.get(id(node))

    def qualname(self, node: ast.expr) -> str | None:
        """The dotted name ``node`` refers to (``t.cuda.sync`` -> ``torch.cuda.sync``)."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        base = self.aliases.get(node.id)
        if base is None:
            return None
        parts.append(base)
        return ".".join(reversed(parts))

    def finding(
        self, rule: Rule, node: ast.AST, message: str, replacement: str, safety: str = ""
    ) -> Finding:
        return Finding(
            path=self.path,
            line=node.lineno,
            col=node.col_offset + 1,
            rule=rule.id,
            message=message,
            end_line=node.end_lineno or node.lineno,
            end_col=(node.end_col_offset or node.col_offset) + 1,
            replacement=replacement,
            fix_safety=safety or rule.fix_safety,
        )


class Rule:
    """A rule: its id, one-line summary, why it matters, and a visitor of some node types.

    The class docstring holds the before/after example. ``visit`` is called for every node of a
    type in ``node_types`` and yields the findings at that node.
    """

    id: str = ""
    name: str = ""
    summary: str = ""
    why: str = ""
    fix_safety: str = REVIEW
    node_types: tuple[type[ast.AST], ...] = ()
    # An opt-in rule runs only when ``select`` names its id exactly (hints, not assumptions).
    opt_in: bool = False

    def visit(self, node: ast.AST, ctx: Context) -> Iterator[Finding]:
        raise NotImplementedError


class QualnameRule(Rule):
    """A rule that flags uses of given ``torch.…`` names: ``targets`` maps each name to
    ``(replacement, fix_safety)``; a use is a name or attribute chain that resolves to it."""

    node_types = (ast.Attribute, ast.Name)
    targets: dict[str, tuple[str, str]] = {}

    def __init_subclass__(cls) -> None:
        super().__init_subclass__()
        cls._last = frozenset(name.rsplit(".", 1)[1] for name in cls.targets)

    def visit(self, node: ast.AST, ctx: Context) -> Iterator[Finding]:
        if isinstance(node, ast.Attribute):
            if node.attr not in self._last:
                return
        elif node.id not in ctx.aliases or not isinstance(node.ctx, ast.Load):
            return
        if id(node) in ctx.claimed:  # part of an enclosing node's finding
            return
        name = ctx.qualname(node)
        target = self.targets.get(name) if name else None
        if target is not None:
            replacement, safety = target
            message = self.message(name, replacement)
            if id(node) in ctx.review:
                safety, message = REVIEW, f"{message} (review: {ctx.review[id(node)]})"
            yield ctx.finding(self, node, message, replacement, safety)

    def message(self, name: str, replacement: str) -> str:
        return f"`{name}` is CUDA-only; use `{replacement}`"


def is_cuda_literal(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and bool(CUDA_DEVICE.match(node.value))
    )


def generic_device(literal: str) -> str:
    """The generic device string for a "cuda" / "cuda:N" literal: a ``str`` as the literal is
    (a ``torch.device`` would break ``"cuda" in device``, string configs and
    ``autocast(device_type=...)``), equal to it on CUDA and on a machine without an
    accelerator, the current accelerator's type everywhere else."""
    index = literal.partition(":")[2]
    if index:
        return f'{ACCELERATOR_TYPE} + ":{index}"'
    return ACCELERATOR_TYPE


def mentions(node: ast.AST, words: tuple[str, ...]) -> bool:
    """Whether the source of ``node`` mentions one of ``words`` (lower case): how a comparison
    tells a device type or backend name (``x.device.type``, ``BACKEND``) from other strings."""
    text = ast.unparse(node).lower()
    return any(word in text for word in words)
