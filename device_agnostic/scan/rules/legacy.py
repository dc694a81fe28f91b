"""DA114-DA115: CUDA's legacy tensor types and the CUDA_VISIBLE_DEVICES variable."""

from __future__ import annotations

import ast
from collections.abc import Iterator

from .base import REVIEW, Context, Finding, Rule

# torch.cuda's legacy tensor types and the dtype each one holds.
LEGACY_TYPES: dict[str, str] = {
    "FloatTensor": "torch.float32",
    "DoubleTensor": "torch.float64",
    "HalfTensor": "torch.float16",
    "BFloat16Tensor": "torch.bfloat16",
    "ByteTensor": "torch.uint8",
    "CharTensor": "torch.int8",
    "ShortTensor": "torch.int16",
    "IntTensor": "torch.int32",
    "LongTensor": "torch.int64",
    "BoolTensor": "torch.bool",
}


class LegacyCudaTensorType(Rule):
    """A legacy CUDA tensor type (``torch.cuda.FloatTensor``, ``torch.cuda.BFloat16Tensor``...).

    Each one is a dtype on the CUDA device. ``torch.set_default_tensor_type`` of one becomes a
    default dtype and a default device; a constructor call becomes ``torch.empty`` /
    ``torch.tensor`` with both; an ``isinstance`` check becomes a dtype and device check. The
    rewrite depends on the use (a statement becomes two), so it is left to the reader (report
    only); the finding names the dtype.

    Before::

        torch.set_default_tensor_type(torch.cuda.BFloat16Tensor)

    After::

        torch.set_default_dtype(torch.bfloat16)
        torch.set_default_device(torch.accelerator.current_accelerator())
    """

    id = "DA114"
    name = "legacy-cuda-tensor-type"
    summary = "legacy CUDA tensor types (torch.cuda.FloatTensor, ...)"
    why = (
        "A torch.cuda.XTensor exists on CUDA only (and set_default_tensor_type is deprecated): "
        "a dtype and the accelerator's device say the same on every backend."
    )
    fix_safety = REVIEW
    node_types = (ast.Attribute,)

    def visit(self, node: ast.Attribute, ctx: Context) -> Iterator[Finding]:
        if node.attr not in LEGACY_TYPES or ctx.qualname(node) != f"torch.cuda.{node.attr}":
            return
        dtype = LEGACY_TYPES[node.attr]
        yield ctx.finding(
            self,
            node,
            f"`torch.cuda.{node.attr}` is a CUDA-only legacy type: use dtype={dtype} on the "
            "accelerator's device (torch.set_default_dtype and torch.set_default_device for "
            "set_default_tensor_type; no rewrite: it depends on the use)",
            "",
        )


VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"  # noqa: DA115 (the rule's own name for it)


class CudaVisibleDevices(Rule):
    """``CUDA_VISIBLE_DEVICES`` read or set by the program.

    Only CUDA reads it: on another accelerator setting it hides nothing (every device stays
    visible) and reading it says nothing about the devices in use. Each backend has its own
    variable (``HIP_VISIBLE_DEVICES``, ``ZE_AFFINITY_MASK``, ...); within one process,
    ``torch.accelerator.set_device_index`` picks the device and
    ``torch.accelerator.device_count()`` counts them. Report only: which one fits depends on
    why the program touches the variable.

    Before::

        os.environ["CUDA_VISIBLE_DEVICES"] = args.device
        n = torch.cuda.device_count()

    After::

        torch.accelerator.set_device_index(int(args.device))
        n = torch.accelerator.device_count()
    """

    id = "DA115"
    name = "cuda-visible-devices"
    summary = "CUDA_VISIBLE_DEVICES read or set: other accelerators ignore it"
    why = (
        "Setting CUDA_VISIBLE_DEVICES hides devices from CUDA only, and reading it describes "
        "CUDA's devices only: on another accelerator the program uses devices it meant to hide."
    )
    fix_safety = REVIEW
    node_types = (ast.Constant,)

    def visit(self, node: ast.Constant, ctx: Context) -> Iterator[Finding]:
        if node.value == VISIBLE_DEVICES:
            yield ctx.finding(
                self,
                node,
                f"`{VISIBLE_DEVICES}` is read by CUDA only; other accelerators have their own "
                "variable (HIP_VISIBLE_DEVICES, ZE_AFFINITY_MASK, ...) or pick the device with "
                "torch.accelerator.set_device_index (no rewrite: it depends on why)",
                "",
            )
