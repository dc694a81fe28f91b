"""DA101: ``torch.cuda.X`` where a device-generic API does the same."""

from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Iterable, Iterator

from .base import REVIEW, SAFE, Context, Finding, QualnameRule
from .signatures import accepts

_ACC = "torch.accelerator"
_MOD = "torch.get_device_module(torch.accelerator.current_accelerator())"

_GENERIC: dict[str, tuple[str, str]] = {
    "is_available": (f"{_ACC}.is_available", SAFE),
    "device_count": (f"{_ACC}.device_count", SAFE),
    "current_device": (f"{_ACC}.current_device_index", SAFE),
    "set_device": (f"{_ACC}.set_device_index", SAFE),
    "device": (f"{_ACC}.device_index", REVIEW),
    "synchronize": (f"{_ACC}.synchronize", SAFE),
    "current_stream": (f"{_ACC}.current_stream", SAFE),
    "set_stream": (f"{_ACC}.set_stream", SAFE),
    "stream": (f"{_MOD}.stream", REVIEW),
    "Stream": ("torch.Stream", REVIEW),
    "Event": ("torch.Event", REVIEW),
    "empty_cache": (f"{_ACC}.empty_cache", REVIEW),
    "memory_allocated": (f"{_ACC}.memory_allocated", REVIEW),
    "max_memory_allocated": (f"{_ACC}.max_memory_allocated", REVIEW),
    "memory_reserved": (f"{_ACC}.memory_reserved", REVIEW),
    "max_memory_reserved": (f"{_ACC}.max_memory_reserved", REVIEW),
    "memory_stats": (f"{_ACC}.memory_stats", REVIEW),
    "reset_peak_memory_stats": (f"{_ACC}.reset_peak_memory_stats", SAFE),
    "reset_accumulated_memory_stats": (f"{_ACC}.reset_accumulated_memory_stats", SAFE),
    "mem_get_info": (f"{_MOD}.mem_get_info", REVIEW),
    "manual_seed": (f"{_MOD}.manual_seed", REVIEW),
    "manual_seed_all": (f"{_MOD}.manual_seed_all", REVIEW),
    "get_rng_state": (f"{_MOD}.get_rng_state", REVIEW),
    "set_rng_state": (f"{_MOD}.set_rng_state", REVIEW),
    "get_rng_state_all": (f"{_MOD}.get_rng_state_all", REVIEW),
    "set_rng_state_all": (f"{_MOD}.set_rng_state_all", REVIEW),
    "is_bf16_supported": (f"{_MOD}.is_bf16_supported", REVIEW),
    "get_device_name": (f"{_MOD}.get_device_name", REVIEW),
    "get_device_properties": (f"{_MOD}.get_device_properties", REVIEW),
    "get_device_capability": (f"{_MOD}.get_device_capability", REVIEW),
    # the same class: torch.cuda.OutOfMemoryError is torch.OutOfMemoryError
    "OutOfMemoryError": ("torch.OutOfMemoryError", SAFE),
}


# torch.cuda's memory functions do nothing (or return 0) without CUDA; torch.accelerator's
# raise without an accelerator: the rewrite is safe only where an availability check guards it
# (rules/guards.py makes those safe).
NEEDS_AN_ACCELERATOR = frozenset(
    {
        "empty_cache",
        "memory_allocated",
        "max_memory_allocated",
        "memory_reserved",
        "max_memory_reserved",
        "memory_stats",
    }
)
GUARDED_ONLY = "safe only under an availability check"

# Frameworks that choose a strategy (FSDP, DDP, one device) from the device count and still
# decide by CUDA: a count handed to them must stay CUDA's until the framework changes too
# (litgpt: `torch.accelerator.device_count()` on another accelerator made Lightning pick FSDP,
# "FSDP is only available on GPU").
STRATEGY_FRAMEWORKS = frozenset(
    {"accelerate", "deepspeed", "lightning", "lightning_fabric", "pytorch_lightning"}
)
# Keywords through which a value decides devices or a strategy.
STRATEGY_KEYWORDS = frozenset(
    {"accelerator", "devices", "gpus", "num_devices", "num_gpus", "n_gpu", "strategy"}
)
# A finding on a test's mock of a torch.cuda name (the marker other files' findings are
# matched against: see ``review_mocked``).
MOCKED = "is mocked by a test"
_MOCK_CALLS = ("patch", "object", "setattr")
_MOCKED_NAME = re.compile(r"(?:^|\.)torch\.cuda\.(\w+)$")
_FINDING_NAME = re.compile(r"^`torch\.cuda\.(\w+)`")


