"""Hypothesis strategies: shapes, dtypes, tensors (made on the CPU from a seed) and views.

Tensors are generated on the CPU with a seeded generator and moved to the backend, so the
reference and the backend see the same values and a failing example prints as a short snippet.
"""

from __future__ import annotations

import dataclasses

import torch
from hypothesis import strategies as st

FLOAT_DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64)
INT_DTYPES = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
CORE_DTYPES = FLOAT_DTYPES + INT_DTYPES + (torch.bool, torch.complex64, torch.complex128)


def shapes(min_dims: int = 0, max_dims: int = 4, max_side: int = 6) -> st.SearchStrategy:
    """Tensor shapes, including 0-dim and empty ones."""
    return st.lists(st.integers(0, max_side), min_size=min_dims, max_size=max_dims).map(tuple)


def dtypes(supported: frozenset[torch.dtype], among=CORE_DTYPES) -> st.SearchStrategy:  # noqa: ANN001
    """Dtypes the backend declares, drawn from ``among``."""
    candidates = [d for d in among if d in supported]
    return st.sampled_from(candidates)


@dataclasses.dataclass(frozen=True)
class TensorSpec:
    """A recipe for a CPU tensor: shape, dtype and seed; ``code`` rebuilds it in a snippet."""

    shape: tuple[int, ...]
    dtype: torch.dtype
    seed: int

    def make(self) -> torch.Tensor:
        generator = torch.Generator().manual_seed(self.seed)
        if self.dtype == torch.bool:
            return torch.randint(0, 2, self.shape, generator=generator).bool()
        if self.dtype.is_floating_point or self.dtype.is_complex:
            values = torch.randn(self.shape, generator=generator, dtype=torch.float32) * 4
            return values.to(self.dtype)
        low, high = (0, 100) if self.dtype == torch.uint8 else (-50, 50)
        return torch.randint(low, high, self.shape, generator=generator).to(self.dtype)

    @property
    def code(self) -> str:
        return f"make(shape={self.shape}, dtype={self.dtype}, seed={self.seed})"


@st.composite
def tensor_specs(
    draw: st.DrawFn,
    supported: frozenset[torch.dtype],
    shape: tuple[int, ...] | None = None,
    among=CORE_DTYPES,  # noqa: ANN001
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


MAKE_SNIPPET = """
def make(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, generator=g).bool()
    if dtype.is_floating_point or dtype.is_complex:
        return (torch.randn(shape, generator=g) * 4).to(dtype)
    low, high = (0, 100) if dtype == torch.uint8 else (-50, 50)
    return torch.randint(low, high, shape, generator=g).to(dtype)
"""
