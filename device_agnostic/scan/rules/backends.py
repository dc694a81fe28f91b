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


_MATMUL_TF32 = "torch.backends.cuda.matmul.allow_tf32"
_CONV_TF32 = "torch.backends.cudnn.allow_tf32"
_MATMUL_READ = 'torch.get_float32_matmul_precision() != "highest"'


class Tf32Switches(QualnameRule):
    """The CUDA-only TF32 switches.

    ``torch.backends.cuda.matmul.allow_tf32 = True`` is ``torch.set_float32_matmul_precision(
    "high")`` on CUDA (``False`` is ``"highest"``, the default), and the precision setting is the
    one other backends may read; a read of the flag becomes
    ``torch.get_float32_matmul_precision() != "highest"``. ``torch.backends.cudnn.allow_tf32``
    is about convolutions, which the matmul precision does not change: it has no device-generic
    spelling (keep it for CUDA: it is reported with no replacement, so the After example
    leaves it out).

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
        "Only CUDA reads `torch.backends.cuda.matmul.allow_tf32`. "
        "torch.set_float32_matmul_precision is the device-independent setting for float32 "
        "matmuls (on CUDA it sets that flag; a backend that can trade matmul precision for "
        "speed reads it). It does not touch convolutions: `cudnn.allow_tf32` has no "
        "device-generic equivalent."
    )
    fix_safety = REVIEW
    node_types = (ast.Assign, ast.Attribute, ast.Name)
    # A read of the matmul flag has an expression replacement; the cuDNN one has none.
    targets = {_MATMUL_TF32: (_MATMUL_READ, REVIEW), _CONV_TF32: ("", REVIEW)}

    def visit(self, node: ast.AST, ctx: Context) -> Iterator[Finding]:
        if isinstance(node, ast.Assign):
            # ``flag = value``: the statement is what changes, so the finding spans it.
            if len(node.targets) != 1 or ctx.qualname(node.targets[0]) != _MATMUL_TF32:
                return
            ctx.claimed.add(id(node.targets[0]))
            value = node.value
            if isinstance(value, ast.Constant) and isinstance(value.value, bool):
                precision = '"high"' if value.value else '"highest"'
            else:
                precision = f'"high" if {ast.unparse(value)} else "highest"'
            replacement = f"torch.set_float32_matmul_precision({precision})"
            yield ctx.finding(
                self, node, f"`{_MATMUL_TF32}` only affects CUDA; use `{replacement}`", replacement
            )
            return
        yield from super().visit(node, ctx)

    def message(self, name: str, replacement: str) -> str:
        if name == _CONV_TF32:
            return (
                f"`{name}` only affects cuDNN convolutions; other backends have no such switch "
                "(torch.set_float32_matmul_precision does not change convolutions)"
            )
        return (
            f"`{name}` only affects CUDA; read `{_MATMUL_READ}` (set it with "
            "torch.set_float32_matmul_precision)"
        )


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

    The replacement asks torch.distributed for the default backend of the current accelerator's
    device type ("cuda", and so "nccl", on a machine without an accelerator, as before). It
    raises ``ValueError`` for a device type with no registered default (a PrivateUse1 backend
    registers one with ``Backend.register_backend(name, ..., devices=[device type])``).
    ``init_process_group()`` without a backend is the other spelling: it starts a backend for
    every registered device type ("cpu:gloo,cuda:nccl").

    Before::

        dist.init_process_group("nccl")

    After::

        dist.init_process_group(
            torch.distributed.get_default_backend_for_device(
                getattr(torch.accelerator.current_accelerator(), "type", "cuda")
            )
        )
    """

    id = "DA110"
    name = "nccl-backend"
    summary = 'hard-coded "nccl" collective backend'
    why = (
        "NCCL exists only for CUDA (and ROCm); other accelerators have their own collective "
        "backend (xccl on XPU, gloo on MPS, whatever a PrivateUse1 backend registers). Ask "
        "torch.distributed for the default backend of the device type."
    )
    fix_safety = REVIEW
    # Not comparisons: ``args.dist_backend == "nccl"`` is about NCCL itself.
    node_types = (ast.Call, ast.Assign, ast.AnnAssign, ast.IfExp)

    def visit(self, node: ast.AST, ctx: Context) -> Iterator[Finding]:
        if isinstance(node, ast.IfExp):  # the NCCL switch wherever it stands
            operands = [node]
        elif isinstance(node, ast.Call):
            operands = [*node.args, *(kw.value for kw in node.keywords)]
        else:  # ``backend = "nccl"`` (passed on to init_process_group later)
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if node.value is None or not any(mentions(t, ("backend",)) for t in targets):
                return
            operands = [node.value]
            if isinstance(node.value, ast.IfExp) and not _nccl_if_available(node.value, ctx):
                operands = [node.value.body, node.value.orelse]
        for operand in operands:
            if id(operand) in ctx.claimed:
                continue
            if _nccl_if_available(operand, ctx):
                ctx.claimed.add(id(operand))
                # `"nccl" if dist.is_nccl_available() else "gloo"`: NCCL when the build has it,
                # so "nccl" on a CUDA build even without a GPU. The device's default backend
                # ("gloo" without an accelerator) replaces the whole switch.
                yield ctx.finding(
                    self,
                    operand,
                    '"nccl" when the build has NCCL, else "gloo": use the device\'s default '
                    "backend",
                    "torch.distributed.get_default_backend_for_device(getattr(torch.accelerator."
                    'current_accelerator(check_available=True), "type", "cpu"))',
                )
            elif isinstance(operand, ast.Constant) and operand.value == "nccl":
                yield ctx.finding(
                    self,
                    operand,
                    '"nccl" works on CUDA only; use the device\'s default backend',
                    f"torch.distributed.get_default_backend_for_device({ACCELERATOR_TYPE})",
                )


def _nccl_if_available(node: ast.expr, ctx: Context) -> bool:
    """``"nccl" if dist.is_nccl_available() else <other>``."""
    return (
        isinstance(node, ast.IfExp)
        and isinstance(node.test, ast.Call)
        and ctx.qualname(node.test.func) == "torch.distributed.is_nccl_available"
        and isinstance(node.body, ast.Constant)
        and node.body.value == "nccl"
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
