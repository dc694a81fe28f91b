"""Availability guards: ``torch.cuda.is_available()`` is only safe to rewrite with what it guards.

Rewriting ``if torch.cuda.is_available():`` to ``torch.accelerator.is_available()`` runs the
guarded code on every other accelerator too. That is the point when the guarded code is
device-generic after the fix, and a crash (or a lost CPU fallback) when it is not:
``"cuda:0" if torch.cuda.is_available() else "cpu"`` with only the guard fixed picks "cuda:0"
on an XPU. So, after all rules have run, each guard finding is settled against its region (the
code it lets run: an ``if`` body, a conditional's branch, the statements after an ``assert``,
the test a ``skipIf`` decorates):

- the region still holds CUDA-only code after the safe fixes (a finding that is not safe, a
  ``torch.cuda`` name with no generic equivalent, a "cuda" string no safe finding covers): the
  guard needs review;
- the region uses a CUDA-only library (apex, bitsandbytes, triton, ...): the check is CUDA by
  design and is not reported at all;
- a guard whose region cannot be known (its value is stored or returned) needs review.
"""

from __future__ import annotations

import ast
import dataclasses

from .base import CUDA_DEVICE, REVIEW, SAFE, Context, Finding
from .cuda_api import GUARDED_ONLY

GUARD = "torch.cuda.is_available"
GUARDS = (GUARD, "torch.accelerator.is_available")
# Libraries that exist for CUDA only: code guarded for them is CUDA by design.
CUDA_ONLY_LIBRARIES = frozenset(
    {
        "apex",
        "bitsandbytes",
        "cupy",
        "flash_attn",
        "nvidia",
        "pycuda",
        "pynvml",
        "tensorrt",
        "torch_tensorrt",
        "transformer_engine",
        "triton",
        "xformers",
    }
)
# Strings that say a check is about NVIDIA hardware or a CUDA-only runtime: an NVLink
# topology check, `nvidia-smi`, onnxruntime's CUDA / TensorRT providers, a -gpu package.
CUDA_ONLY_WORDS = frozenset(
    {
        "nvlink",
        "nvidia_smi",
        "nvml",
        "cudaexecutionprovider",
        "tensorrtexecutionprovider",
        "onnxruntime_gpu",
        "paddlepaddle_gpu",
    }
)
# Names of functions that check NVIDIA hardware (`check_nvlink_connectivity`).
_NVIDIA_NAMES = ("nvlink", "nvidia", "nvml")
# Code under a folder named so (a vendored kernel package such as unsloth's) is CUDA by design.
CUDA_ONLY_FOLDERS = CUDA_ONLY_LIBRARIES | {"unsloth"}
_SKIP_DECORATORS = ("skipIf", "skipUnless", "skipif")


def _parents(nodes: list[ast.AST]) -> dict[int, ast.AST]:
    parents: dict[int, ast.AST] = {}
    for node in nodes:
        for child in ast.iter_child_nodes(node):
            parents[id(child)] = node
    return parents


def _region(call: ast.Call, parents: dict[int, ast.AST]) -> list[ast.AST] | None:
    """The nodes ``call`` (a guard) lets run; None when that cannot be known."""
    node: ast.AST = call
    negated = False
    while True:
        parent = parents.get(id(node))
        if parent is None:
            return None
        if isinstance(parent, ast.UnaryOp) and isinstance(parent.op, ast.Not):
            negated = not negated
        elif isinstance(parent, ast.BoolOp):
            pass  # `a and guard`: the region is still the if's (conservatively, both sides)
        elif isinstance(parent, ast.If | ast.IfExp | ast.While) and node is parent.test:
            # The whole test counts (`device == "cuda" and torch.cuda.is_available()`).
            body = parent.body if isinstance(parent.body, list) else [parent.body]
            orelse = parent.orelse if isinstance(parent.orelse, list) else [parent.orelse]
            if not negated:
                return [parent.test, *body]
            if isinstance(parent, ast.IfExp):
                return [parent.test, *orelse]
            # `if not torch.cuda.is_available(): <fallback>`: once rewritten, another
            # accelerator skips the fallback and runs what follows it.
            block = _block_of(parent, parents) or [parent]
            return [parent.test, *orelse, *block[block.index(parent) + 1 :]]
        elif isinstance(parent, ast.Assert):
            block = _block_of(parent, parents)
            if block is None:
                return None
            rest = block[block.index(parent) + 1 :]
            return [parent.msg, *rest] if parent.msg is not None else rest
        elif isinstance(parent, ast.Call) and _is_skip(parent, parents):
            decorated = parents.get(id(parent))
            while decorated is not None and not isinstance(
                decorated, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
            ):
                decorated = parents.get(id(decorated))
            return [decorated] if decorated is not None else None
        elif isinstance(parent, ast.keyword | ast.Call | ast.Compare):
            pass  # an argument of a skip decorator, or `torch.cuda.is_available() == True`
        else:
            return None
        node = parent


