"""DA109-DA111: cuDNN switches, the NCCL backend and NVTX ranges."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .base import ACCELERATOR_TYPE, REVIEW, Context, Finding, QualnameRule, Rule, mentions


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
    }

    def message(self, name: str, replacement: str) -> str:
        return f"`{name}` only affects cuDNN"


class CudnnBenchmarkHint(QualnameRule):
    """``torch.backends.cudnn.benchmark``: a speed hint that other backends ignore (opt-in).

    Before::

        torch.backends.cudnn.benchmark = True

    After::

        # nothing to rewrite: keep it for CUDA, look for the backend's own switch
    """

    id = "DA190"
    name = "cudnn-benchmark-hint"
    summary = "cuDNN autotuning hint (opt-in: harmless elsewhere)"
    why = (
        "Other backends ignore it, which changes nothing but speed; select DA190 to list the "
        "places a port may want a backend's own tuning switch."
    )
    fix_safety = REVIEW
    opt_in = True
    targets = {
        "torch.backends.cudnn.benchmark": ("(CUDA only; other backends tune on their own)", REVIEW)
    }

    def message(self, name: str, replacement: str) -> str:
        return f"`{name}` only tunes cuDNN; other backends ignore it"


class Tf32Switches(QualnameRule):
    """The CUDA-only TF32 switches.

    Before::

        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True

    After::

        torch.set_float32_matmul_precision("high")
    """

    id = "DA112"
    name = "tf32-switches"
    summary = "CUDA-only TF32 switches instead of torch.set_float32_matmul_precision"
    why = (
        "Only CUDA reads these flags; torch.set_float32_matmul_precision tells every backend "
        "how much float32 matmul precision it may trade for speed."
    )
    fix_safety = REVIEW
    targets = {
        "torch.backends.cuda.matmul.allow_tf32": (
            'torch.set_float32_matmul_precision("high")',
            REVIEW,
        ),
        "torch.backends.cudnn.allow_tf32": ('torch.set_float32_matmul_precision("high")', REVIEW),
    }

    def message(self, name: str, replacement: str) -> str:
        return f"`{name}` only affects CUDA; use `{replacement}`"


class CudaProfilerActivity(QualnameRule):
    """``ProfilerActivity.CUDA``: traces CUDA kernels only.

    Before::

        activities = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]

    After::

        activities = torch.profiler.supported_activities()
    """

    id = "DA113"
    name = "cuda-profiler-activity"
    summary = "ProfilerActivity.CUDA leaves other accelerators' kernels out of the trace"
    why = (
        "On XPU, MPS or a PrivateUse1 backend the device's kernels are a different activity; "
        "torch.profiler.supported_activities() lists the ones this build can trace."
    )
    fix_safety = REVIEW
    targets = {
        "torch.profiler.ProfilerActivity.CUDA": ("torch.profiler.supported_activities()", REVIEW),
        "torch.autograd.profiler.ProfilerActivity.CUDA": (
            "torch.profiler.supported_activities()",
            REVIEW,
        ),
    }

    def message(self, name: str, replacement: str) -> str:
        return f"`{name}` traces CUDA only; list `{replacement}` instead"


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
    # Not comparisons: ``args.dist_backend == "nccl"`` is about NCCL itself.
    node_types = (ast.Call, ast.Assign, ast.AnnAssign)

    def visit(self, node: ast.AST, ctx: Context) -> Iterator[Finding]:
        if isinstance(node, ast.Call):
            operands = [*node.args, *(kw.value for kw in node.keywords)]
        else:  # ``backend = "nccl"`` (passed on to init_process_group later)
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is None or not any(mentions(t, ("backend",)) for t in targets):
                return
            operands = [node.value]
            if isinstance(node.value, ast.IfExp):
                operands = [node.value.body, node.value.orelse]
        for operand in operands:
            if isinstance(operand, ast.Constant) and operand.value == "nccl":
                yield ctx.finding(
                    self,
                    operand,
                    '"nccl" works on CUDA only; use the device\'s default backend',
                    f"torch.distributed.get_default_backend_for_device({ACCELERATOR_TYPE})",
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
