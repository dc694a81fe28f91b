"""Hypothesis strategies: shapes, dtypes, tensors (made on the CPU from a seed) and views.

Tensors are generated on the CPU with a seeded generator and moved to the backend, so the
reference and the backend see the same values and a failing example prints as a short snippet.

Input classes that reach kernel bugs random normal values and CPU-made layouts never reach:

* value kinds (``VALUE_KINDS``): low-cardinality values (ties, all-equal) for index-returning
  and ordering ops, extremal floats (NaN, +-inf, -0.0, exp-overflowing, subnormal), integers
  at the ends of their dtype's range;
* device-side views (``device_views``): slices with steps, transposes, expands and storage
  offsets taken *after* the move, since ``.to(device)`` of a CPU view is contiguous;
* repeated indices for accumulating ops, and halfway values for conversions.
"""

from __future__ import annotations

import dataclasses
import inspect
import math

import torch
from hypothesis import strategies as st

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
CORE_DTYPES = FLOAT_DTYPES + INT_DTYPES + (torch.bool, torch.complex64, torch.complex128)


def shapes(min_dims: int = 0, max_dims: int = 4, max_side: int = 6) -> st.SearchStrategy:
    """Tensor shapes, including 0-dim and empty ones."""
    return st.lists(st.integers(0, max_side), min_size=min_dims, max_size=max_dims).map(tuple)


def dtypes(supported: frozenset[torch.dtype], among=CORE_DTYPES) -> st.SearchStrategy:
    """Dtypes the backend declares, drawn from ``among``."""
    candidates = [d for d in among if d in supported]
    return st.sampled_from(candidates)


# The kinds of values ``make`` draws; ``value_kinds(dtype)`` says which apply to a dtype.
VALUE_KINDS = ("random", "ties", "extremal", "limits")


def make(shape, dtype, seed, values="random"):
    """A CPU tensor from a seed. ``values``: "random" (normal * 4, in both parts of a complex
    number; or small integers), "ties" (at most three distinct values, all equal a third of
    the time; complex ones have equal parts), "extremal" (floats: NaN,
    +-inf, -0.0, values whose exp overflows in float16 or float32, subnormals, the dtype's
    largest), "limits" (integers within 3 of the dtype's min or max)."""
    # Self-contained (torch and math only): its source is the snippets' ``make``.
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if values == "ties":
        distinct = int(torch.randint(1, 4, (), generator=g))
        x = torch.randint(0, distinct, shape, generator=g)
        x = (x - 1 if dtype.is_signed else x).to(dtype)
        return x + 1j * x if dtype.is_complex else x
    if dtype.is_complex:
        # Both parts drawn: with a zero imaginary part an op that drops it (an imag view that
        # copies, a conjugate that is not applied) would still match the reference.
        real = torch.randn(shape, generator=g, dtype=torch.float32) * 4
        imag = torch.randn(shape, generator=g, dtype=torch.float32) * 4
        return torch.complex(real, imag).to(dtype)
    if dtype.is_floating_point:
        x = torch.randn(shape, generator=g, dtype=torch.float32) * 4
        if values == "extremal":
            info = torch.finfo(dtype)
            special = [math.nan, math.inf, -math.inf, -0.0, 0.0, 12.0, 100.0, -100.0]
            special += [info.tiny / 4, -info.tiny / 2, float(info.max), -float(info.max)]
            # Three draws in four are finite: NaN or +inf in a row hides what the others test
            # (a softmax whose exp overflows gives NaN there too), and the first element is
            # then one whose exp overflows, so every such draw reaches that bug.
            finite = bool(torch.rand((), generator=g) < 0.75)
            if finite:
                special = [v for v in special if math.isfinite(v)]
            pick = torch.randint(0, len(special), shape, generator=g)
            x = torch.where(
                torch.rand(shape, generator=g) < 0.4,
                torch.tensor(special, dtype=torch.float32)[pick],
                x,
            )
            if finite and x.numel():
                x.view(-1)[0] = 100.0
        return x.to(dtype)
    if values == "limits":
        info = torch.iinfo(dtype)
        near = torch.randint(0, 4, shape, generator=g)
        high = torch.randint(0, 2, shape, generator=g).bool()
        top = torch.full(shape, info.max, dtype=torch.int64) - near
        return torch.where(high, top, near + info.min).to(dtype)
    low, high = (0, 100) if dtype == torch.uint8 else (-50, 50)
    return torch.randint(low, high, shape, generator=g).to(dtype)


def value_kinds(dtype: torch.dtype) -> tuple[str, ...]:
    """The value kinds that mean something for ``dtype``."""
    if dtype == torch.bool:
        return ("random",)
    if dtype.is_floating_point:
        return ("random", "ties", "extremal")
    if dtype.is_complex:
        return ("random", "ties")
    return ("random", "ties", "limits")


