"""How each rule's finding becomes a libcst edit: one builder per fixable rule.

A builder gets the node a finding points at, its parent and the name torch is bound to, and
returns the node to put in its place, or None when this use cannot be rewritten mechanically
(the finding then stays, report-only). Builders rebuild around the user's own sub-nodes (the
receiver of ``.cuda()``, the arguments of ``autocast(...)``) instead of pasting the finding's
``ast.unparse`` text, so comments and formatting inside them survive.

Fixable: DA101, DA102, DA103, DA104, DA105 (calls and decorators), DA106, DA107 (``==``/``!=``
and allow-lists), DA108, DA110, DA111 (``nvtx.range`` only). Report-only: DA109 (the replacement
is a statement, not an expression) and the other DA111 calls (push/pop pairs become a ``with``).
Left as well: ``.cuda(device=i)`` and ``.cuda(*args)`` (the finding's replacement is not a
faithful ``.to()``), a bare ``amp.autocast`` outside a decorator, ``is "cuda"`` comparisons.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

import libcst as cst

from .rules import Finding
from .rules.base import ACCELERATOR_TYPE

ACC = "torch.accelerator.current_accelerator()"
ACC_TYPE = ACCELERATOR_TYPE

Builder = Callable[
    [Finding, cst.BaseExpression, cst.CSTNode | None, str], cst.BaseExpression | None
]


class _RenameTorch(cst.CSTTransformer):
    """Generated code says ``torch``; a module that imports it as ``t`` gets ``t``."""

    def __init__(self, root: str) -> None:
        super().__init__()
        self.root = root

    def leave_Name(self, original_node: cst.Name, updated_node: cst.Name) -> cst.Name:
        return (
            updated_node.with_changes(value=self.root)
            if updated_node.value == "torch"
            else updated_node
        )


def generated(code: str, root: str) -> cst.BaseExpression:
    """The expression ``code`` (written with ``torch``) with torch spelled ``root``."""
    node = cst.parse_expression(code)
    if root != "torch":
        node = node.visit(_RenameTorch(root))
    return node


def _string_value(node: cst.CSTNode) -> str | None:
    if isinstance(node, cst.SimpleString | cst.ConcatenatedString):
        value = node.evaluated_value
        return value if isinstance(value, str) else None
    return None


def _replace(finding: Finding, node: cst.BaseExpression, parent, root: str):
    """The finding's replacement, whole: for names and literals that carry no user code."""
    return generated(finding.replacement, root)


def _elements(literal: str, code: str) -> Builder:
    """In an allow-list (tuple/list/set), swap the ``literal`` elements for ``code``; a lone
    literal is replaced whole. Never the whole collection: ``x in (a, b)`` must stay a test of
    membership (the finding's ``(…, ...)`` replacement is a hint, not code)."""

    def build(finding: Finding, node: cst.BaseExpression, parent, root: str):
        if isinstance(node, cst.Tuple | cst.List | cst.Set):
            elements = [
                e.with_changes(value=generated(code, root))
                if isinstance(e, cst.Element) and _string_value(e.value) == literal
                else e
                for e in node.elements
            ]
            return node.with_changes(elements=elements)
        if _string_value(node) != literal:
            return None
        if isinstance(parent, cst.ComparisonTarget) and isinstance(
            parent.operator, cst.Is | cst.IsNot
        ):
            return None  # `is "cuda"` compares identity; a rewrite would not mean the same
        return generated(code, root)

    return build


def _dot_cuda(finding: Finding, node: cst.BaseExpression, parent, root: str):
    """``x.cuda(args)`` -> ``x.to(<accelerator device>, kwargs)``, keeping ``x`` as written."""
    if not isinstance(node, cst.Call) or not isinstance(node.func, cst.Attribute):
        return None
    if any(arg.keyword is not None and arg.keyword.value == "device" for arg in node.args):
        return None  # .cuda(device=i) has no faithful .to() spelling in the finding
    args = list(node.args)
    if args and args[0].keyword is None and not args[0].star:
        # An index literal: the accelerator's device with that index; any other argument (a
        # torch.device, a string, an index in a variable) goes to .to() as it is (DA102).
        if isinstance(args[0].value, cst.Integer):
            device = generated(f"torch.device({ACC_TYPE}, 0)", root)
            assert isinstance(device, cst.Call)
            index = device.args[1].with_changes(value=args[0].value)
            args[0] = args[0].with_changes(value=device.with_changes(args=[device.args[0], index]))
    else:
        args.insert(0, cst.Arg(generated(ACC, root)))
    func = node.func.with_changes(attr=cst.Name("to"))
    return node.with_changes(func=func, args=args)


