"""DA102-DA104: tensors and modules sent to CUDA by name."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .base import REVIEW, SAFE, Context, Finding, Rule, generic_device, is_cuda_literal


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
            target = f"torch.device({target}.type, {ast.unparse(node.args[0])})"
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

    Before::

        x = torch.zeros(3, device="cuda")
        y = x.to("cuda:1")

    After::

        x = torch.zeros(3, device=torch.accelerator.current_accelerator())
        y = x.to(torch.device(torch.accelerator.current_accelerator().type, 1))
    """

    id = "DA103"
    name = "cuda-device-literal"
    summary = 'hard-coded "cuda" device'
    why = (
        'A "cuda" string pins the code to NVIDIA (and ROCm) GPUs. The current accelerator is '
        "the same device on CUDA and the right one everywhere else."
    )
    fix_safety = SAFE
    node_types = (ast.Call,)

    def visit(self, node: ast.Call, ctx: Context) -> Iterator[Finding]:
        literals = [kw.value for kw in node.keywords if kw.arg == "device"]
        func = node.func
        if node.args and (
            (isinstance(func, ast.Attribute) and func.attr == "to")
            or ctx.qualname(func) == "torch.device"
        ):
            literals.append(node.args[0])
        for literal in literals:
            if is_cuda_literal(literal):
                yield ctx.finding(
                    self,
                    literal,
                    f'device "{literal.value}" is CUDA-only; use the current accelerator',
                    generic_device(literal.value),
                )


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
