"""DA109-DA111: cuDNN switches, the NCCL backend and NVTX ranges."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .base import REVIEW, Context, Finding, QualnameRule, Rule, mentions


class CudnnFlags(QualnameRule):
    """``torch.backends.cudnn.deterministic`` / ``benchmark``, which only cuDNN reads.

    Before::

        torch.backends.cudnn.deterministic = True
        torch.backends.cudnn.benchmark = False

    After::

        torch.use_deterministic_algorithms(True)
    """

    id = "DA109"
    name = "cudnn-flags"
    summary = "cuDNN-only determinism/benchmark flags"
    why = (
        "These flags change nothing on other accelerators, so a run that must be deterministic "
        "is not. torch.use_deterministic_algorithms applies to every backend."
    )
    fix_safety = REVIEW
    node_types = (ast.Attribute,)
    targets = {
        "torch.backends.cudnn.deterministic": ("torch.use_deterministic_algorithms(True)", REVIEW),
        "torch.backends.cudnn.benchmark": (
            "torch.backends.cudnn.benchmark (CUDA only; other backends autotune on their own)",
            REVIEW,
        ),
    }

    def message(self, name: str, replacement: str) -> str:
        return f"`{name}` only affects cuDNN"


class NcclBackend(Rule):
    """A hard-coded "nccl" collective backend.

    Before::

        dist.init_process_group("nccl")

    After::

        dist.init_process_group(
            torch.distributed.get_default_backend_for_device(
                torch.accelerator.current_accelerator()))
    """

    id = "DA110"
    name = "nccl-backend"
    summary = 'hard-coded "nccl" collective backend'
    why = (
        "NCCL exists only for CUDA; other accelerators register their own collective backend "
        "(xccl, hccl, ...). Ask torch.distributed for the device's default backend."
    )
    fix_safety = REVIEW
    node_types = (ast.Call, ast.Compare)

    def visit(self, node: ast.AST, ctx: Context) -> Iterator[Finding]:
        if isinstance(node, ast.Call):
            operands = [*node.args, *(kw.value for kw in node.keywords)]
        elif mentions(node, ("backend",)):
            operands = [node.left, *node.comparators]
        else:  # a string compared with something that is not a backend name
            return
        for operand in operands:
            if isinstance(operand, ast.Constant) and operand.value == "nccl":
                yield ctx.finding(
                    self,
                    operand,
                    '"nccl" works on CUDA only; use the device\'s default backend',
                    "torch.distributed.get_default_backend_for_device("
                    "torch.accelerator.current_accelerator())",
                )


class NvtxRange(QualnameRule):
    """``torch.cuda.nvtx`` ranges and marks.

    Before::

        torch.cuda.nvtx.range_push("forward")
        out = model(x)
        torch.cuda.nvtx.range_pop()

    After::

        with torch.profiler.record_function("forward"):
            out = model(x)
    """

    id = "DA111"
    name = "nvtx-range"
    summary = "NVTX ranges instead of torch.profiler.record_function"
    why = (
        "NVTX only exists in CUDA builds; record_function annotates the trace on every device "
        "(and emits NVTX ranges under the CUDA profiler)."
    )
    fix_safety = REVIEW
    targets = {
        f"torch.cuda.nvtx.{name}": ("torch.profiler.record_function", REVIEW)
        for name in ("range_push", "range_pop", "range", "mark", "range_start", "range_end")
    }