def _amp(finding: Finding, node: cst.BaseExpression, parent, root: str):
    """``torch.cuda.amp.X(args)`` -> ``torch.amp.X(<device type>, args)``; a bare decorator
    ``@custom_fwd`` gets the replacement whole. A bare name anywhere else (``cls = autocast``)
    is left: the replacement is a call, which would change what the name holds."""
    if not isinstance(node, cst.Call):
        return generated(finding.replacement, root) if isinstance(parent, cst.Decorator) else None
    proposed = generated(finding.replacement, root)
    if not isinstance(proposed, cst.Call) or not proposed.args:
        return None
    # the device argument is the scanner's; the user's arguments follow it as written
    return node.with_changes(func=proposed.func, args=[proposed.args[0], *node.args])


_SAFE_PARENTS = (
    cst.If,
    cst.While,
    cst.Assign,
    cst.Return,
    cst.Arg,
    cst.Element,
    cst.CompIf,
    cst.BooleanOperation,
    cst.ListComp,
    cst.SetComp,
    cst.GeneratorExp,
)


def _is_cuda(finding: Finding, node: cst.BaseExpression, parent, root: str):
    """``x.is_cuda`` -> ``x.device.type == <device type>``, parenthesised unless the parent
    surely takes a whole comparison (``x.is_cuda == y`` must not become a chained comparison)."""
    if not isinstance(node, cst.Attribute):
        return None
    device_type = cst.Attribute(cst.Attribute(node.value, cst.Name("device")), cst.Name("type"))
    compare = cst.Comparison(
        left=device_type,
        comparisons=[cst.ComparisonTarget(cst.Equal(), generated(ACC_TYPE, root))],
    )
    safe = isinstance(parent, _SAFE_PARENTS) or (
        isinstance(parent, cst.UnaryOperation) and isinstance(parent.operator, cst.Not)
    )
    if safe or node.lpar:
        return compare.with_changes(lpar=node.lpar, rpar=node.rpar)
    return compare.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])


def _nvtx(finding: Finding, node: cst.BaseExpression, parent, root: str):
    """Only ``nvtx.range(msg)``, a context manager as record_function is; push/pop pairs and
    marks need a ``with`` block around the code between them."""
    name = node.attr.value if isinstance(node, cst.Attribute) else getattr(node, "value", "")
    return generated(finding.replacement, root) if name == "range" else None


# Its keys are fix.FIXABLE_RULES (a test keeps the two equal).
BUILDERS: dict[str, Builder] = {
    "DA101": _replace,
    "DA102": _dot_cuda,
    "DA103": _replace,
    "DA104": _replace,
    "DA105": _amp,
    "DA106": _is_cuda,
    "DA107": _elements("cuda", ACC_TYPE),
    "DA108": _elements("privateuse1", "torch._C._get_privateuse1_backend_name()"),
    "DA110": _replace,
    "DA111": _nvtx,
}
# Builders whose result must be exactly the finding's replacement (modulo formatting): the
# check that the fixer applies what the scanner proposed, no more, no less.
CHECKED = frozenset({"DA101", "DA102", "DA103", "DA104", "DA105", "DA106", "DA110"})


def same_code(node: cst.BaseExpression, replacement: str) -> bool:
    """Whether ``node`` is the expression ``replacement`` once formatting is set aside."""
    code = cst.Module([]).code_for_node(node)
    try:
        return ast.dump(ast.parse(f"({code})", mode="eval")) == ast.dump(
            ast.parse(replacement, mode="eval")
        )
    except SyntaxError:
        return False