def _block_of(statement: ast.stmt, parents: dict[int, ast.AST]) -> list[ast.stmt] | None:
    parent = parents.get(id(statement))
    for field in ("body", "orelse", "finalbody"):
        block = getattr(parent, field, None)
        if isinstance(block, list) and statement in block:
            return block
    return None


def _is_skip(call: ast.Call, parents: dict[int, ast.AST]) -> bool:
    func = call.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
    return name in _SKIP_DECORATORS


def _uses_cuda_only_library(region: list[ast.AST], ctx: Context) -> bool:
    for top in region:
        for node in ast.walk(top):
            if isinstance(node, ast.Import):
                if any(a.name.split(".")[0] in CUDA_ONLY_LIBRARIES for a in node.names):
                    return True
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                if node.module.split(".")[0] in CUDA_ONLY_LIBRARIES:
                    return True
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                if ctx.aliases.get(node.id, "").split(".")[0] in CUDA_ONLY_LIBRARIES:
                    return True
                if any(word in node.id.lower() for word in _NVIDIA_NAMES):
                    return True  # check_nvlink_connectivity(fabric)
            elif isinstance(node, ast.Attribute):
                if any(word in node.attr.lower() for word in _NVIDIA_NAMES):
                    return True
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                # 'CUDA required for APEX optimizers': the check says what it is for
                words = set(node.value.lower().replace("-", "_").replace(":", " ").split())
                if words & (CUDA_ONLY_LIBRARIES | CUDA_ONLY_WORDS):
                    return True
    return False


