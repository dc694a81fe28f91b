"""DA101: ``torch.cuda.X`` where a device-generic API does the same."""

from __future__ import annotations

import ast
from collections.abc import Iterator

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
    node_types = (ast.Call, ast.Attribute, ast.Name)

    def visit(self, node: ast.AST, ctx: Context) -> Iterator[Finding]:
        if isinstance(node, ast.Call):
            # Calls are visited before their callee: decide here whether the arguments fit
            # the replacement's signature (SIGNATURES), and let the callee's finding say so.
            name = ctx.qualname(node.func)
            target = self.targets.get(name) if name else None
            if target is not None:
                why = accepts(target[0], len(node.args), [kw.arg for kw in node.keywords])
                if why:
                    ctx.review[id(node.func)] = f"{why}: pass it positionally, then fix"
            return
        yield from super().visit(node, ctx)

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