class CudaApiWithGenericEquivalent(QualnameRule):
    """``torch.cuda.X`` where ``torch.accelerator`` (or the device module) does the same.

    Before::

        if torch.cuda.is_available():
            torch.cuda.synchronize()

    After::

        if torch.accelerator.is_available():
            torch.accelerator.synchronize()
    """

    id = "DA101"
    name = "cuda-api-with-generic-equivalent"
    summary = "torch.cuda API with a device-generic equivalent"
    why = (
        "torch.cuda.* only ever talks to CUDA: on XPU, MPS or a PrivateUse1 backend the code "
        "silently reports no device or fails. torch.accelerator and torch.get_device_module() "
        "do the same on whichever accelerator is present, and the same as before on CUDA."
    )
    fix_safety = SAFE
    targets = {f"torch.cuda.{name}": value for name, value in _GENERIC.items()}
    node_types = (ast.Call, ast.Attribute, ast.Name, ast.BoolOp, ast.If)

    def visit(self, node: ast.AST, ctx: Context) -> Iterator[Finding]:
        if isinstance(node, ast.If):
            # `if torch.cuda.device_count() > 1: model = nn.DataParallel(model)`: the count
            # chooses a parallel strategy, which may be CUDA-only (DataParallel raises on
            # other accelerators: torch._C has no _scatter there).
            chosen = _parallel_strategy(node.body)
            if chosen:
                why = f"it decides whether to use {chosen}, which may be CUDA-only"
                self._review_calls(node.test, ctx, why, deep=True)
            return
        if isinstance(node, ast.BoolOp):
            # `torch.cuda.device_count() or 1`: the fallback is CUDA's answer, and the value
            # goes on to decide something (a strategy, a test's expectations) the rewrite
            # would change on another accelerator.
            if isinstance(node.op, ast.Or):
                for value in node.values:
                    self._review_calls(value, ctx, "its value has an `or` fallback", deep=False)
            return
        if isinstance(node, ast.Call):
            # Calls are visited before their callee: decide here whether the arguments fit
            # the replacement's signature (SIGNATURES), and let the callee's finding say so.
            yield from self._mock(node, ctx)
            for keyword in node.keywords:
                if keyword.arg in STRATEGY_KEYWORDS:
                    why = f"it decides `{keyword.arg}=`, which the callee may read as CUDA's"
                    self._review_calls(keyword.value, ctx, why, deep=True)
            name = ctx.qualname(node.func)
            target = self.targets.get(name) if name else None
            if target is not None:
                why = accepts(target[0], len(node.args), [kw.arg for kw in node.keywords])
                if why:
                    ctx.review[id(node.func)] = f"{why}: pass it positionally, then fix"
                framework = _strategy_framework(ctx)
                if name == "torch.cuda.device_count" and framework:
                    ctx.review.setdefault(
                        id(node.func),
                        f"the module hands devices to {framework}, which chooses its strategy "
                        "by CUDA: another accelerator's count would pick a CUDA-only one",
                    )
            return
        yield from super().visit(node, ctx)

    def _review_calls(self, value: ast.expr, ctx: Context, why: str, deep: bool) -> None:
        calls = ast.walk(value) if deep else [value]
        for call in calls:
            if isinstance(call, ast.Call) and ctx.qualname(call.func) in self.targets:
                ctx.review.setdefault(id(call.func), why)

    def _mock(self, node: ast.Call, ctx: Context) -> Iterator[Finding]:
        """``mock.patch("pkg.torch.cuda.device_count")``, ``patch.object(torch.cuda, "X")``,
        ``monkeypatch.setattr(torch.cuda, "X", ...)``: a test that fakes a torch.cuda function.
        Reported (the mock must follow the code once it is rewritten), and every use of that
        name in the scan becomes review (``review_mocked``): the rewritten code would no longer
        reach the mock, and the test would run against the real machine."""
        func = node.func
        call = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if call not in _MOCK_CALLS or not node.args or not _is_test_file(ctx.path):
            return  # a library that patches torch.cuda for itself (aot_autograd) is no test
        first, name = node.args[0], None
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            match = _MOCKED_NAME.search(first.value)
            name = match.group(1) if match else None
            where = first
        elif ctx.qualname(first) == "torch.cuda" and len(node.args) > 1:
            second = node.args[1]
            if isinstance(second, ast.Constant) and isinstance(second.value, str):
                name, where = second.value, second
        if name not in _GENERIC:
            return
        replacement = _GENERIC[name][0]
        yield ctx.finding(
            self,
            where,
            f"`torch.cuda.{name}` {MOCKED}: once the code it fakes is rewritten, mock "
            f"`{replacement}` instead (every use of it in this scan is left for review)",
            "",
            REVIEW,
        )

    def message(self, name: str, replacement: str) -> str:
        if name.rsplit(".", 1)[1] in NEEDS_AN_ACCELERATOR:
            return (
                f"`{name}` is CUDA-only; use `{replacement}` ({GUARDED_ONLY}: without an "
                "accelerator it raises, where torch.cuda's returns 0 or does nothing)"
            )
        if replacement.startswith(_MOD):
            seeding = (
                "; to seed, torch.manual_seed(seed) already seeds every device"
                if "seed" in name
                else ""
            )
            return (
                f"`{name}` is CUDA-only; `{replacement}` works only where the accelerator's "
                f"module has it (torch.cpu has none of these, nor have all backends){seeding}"
            )
        return super().message(name, replacement)


