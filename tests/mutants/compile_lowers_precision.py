"""A compiler that loses precision: graphs compiled for neuron by the default backend (inductor)
return float32 results rounded through bfloat16, as a fused kernel that accumulates in the wrong
type does. Eager neuron is untouched."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch._inductor.compile_fx as compile_fx_module

_compile_fx = compile_fx_module.compile_fx


def _round(value: object) -> object:
    if (
        isinstance(value, torch.Tensor)
        and value.device.type == "neuron"
        and value.is_floating_point()
    ):
        return value.to(torch.bfloat16).to(value.dtype)
    return value


def _lossy_compile_fx(*args: object, **kwargs: object) -> Callable[..., object]:
    compiled = _compile_fx(*args, **kwargs)

    def run(*inputs: object) -> object:
        outputs = compiled(*inputs)
        if isinstance(outputs, (list, tuple)):
            return type(outputs)(_round(o) for o in outputs)
        return _round(outputs)

    return run


# torch.compile's default backend imports compile_fx from this module at each compile.
compile_fx_module.compile_fx = _lossy_compile_fx
