"""Named assertions whose messages explain the failure, with a snippet that reproduces it."""

from __future__ import annotations

import textwrap

import torch

# Tolerances per dtype for results computed on the backend vs the reference: (rtol, atol).
# A backend's own numerics (fused kernels, other reduction orders) may differ within these.
TOLERANCES: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1.3e-6 * 10, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.complex64: (1.3e-5, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}


def reproducer(code: str) -> str:
    """Format a self-contained snippet that reproduces a failure."""
    body = textwrap.dedent(code).strip()
    return "\n--- reproduce with ---\nimport torch\n" + body + "\n----------------------"


def assert_on_device(tensor: torch.Tensor, device: torch.device, what: str = "result") -> None:
    """The tensor lives on ``device`` (an index-less device matches any index)."""
    matches = tensor.device.type == device.type and (
        device.index is None or tensor.device.index in (None, device.index)
    )
    assert matches, f"{what} is on {tensor.device}, expected {device}"


def assert_dtype(
    actual: torch.Tensor, expected: torch.dtype | torch.Tensor, what: str = "result"
) -> None:
    """Same dtype as the reference (or the given dtype)."""
    dtype = expected.dtype if isinstance(expected, torch.Tensor) else expected
    assert actual.dtype == dtype, f"{what} has dtype {actual.dtype}, the reference has {dtype}"


def assert_shape(actual: torch.Tensor, expected: torch.Tensor, what: str = "result") -> None:
    assert actual.shape == expected.shape, (
        f"{what} has shape {tuple(actual.shape)}, the reference has {tuple(expected.shape)}"
    )


def assert_matches_reference(
    actual: torch.Tensor,
    expected: torch.Tensor,
    *,
    what: str = "result",
    snippet: str = "",
    tolerance: tuple[float, float] | None = None,
) -> None:
    """``actual`` (from the backend) equals ``expected`` (from the reference): shape, dtype and
    values within the dtype's tolerance. NaNs must be in the same places."""
    repro = reproducer(snippet) if snippet else ""
    assert_shape(actual, expected, what)
    assert_dtype(actual, expected, what)
    rtol, atol = tolerance or TOLERANCES.get(expected.dtype, (0.0, 0.0))
    got = actual.detach().cpu()
    want = expected.detach().cpu()
    try:
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
    except AssertionError as error:
        raise AssertionError(f"{what} differs from the reference:\n{error}{repro}") from None