_STRATEGY_NAMES = ("DataParallel", "Strategy", "FSDP", "fully_shard", "DeepSpeed")


def _parallel_strategy(body: list[ast.stmt]) -> str:
    """The parallel strategy a block builds (``nn.DataParallel(...)``, an ``FSDPStrategy``), or
    ''."""
    for statement in body:
        for node in ast.walk(statement):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if any(word in name for word in _STRATEGY_NAMES):
                    return name
    return ""


def _is_test_file(path: str) -> bool:
    """tests/..., test/..., test_*.py, *_test.py, conftest.py."""
    parts = path.replace("\\", "/").split("/")
    name = parts[-1]
    return (
        any(part in ("test", "tests", "testing") for part in parts[:-1])
        or name.startswith("test_")
        or name.endswith("_test.py")
        or name == "conftest.py"
    )


def _strategy_framework(ctx: Context) -> str:
    """The strategy-choosing framework the module imports, or ''."""
    for target in ctx.aliases.values():
        top = target.split(".", 1)[0]
        if top in STRATEGY_FRAMEWORKS:
            return top
    return ""


def mocked_names(findings: Iterable[Finding]) -> frozenset[str]:
    """The torch.cuda names that some test in the scan mocks (``_mock``'s findings)."""
    names = set()
    for finding in findings:
        if finding.rule == "DA101" and MOCKED in finding.message:
            match = _FINDING_NAME.match(finding.message)
            if match:
                names.add(match.group(1))
    return frozenset(names)


def review_mocked(findings: Iterable[Finding], mocked: frozenset[str]) -> list[Finding]:
    """``findings`` with every safe rewrite of a mocked torch.cuda name made review."""
    out = []
    for finding in findings:
        match = _FINDING_NAME.match(finding.message) if finding.rule == "DA101" else None
        if match and match.group(1) in mocked and finding.fix_safety == SAFE:
            finding = dataclasses.replace(
                finding,
                fix_safety=REVIEW,
                message=f"{finding.message} (review: a test in this scan mocks "
                f"`torch.cuda.{match.group(1)}`; the rewritten code would not reach the mock)",
            )
        out.append(finding)
    return out
