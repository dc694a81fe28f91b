"""DA106-DA108: branches that test for CUDA (or PrivateUse1) by name."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .base import ACCELERATOR_TYPE, REVIEW, SAFE, Context, Finding, Rule, mentions

# The other side of a comparison must look like a device type, not any string.
_DEVICE_WORDS = ("device", "type")

_ACC_TYPE = ACCELERATOR_TYPE


def _literal(node: ast.AST, value: str) -> bool:
    return isinstance(node, ast.Constant) and node.value == value


def _collection_with(node: ast.AST, value: str) -> bool:
    return isinstance(node, ast.Tuple | ast.List | ast.Set) and any(
        _literal(elt, value) for elt in node.elts
    )


class IsCudaAttribute(Rule):
    """``x.is_cuda`` used to mean "x is on the accelerator".

    Before::

        if x.is_cuda:
            torch.cuda.synchronize()

    After::

        if x.device.type == getattr(torch.accelerator.current_accelerator(), "type", "cuda"):
            torch.accelerator.synchronize()
    """

    id = "DA106"
    name = "is-cuda-attribute"
    summary = "`.is_cuda` leaves other accelerators out"
    why = (
        "`.is_cuda` is False on XPU, MPS and PrivateUse1 tensors, so the accelerator branch is "
        "skipped there. Comparing the device type with the current accelerator's keeps CUDA "
        "behaviour and includes the others."
    )
    fix_safety = REVIEW
    node_types = (ast.Attribute,)

    def visit(self, node: ast.Attribute, ctx: Context) -> Iterator[Finding]:
        if node.attr == "is_cuda" and isinstance(node.ctx, ast.Load):
            replacement = f"{ast.unparse(node.value)}.device.type == {_ACC_TYPE}"
            yield ctx.finding(self, node, "`.is_cuda` is False on other accelerators", replacement)


class CudaTypeComparison(Rule):
    """``device.type == "cuda"`` or an allow-list such as ``in ("cuda", "cpu")``.

    Before::

        if x.device.type == "cuda":
            ...
        if device.type in ("cuda", "cpu"):
            ...

    After::

        if x.device.type == getattr(torch.accelerator.current_accelerator(), "type", "cuda"):
            ...
        if device.type in (getattr(torch.accelerator.current_accelerator(), "type", "cuda"), "cpu"):
            ...
    """

    id = "DA107"
    name = "cuda-type-comparison"
    summary = 'comparison with "cuda" leaves other accelerators out'
    why = (
        'A branch taken only for "cuda" (or an allow-list naming it but not the current '
        "accelerator) silently takes the CPU or error path on every other accelerator."
    )
    fix_safety = REVIEW
    node_types = (ast.Compare, ast.Call)

    def visit(self, node: ast.AST, ctx: Context) -> Iterator[Finding]:
        if isinstance(node, ast.Call):
            # device.startswith("cuda"): a prefix test of the device string
            func = node.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr == "startswith"
                and len(node.args) == 1
                and _literal(node.args[0], "cuda")
                and mentions(func.value, ("device",))
            ):
                yield ctx.finding(
                    self,
                    node.args[0],
                    'prefix test for "cuda" excludes other accelerators',
                    _ACC_TYPE,
                )
            return
        operands = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, operands, operands[1:], strict=False):
            if (
                isinstance(op, ast.In | ast.NotIn)
                and _literal(left, "cuda")
                and mentions(right, ("device",))
            ):  # "cuda" in device
                yield ctx.finding(
                    self, left, 'substring test for "cuda" excludes other accelerators', _ACC_TYPE
                )
                continue
            if isinstance(op, ast.Eq | ast.NotEq | ast.Is | ast.IsNot):
                for side, other in ((left, right), (right, left)):
                    if _literal(side, "cuda") and mentions(other, _DEVICE_WORDS):
                        yield ctx.finding(
                            self,
                            side,
                            'comparison with "cuda" excludes other accelerators',
                            _ACC_TYPE,
                        )
            elif (
                isinstance(op, ast.In | ast.NotIn)
                and _collection_with(right, "cuda")
                and mentions(left, _DEVICE_WORDS)
            ):
                yield ctx.finding(
                    self,
                    right,
                    'device allow-list names "cuda" but not the current accelerator',
                    f"({_ACC_TYPE}, ...)",
                )


class PrivateUse1Comparison(Rule):
    """A comparison with "privateuse1", never true for a backend that renamed itself.

    Before::

        if device.type == "privateuse1":
            ...

    After::

        if device.type == torch._C._get_privateuse1_backend_name():
            ...
    """

    id = "DA108"
    name = "privateuse1-comparison"
    summary = 'comparison with "privateuse1" misses renamed backends'
    why = (
        "Every real PrivateUse1 backend renames itself (npu, hpu, neuron, ...), after which "
        'device types read as that name and never as "privateuse1".'
    )
    fix_safety = SAFE
    node_types = (ast.Compare,)

    def visit(self, node: ast.Compare, ctx: Context) -> Iterator[Finding]:
        for operand in (node.left, *node.comparators):
            if _literal(operand, "privateuse1") or _collection_with(operand, "privateuse1"):
                yield ctx.finding(
                    self,
                    operand,
                    '"privateuse1" is not the device type of a renamed backend',
                    "torch._C._get_privateuse1_backend_name()",
                )
