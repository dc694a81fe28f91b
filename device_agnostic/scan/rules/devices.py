"""DA102-DA104: tensors and modules sent to CUDA by name."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .base import (
    ACCELERATOR_TYPE,
    REVIEW,
    SAFE,
    Context,
    Finding,
    Rule,
    generic_device,
    is_cuda_literal,
)


class DotCudaCall(Rule):
    """``.cuda()`` on a tensor or module.

    Before::

        model = model.cuda()

    After::

        model = model.to(torch.accelerator.current_accelerator())
    """

    id = "DA102"
    name = "dot-cuda-call"
    summary = "`.cuda()` moves to CUDA only"
    why = (
        "`.cuda()` fails on every machine without CUDA, even one with another accelerator. "
        "`.to(torch.accelerator.current_accelerator())` moves to the current device of whichever "
        "accelerator is present (the current CUDA device on CUDA, as `.cuda()` does)."
    )
    fix_safety = SAFE
    node_types = (ast.Call,)

    def visit(self, node: ast.Call, ctx: Context) -> Iterator[Finding]:
        func = node.func
        if not isinstance(func, ast.Attribute) or func.attr != "cuda":
            return
        if ctx.qualname(func) == "torch.cuda":  # a module, not a method
            return
        safety = SAFE if not node.args and not node.keywords else REVIEW
        receiver = ast.unparse(func.value)
        target = "torch.accelerator.current_accelerator()"
        if node.args:  # .cuda(device): the accelerator's device with that index
            target = f"torch.device({ACCELERATOR_TYPE}, {ast.unparse(node.args[0])})"
        args = [target, *(ast.unparse(kw) for kw in node.keywords)]
        replacement = f"{receiver}.to({', '.join(args)})"
        yield ctx.finding(
            self,
            node,
            "`.cuda()` works on CUDA only; use `.to(<accelerator>)`",
            replacement,
            safety,
        )


class CudaDeviceLiteral(Rule):
    """A "cuda" / "cuda:N" device literal in ``device=``, ``.to(...)`` or ``torch.device(...)``.

    Also flagged: a "cuda" branch of a conditional (``"cuda" if torch.cuda.is_available() else
    "cpu"``), a "cuda" assigned to a variable or attribute named like a device, and one returned
    by a function named like one. Those two rewrites need review (the value may be used as a
    string); in a device argument the rewrite is safe.

    Before::

        x = torch.zeros(3, device="cuda")
        y = x.to("cuda:1")

    After::

        x = torch.zeros(3, device=torch.accelerator.current_accelerator())
        y = x.to(torch.device(getattr(torch.accelerator.current_accelerator(), "type", "cuda"), 1))
    """

    id = "DA103"
    name = "cuda-device-literal"
    summary = 'hard-coded "cuda" device'
    why = (
        'A "cuda" string pins the code to NVIDIA (and ROCm) GPUs. The current accelerator is '
        "the same device on CUDA and the right one everywhere else."
    )
    fix_safety = SAFE
    node_types = (ast.Call, ast.Assign, ast.AnnAssign, ast.Return)

    def visit(self, node: ast.AST, ctx: Context) -> Iterator[Finding]:
        if isinstance(node, ast.Call):
            # Passed straight to a device parameter: the generic device means the same on CUDA.
            yield from self._report(self._call_devices(node, ctx), ctx, SAFE)
        elif not isinstance(node.value, ast.Constant | ast.IfExp):
            return  # the common case, decided before looking at names or enclosing functions
        elif isinstance(node, ast.Return):
            # ``def get_device(): return "cuda"``: the caller may treat the result as a string.
            if node.value is not None and _in_device_function(node, ctx):
                yield from self._report([node.value], ctx, REVIEW)
        else:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is not None and any(_names_a_device(t) for t in targets):
                yield from self._report([node.value], ctx, REVIEW)

    @staticmethod
    def _call_devices(node: ast.Call, ctx: Context) -> list[ast.expr]:
        values = [kw.value for kw in node.keywords if kw.arg == "device"]
        func = node.func
        if node.args and (
            (isinstance(func, ast.Attribute) and func.attr == "to")
            or ctx.qualname(func) == "torch.device"
        ):
            values.append(node.args[0])
        return values

    def _report(self, values: list[ast.expr], ctx: Context, safety: str) -> Iterator[Finding]:
        for value in values:
            for literal in _device_literals(value):
                if id(literal) in ctx.claimed:
                    continue
                ctx.claimed.add(id(literal))
                yield ctx.finding(
                    self,
                    literal,
                    f'device "{literal.value}" is CUDA-only; use the current accelerator',
                    generic_device(literal.value),
                    safety,
                )


def _device_literals(value: ast.expr) -> Iterator[ast.Constant]:
    """The "cuda" literals that ``value`` can evaluate to: itself, or a branch of a conditional
    (``"cuda" if torch.cuda.is_available() else "cpu"``), however deeply nested."""
    if isinstance(value, ast.IfExp):
        yield from _device_literals(value.body)
        yield from _device_literals(value.orelse)
    elif is_cuda_literal(value):
        yield value  # type: ignore[misc]


def _names_a_device(target: ast.expr) -> bool:
    """``device = ...``, ``self.device = ...``, ``train_device = ...``: names that hold one."""
    if isinstance(target, ast.Name):
        return "device" in target.id.lower()
    if isinstance(target, ast.Attribute):
        return "device" in target.attr.lower()
    return False


def _in_device_function(node: ast.Return, ctx: Context) -> bool:
    function = ctx.enclosing_function(node)
    return function is not None and "device" in function.name.lower()


class CudaDefaultArgument(Rule):
    """A parameter whose default is a "cuda" device.

    Before::

        def make_buffer(n, device="cuda"): ...

    After::

        def make_buffer(n, device=None):
            device = device or torch.accelerator.current_accelerator()
    """

    id = "DA104"
    name = "cuda-default-argument"
    summary = 'function parameter defaults to "cuda"'
    why = (
        "Every caller that relies on the default gets CUDA, whatever the machine has. A default "
        "of None resolved to the current accelerator keeps CUDA callers unchanged."
    )
    fix_safety = REVIEW
    node_types = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)

    def visit(self, node: ast.AST, ctx: Context) -> Iterator[Finding]:
        defaults = [*node.args.defaults, *node.args.kw_defaults]
        for default in defaults:
            if default is not None and is_cuda_literal(default):
                yield ctx.finding(
                    self,
                    default,
                    f'parameter defaults to "{default.value}"; default to None '
                    "and use the current accelerator",
                    generic_device(default.value),
                )
