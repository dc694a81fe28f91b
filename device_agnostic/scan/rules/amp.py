"""DA105: the CUDA-only ``torch.cuda.amp`` API."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .base import ACCELERATOR_TYPE, REVIEW, Context, Finding, Rule

_DEV = ACCELERATOR_TYPE


class CudaAmp(Rule):
    """``torch.cuda.amp.autocast`` / ``GradScaler`` / ``custom_fwd`` / ``custom_bwd``.

    Before::

        scaler = torch.cuda.amp.GradScaler()
        with torch.cuda.amp.autocast():
            loss = model(x)

    After::

        scaler = torch.amp.GradScaler(
            getattr(torch.accelerator.current_accelerator(), "type", "cuda")
        )
        with torch.amp.autocast(getattr(torch.accelerator.current_accelerator(), "type", "cuda")):
            loss = model(x)
    """

    id = "DA105"
    name = "cuda-amp"
    summary = "torch.cuda.amp instead of torch.amp with a device type"
    why = (
        "torch.cuda.amp is deprecated and CUDA-only; torch.amp takes the device type, so mixed "
        "precision works on every accelerator with autocast support."
    )
    fix_safety = REVIEW
    _last = frozenset({"autocast", "GradScaler", "custom_fwd", "custom_bwd"})
    node_types = (ast.Call, ast.Attribute, ast.Name)
    # name -> (the torch.amp name, whether the device type is a keyword, fix safety)
    targets = {
        # review: on another accelerator the rewrite turns mixed precision on (other numbers,
        # and a scaler that needs float64 where the device has none, torch's own bug)
        "torch.cuda.amp.autocast": ("torch.amp.autocast", False, REVIEW),
        "torch.cuda.amp.GradScaler": ("torch.amp.GradScaler", False, REVIEW),
        "torch.cuda.amp.custom_fwd": ("torch.amp.custom_fwd", True, REVIEW),
        "torch.cuda.amp.custom_bwd": ("torch.amp.custom_bwd", True, REVIEW),
    }

    def visit(self, node: ast.AST, ctx: Context) -> Iterator[Finding]:
        # A call is reported whole, with its arguments in the replacement; ast.walk visits the
        # call before its callee, so the callee is marked to be skipped.
        call = node if isinstance(node, ast.Call) else None
        callee = node.func if call is not None else node
        if id(callee) in ctx.claimed:
            return
        if isinstance(callee, ast.Attribute):
            if callee.attr not in self._last:
                return
        elif not isinstance(callee, ast.Name) or callee.id not in ctx.aliases:
            return
        name = ctx.qualname(callee)
        if name not in self.targets:
            return
        generic, keyword, safety = self.targets[name]
        device = f"device_type={_DEV}" if keyword else _DEV
        args = [device]
        if call is not None:
            ctx.claimed.add(id(callee))
            args += [ast.unparse(arg) for arg in call.args]
            args += [ast.unparse(kw) for kw in call.keywords]
        replacement = f"{generic}({', '.join(args)})"
        yield ctx.finding(
            self,
            node,
            f"`{name}` is deprecated and CUDA-only; use `{generic}` with a device type",
            replacement,
            safety,
        )