def _imports_cuda_only(node: ast.AST) -> bool:
    """``import bitsandbytes as bnb``, ``from extensions.unsloth.executor import x``: any part
    of the module's dotted name is a CUDA-only library."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom) and node.module:
        names = [node.module]
    else:
        return False
    return any(set(name.split(".")) & CUDA_ONLY_FOLDERS for name in names)


def _covered(node: ast.AST, safe: list[Finding]) -> bool:
    start = (node.lineno, node.col_offset + 1)
    end = (node.end_lineno or node.lineno, (node.end_col_offset or node.col_offset) + 1)
    return any((f.line, f.col) <= start and end <= (f.end_line, f.end_col) for f in safe)


def _leftover(region: list[ast.AST], ctx: Context, findings: list[Finding]) -> str:
    """The first CUDA-only thing in ``region`` that the safe fixes leave, or ''."""
    region = [node for node in region if hasattr(node, "lineno")]
    if not region:  # `if not torch.cuda.is_available(): ...` with no else: guards nothing
        return ""
    first = min(getattr(n, "lineno", 1) for n in region)
    last = max(getattr(n, "end_lineno", 0) or getattr(n, "lineno", 0) for n in region)
    inside = [f for f in findings if first <= f.line <= last]
    safe = [f for f in inside if f.fix_safety == SAFE and f.replacement]
    for finding in inside:
        if finding not in safe:
            return f"{finding.rule} at line {finding.line} needs review"
    for top in region:
        for node in ast.walk(top):
            what = ""
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if "cuda" in node.value.lower() or node.value == "nccl":
                    what = repr(node.value)
            elif isinstance(node, ast.Attribute):
                name = ctx.qualname(node) or ""
                if node.attr in ("cuda", "is_cuda") or name.startswith(
                    ("torch.cuda.", "torch.backends.cuda.")
                ):
                    what = ast.unparse(node)
            if what and not _covered(node, safe):
                return f"{what} at line {node.lineno} stays CUDA-only"
    return ""


def _uncovered_device_literal(
    region: list[ast.AST], findings: list[Finding], parents: dict[int, ast.AST]
):
    """The first "cuda" / "cuda:N" string in ``region`` that no safe finding rewrites and that
    is a device chosen, not one compared with (``device == "cuda"`` asks, it does not pick)."""
    safe = [f for f in findings if f.fix_safety == SAFE and f.replacement]
    for top in region:
        for node in ast.walk(top):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and CUDA_DEVICE.match(node.value)
                and not isinstance(parents.get(id(node)), ast.Compare)
                and not _covered(node, safe)
            ):
                return node
    return None


def _positive_regions(nodes: list[ast.AST], parents: dict[int, ast.AST], ctx: Context):
    """The line spans that run only when an availability check (CUDA's or the accelerator's)
    is true."""
    for node in nodes:
        if isinstance(node, ast.Call) and ctx.qualname(node.func) in GUARDS:
            parent = parents.get(id(node))
            if isinstance(parent, ast.If) and parent.test is node:
                yield parent.body[0].lineno, parent.body[-1].end_lineno or parent.lineno


def _promote_guarded(
    findings: list[Finding], nodes: list[ast.AST], parents: dict[int, ast.AST], ctx: Context
) -> list[Finding]:
    """Findings that are safe only under an availability check, made safe where they are."""
    marked = [f for f in findings if GUARDED_ONLY in f.message and f.fix_safety == REVIEW]
    if not marked:
        return findings
    spans = list(_positive_regions(nodes, parents, ctx))
    out = []
    for finding in findings:
        if finding in marked and any(a <= finding.line <= b for a, b in spans):
            finding = dataclasses.replace(finding, fix_safety=SAFE)
        out.append(finding)
    return out


def settle_guards(findings: list[Finding], nodes: list[ast.AST], ctx: Context) -> list[Finding]:
    """``findings`` with each safe availability guard kept safe, made review, or dropped."""
    if any(GUARDED_ONLY in f.message for f in findings):
        findings = _promote_guarded(findings, nodes, _parents(nodes), ctx)
    guards = {
        (f.line, f.col): f
        for f in findings
        if f.rule == "DA101" and f.fix_safety == SAFE and f.message.startswith(f"`{GUARD}`")
    }
    if not findings:
        return findings
    parents = _parents(nodes)
    settled: dict[tuple[int, int], Finding | None] = {}
    by_design_regions: list[list[ast.AST]] = []
    # "nccl" left for review: moving the model elsewhere needs that backend's change too.
    backend = next((f for f in findings if f.rule == "DA110"), None)
    for node in nodes:
        if not isinstance(node, ast.Call) or ctx.qualname(node.func) != GUARD:
            continue
        guard = guards.get((node.func.lineno, node.func.col_offset + 1))
        if guard is None:
            continue
        region = _region(node, parents)
        if region is None:
            # `cuda = torch.cuda.is_available()`: what it guards is where the name is used
            region = _uses_of_stored(node, parents) or None
            if region is not None and not _uses_cuda_only_library(region, ctx):
                region = None
        if region is not None and _uses_cuda_only_library(region, ctx):
            settled[(guard.line, guard.col)] = None  # CUDA by design
            # what an `if` opens for it is too (the NVLink check's device properties)
            by_design_regions.append(_positive_if_body(node, parents))
            continue
        if backend is not None:
            why = f"the collective backend is chosen for CUDA at line {backend.line}"
        elif region is None:
            why = "its value is kept or passed on, so what it guards is unknown"
        else:
            why = _leftover(region, ctx, findings)
        if why:
            settled[(guard.line, guard.col)] = dataclasses.replace(
                guard,
                fix_safety=REVIEW,
                message=f"{guard.message} (review: it guards CUDA-only code: {why}; on another "
                "accelerator the rewritten guard would run it)",
            )
            literal = _uncovered_device_literal(region or [], findings, parents)
            if literal is not None:
                # `"cuda" if torch.cuda.is_available() else "cpu"` where the literal has no
                # rewrite: the guard alone, rewritten, would pick "cuda" on another
                # accelerator ("Torch not compiled with CUDA enabled"), so it gets none either.
                settled[(guard.line, guard.col)] = dataclasses.replace(
                    settled[(guard.line, guard.col)],
                    replacement="",
                    message=f"{guard.message} (no rewrite: it chooses the device "
                    f"{literal.value!r} at line {literal.lineno}, which is not rewritten with "
                    "it; the guard alone would pick CUDA on another accelerator)",
                )
    out = []
    for finding in findings:
        key = (finding.line, finding.col)
        if finding.rule == "DA101" and key in settled:
            if settled[key] is not None:
                out.append(settled[key])
        else:
            out.append(finding)
    if _cuda_only_module(nodes, ctx):
        return []
    by_design = _cuda_only_spans(nodes, parents, ctx, out) + _old_torch_spans(nodes, parents, ctx)
    by_design += _cuda_only_import_spans(nodes, parents)
    by_design += [_region_span(region) for region in by_design_regions]
    return [f for f in out if not any(a <= f.line <= b for a, b in by_design)]


def _region_span(region: list[ast.AST]) -> tuple[int, int]:
    located = [n for n in region if hasattr(n, "lineno")]
    if not located:
        return (0, -1)
    return (
        min(_span(n)[0] for n in located),
        max(getattr(n, "end_lineno", 0) or n.lineno for n in located),
    )


def _positive_if_body(guard: ast.Call, parents: dict[int, ast.AST]) -> list[ast.AST]:
    """The body of the ``if`` whose test is the guard (alone or and-ed); [] for any other
    place (an assert's rest, a negated guard's fallback, a stored value)."""
    node: ast.AST = guard
    while True:
        parent = parents.get(id(node))
        if isinstance(parent, ast.BoolOp) and isinstance(parent.op, ast.And):
            node = parent
            continue
        if isinstance(parent, ast.If) and parent.test is node:
            return list(parent.body)
        return []


def _uses_of_stored(guard: ast.Call, parents: dict[int, ast.AST]) -> list[ast.AST]:
    """For ``name = <test with the guard>``: the statements after it, in its block, that read
    ``name`` (what the stored check decides)."""
    node: ast.AST = guard
    while True:
        parent = parents.get(id(node))
        if parent is None:
            return []
        if isinstance(parent, ast.Assign):
            break
        if not isinstance(parent, ast.BoolOp | ast.UnaryOp | ast.Compare):
            return []
        node = parent
    names = {t.id for t in parent.targets if isinstance(t, ast.Name)}
    block = _block_of(parent, parents)
    if not names or block is None:
        return []
    rest = block[block.index(parent) + 1 :]
    return [
        statement
        for statement in rest
        for n in ast.walk(statement)
        if isinstance(n, ast.Name) and n.id in names and isinstance(n.ctx, ast.Load)
    ]


def _cuda_only_module(nodes: list[ast.AST], ctx: Context) -> bool:
    """A module of GPU kernels (a function decorated with ``@triton.jit`` or
    ``@triton.autotune``), or one under a folder named after a CUDA-only library: CUDA by
    design, nothing in it is reported."""
    # the nearest folders only: where a checkout lives (an absolute path) says nothing
    folders = set(ctx.path.replace("\\", "/").split("/")[:-1][-3:])
    if folders & CUDA_ONLY_FOLDERS:
        return True
    for node in nodes:
        if isinstance(node, ast.FunctionDef):
            for decorator in node.decorator_list:
                target = decorator.func if isinstance(decorator, ast.Call) else decorator
                if (ctx.qualname(target) or "").startswith("triton."):
                    return True
    return False


def _cuda_only_import_spans(nodes: list[ast.AST], parents: dict[int, ast.AST]):
    """The blocks (a function's body, an ``if`` branch) that import a CUDA-only library
    themselves: ``import bitsandbytes as bnb`` before a ``.cuda()`` that quantizes, a test that
    imports an unsloth kernel. Module-level imports do not count (a script that imports apex
    at the top is not CUDA by design throughout)."""
    spans = []
    for node in nodes:
        if not _imports_cuda_only(node):
            continue
        statement = node
        # `try: import tensorrt` / `except ImportError: ...`: the block the try stands in
        while isinstance(parents.get(id(statement)), ast.Try):
            statement = parents[id(statement)]
        parent = parents.get(id(statement))
        if parent is None or isinstance(parent, ast.Module):
            continue
        if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef):
            spans.append(_span(parent))
            continue
        block = _block_of(statement, parents)
        if block:
            spans.append((block[0].lineno, block[-1].end_lineno or block[-1].lineno))
    return spans


def _span(node: ast.AST) -> tuple[int, int]:
    start = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", ()))])
    return start, node.end_lineno or node.lineno


def _cuda_only_spans(nodes, parents, ctx: Context, findings: list[Finding]):
    """Tests skipped without CUDA whose body stays CUDA-only: CUDA by design, not reported."""
    spans = []
    for node in nodes:
        if not isinstance(node, ast.Call) or ctx.qualname(node.func) != GUARD:
            continue
        region = _region(node, parents)
        if not region or len(region) != 1:
            continue
        test = region[0]
        if isinstance(test, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and any(
            _inside(node, d) for d in test.decorator_list
        ):
            if _leftover([*test.body], ctx, findings):
                spans.append(_span(test))
    return spans


def _inside(node: ast.AST, top: ast.AST) -> bool:
    return any(child is node for child in ast.walk(top))


def _old_torch_spans(nodes, parents, ctx: Context):
    """The branch for a torch without the generic API (``if hasattr(torch, "accelerator"):
    ... else: <old code>``, and what follows such an ``if`` whose branch returns): code for
    torch versions that have no generic API, not reported."""
    spans = []
    for node in nodes:
        if not isinstance(node, ast.If):
            continue
        test, negated = node.test, False
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            test, negated = test.operand, True
        if not (
            isinstance(test, ast.Call)
            and getattr(test.func, "id", "") == "hasattr"
            and test.args
            and (ctx.qualname(test.args[0]) or "").startswith("torch")
        ):
            continue
        old = node.body if negated else node.orelse
        if old:
            spans.append((old[0].lineno, old[-1].end_lineno or old[-1].lineno))
        generic = node.orelse if negated else node.body
        if generic and isinstance(generic[-1], ast.Return | ast.Raise):
            block = _block_of(node, parents) or []
            rest = block[block.index(node) + 1 :] if node in block else []
            if rest:
                spans.append((rest[0].lineno, rest[-1].end_lineno or rest[-1].lineno))
    return spans