# The snippets' ``make``: the same function, so a printed reproducer makes the same values.
MAKE_SNIPPET = "\nimport math\n\n" + inspect.getsource(make)


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A recipe for a CPU tensor: shape, dtype and seed; ``code`` rebuilds it in a snippet."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    seed: int
    values: str = "random"

    def make(self) -> torch.Tensor:
        return make(self.shape, self.dtype, self.seed, self.values)

    @property
    def code(self) -> str:
        values = f", values={self.values!r}" if self.values != "random" else ""
        return f"make(shape={self.shape}, dtype={self.dtype}, seed={self.seed}{values})"


@st.composite
def tensor_specs(
    draw: st.DrawFn,
    supported: frozenset[torch.dtype],
    shape: tuple[int, ...] | None = None,
    among=CORE_DTYPES,
) -> TensorSpec:
    """A TensorSpec with a dtype the backend supports."""
    return TensorSpec(
        shape=shape if shape is not None else draw(shapes()),
        dtype=draw(dtypes(supported, among)),
        seed=draw(st.integers(0, 2**16)),
    )


@st.composite
def strided_views(draw: st.DrawFn, base_shape: tuple[int, ...]) -> tuple[slice, ...]:
    """Slices (with steps) that make a non-contiguous view of a tensor of ``base_shape``."""
    slices = []
    for side in base_shape:
        start = draw(st.integers(0, max(side - 1, 0)))
        step = draw(st.integers(1, 3))
        slices.append(slice(start, None, step))
    return tuple(slices)


@st.composite
def device_views(draw: st.DrawFn, shape: tuple[int, ...], min_steps: int = 0) -> str:
    """Code of a view of ``t`` (a tensor of ``shape`` already on the device): slices with
    steps, transposes, expands and storage offsets, up to three of them in a row. Kernels see
    these strides only when the view is taken on the device (``.to`` of a CPU view copies it
    into a contiguous tensor)."""
    code, sizes = "t", list(shape)
    steps = draw(
        st.lists(
            st.sampled_from(["slice", "transpose", "expand", "offset"]),
            min_size=min_steps,
            max_size=3,
        ),
        label="view steps",
    )
    for step in steps:
        if step == "slice" and sizes:
            parts = []
            for index, side in enumerate(sizes):
                start = draw(st.integers(0, max(side - 1, 0)))
                stride = draw(st.integers(1, 3))
                parts.append(f"{start}::{stride}")
                sizes[index] = len(range(start, side, stride))
            code += "[" + ", ".join(parts) + "]"
        elif step == "transpose" and len(sizes) >= 2:
            a, b = draw(st.permutations(range(len(sizes))))[:2]
            code += f".transpose({a}, {b})"
            sizes[a], sizes[b] = sizes[b], sizes[a]
        elif step == "expand" and len(sizes) < 4:
            where = draw(st.integers(0, len(sizes)))
            copies = draw(st.integers(1, 3))
            sizes.insert(where, copies)
            code += f".unsqueeze({where}).expand({tuple(sizes)})"
        elif step == "offset" and sizes:
            dim = draw(st.integers(0, len(sizes) - 1))
            start = min(1, sizes[dim])
            code += f".narrow({dim}, {start}, {sizes[dim] - start})"
            sizes[dim] -= start
    return code


def apply_view(code: str, tensor: torch.Tensor) -> torch.Tensor:
    """The view that ``device_views`` code describes, of ``tensor``."""
    return eval(f"lambda t: {code}")(tensor)


@st.composite
def repeated_indices(draw: st.DrawFn, size: int, count: int) -> list[int]:
    """``count`` indices into a dimension of ``size`` with repeats (at most 3 distinct values,
    often one): the duplicates an accumulating op must add up, not overwrite."""
    distinct = draw(st.lists(st.integers(0, max(size - 1, 0)), min_size=1, max_size=3))
    return draw(st.lists(st.sampled_from(distinct), min_size=count, max_size=count))


def halfway_values(dtype: torch.dtype, seed: int, count: int = 16) -> torch.Tensor:
    """float32 values exactly halfway between two neighbours representable in ``dtype`` (a
    16-bit or 8-bit float): a conversion must round each to the neighbour with the even
    mantissa (round-to-nearest-even), never away from zero."""
    g = torch.Generator().manual_seed(seed)
    low = (torch.randn(count, generator=g, dtype=torch.float32) * 4).to(dtype)
    # The next representable value away from zero: the bit pattern plus one.
    bits = {2: torch.int16, 1: torch.int8}[dtype.itemsize]
    high = (low.view(bits) + 1).view(dtype)
    return (low.float() + high.float()) / 2
