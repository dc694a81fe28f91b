"""``out=`` arguments of the core operators, as PyTorch documents them for every device:

* an ``out`` of the right size and dtype is written in place (the same storage) and returned;
* an ``out`` of the wrong size is resized to the result's (with the "was resized" warning when
  it had elements, silently when it had none), as on the CPU and CUDA;
* an ``out`` on another device, or of a dtype the result cannot be cast to, is refused;
* an ``out`` that is one of the inputs and too small for the broadcast result is refused (the
  CPU and CUDA raise "output with shape ... doesn't match the broadcast shape"), never resized
  under the other input; the in-place variants (``x.mul_(y)``, ``x.ldexp_(y)``) likewise.

Each case runs on the reference first; the device must do what the reference did.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from .assertions import assert_matches_reference, assert_on_device, reproducer
from .requirements import require_devices
from .strategies import MAKE_SNIPPET, make, shapes

# name: (the operation as code on x, y and out; the dtypes it is drawn in)
FLOATS = (torch.float32, torch.bfloat16)
NUMERIC = FLOATS + (torch.int64, torch.int32)
OUT_OPS = {
    "add": ("torch.add(x, y, alpha=2, out=out)", NUMERIC),
    "sub": ("torch.sub(x, y, out=out)", NUMERIC),
    "mul": ("torch.mul(x, y, out=out)", NUMERIC),
    "div": ("torch.div(x, y, out=out)", FLOATS),
    "atan2": ("torch.atan2(x, y, out=out)", FLOATS),
    "maximum": ("torch.maximum(x, y, out=out)", NUMERIC),
    "exp": ("torch.exp(x, out=out)", FLOATS),
    "neg": ("torch.neg(x, out=out)", NUMERIC),
    "abs": ("torch.abs(x, out=out)", NUMERIC),
    "clamp": ("torch.clamp(x, -1, 2, out=out)", NUMERIC),
    "sum": ("torch.sum(x, -1, out=out)", NUMERIC),
    "cumsum": ("torch.cumsum(x, -1, out=out)", NUMERIC),
    "matmul": ("torch.matmul(x, y.transpose(-1, -2) if y.dim() > 1 else y, out=out)", FLOATS),
    "where": ("torch.where(x > 0, x, y, out=out)", NUMERIC),
}
OPS = sorted(OUT_OPS)


def _run(code: str, x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> object:
    return eval(f"lambda x, y, out: {code}")(x, y, out)


def _dtypes(backend, name: str) -> list[torch.dtype]:
    return [d for d in OUT_OPS[name][1] if backend.capabilities.supports(d)]


def _snippet(code: str, shape, dtype, seed: int, out: str, device: torch.device) -> str:
    return MAKE_SNIPPET + (
        f"x = make({shape}, {dtype}, {seed}).to('{device}')\n"
        f"y = make({shape}, {dtype}, {seed + 1}).to('{device}')\nout = {out}\n"
        f"result = {code}\nprint(result is out, out.shape, out.cpu())"
    )


def _reference(code: str, x: torch.Tensor, y: torch.Tensor, out: torch.Tensor) -> tuple:
    """The reference's result for ``out`` (a CPU tensor), and whether it warned of a resize."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run(code, x, y, out)
    return out, any("resized" in str(w.message) for w in caught)


@pytest.mark.parametrize("name", OPS)
def test_an_out_of_the_right_size_is_written_in_place(backend, device, name):
    code, _ = OUT_OPS[name]
    dtypes = _dtypes(backend, name)
    if not dtypes:
        pytest.skip(f"not applicable: the backend declares none of {OUT_OPS[name][1]}")

    @given(
        shape=shapes(min_dims=1, max_dims=3, max_side=5),
        dtype=st.sampled_from(dtypes),
        seed=st.integers(0, 2**16),
    )
    @example(shape=(3, 4), dtype=dtypes[0], seed=0)
    def check(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> None:
        x, y = make(shape, dtype, seed), make(shape, dtype, seed + 1)
        expected = _run(code.replace("out=out", "out=None"), x, y, None)
        out = torch.empty_like(expected, device=device)
        pointer = out.data_ptr()
        snippet = _snippet(code, shape, dtype, seed, "torch.empty_like(...)", device)
        result = _run(code, x.to(device), y.to(device), out)
        assert result is out, f"{name}(..., out=out) returned a new tensor, not out" + reproducer(
            snippet
        )
        assert out.data_ptr() == pointer, (
            f"{name}(..., out=out) of the right size moved out to new memory" + reproducer(snippet)
        )
        assert_on_device(out, device, what=f"out of {name}")
        assert_matches_reference(out, expected, what=f"out of {name}", snippet=snippet)

    check()


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("out_size", ["wrong", "empty"])
def test_an_out_of_the_wrong_size_is_resized(backend, device, name, out_size):
    """An out with elements (a wrong size) is resized with the "was resized" warning; an out
    with none is resized silently: the result's shape and values, as on the reference."""
    code, _ = OUT_OPS[name]
    dtypes = _dtypes(backend, name)
    if not dtypes:
        pytest.skip(f"not applicable: the backend declares none of {OUT_OPS[name][1]}")

    @given(
        shape=shapes(min_dims=2, max_dims=3, max_side=5),
        dtype=st.sampled_from(dtypes),
        seed=st.integers(0, 2**16),
        wrong=st.integers(1, 40),
    )
    @example(shape=(2, 2), dtype=dtypes[0], seed=0, wrong=3)
    @example(shape=(3, 5), dtype=dtypes[0], seed=1, wrong=40)
    def check(shape: tuple[int, ...], dtype: torch.dtype, seed: int, wrong: int) -> None:
        x, y = make(shape, dtype, seed), make(shape, dtype, seed + 1)
        size = 0 if out_size == "empty" else wrong
        expected = _run(code.replace("out=out", "out=None"), x, y, None)
        if size == expected.numel():
            size += 1  # a wrong size, whatever the result's shape
        reference_out, warned = _reference(code, x, y, torch.zeros(size, dtype=expected.dtype))
        out = torch.zeros(size, dtype=expected.dtype, device=device)
        snippet = _snippet(
            code, shape, dtype, seed, f"torch.zeros({size}, dtype={expected.dtype})", device
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            result = _run(code, x.to(device), y.to(device), out)
        assert result is out, f"{name}(..., out=out) returned a new tensor, not out" + reproducer(
            snippet
        )
        assert out.shape == reference_out.shape, (
            f"{name}(..., out=<{size} elements>) left out with shape {tuple(out.shape)}; the "
            f"reference resizes it to {tuple(reference_out.shape)}" + reproducer(snippet)
        )
        assert_on_device(out, device, what=f"out of {name}")
        assert_matches_reference(out, reference_out, what=f"out of {name}", snippet=snippet)
        device_warned = any("resized" in str(w.message) for w in caught)
        assert device_warned == warned, (
            f"{name}(..., out=<{size} elements>) "
            + ("did not warn" if warned else "warned")
            + " that out was resized; the reference "
            + ("does" if warned else "does not")
            + reproducer(snippet)
        )

    check()


@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("where", ["cpu", "another device"])
def test_an_out_on_another_device_is_refused(backend, device, name, where):
    code, _ = OUT_OPS[name]
    dtypes = _dtypes(backend, name)
    if not dtypes:
        pytest.skip(f"not applicable: the backend declares none of {OUT_OPS[name][1]}")
    if where == "cpu":
        if backend.is_cpu:
            pytest.skip("not applicable: the backend is the CPU")
        other = torch.device("cpu")
    else:
        require_devices(backend)
        other = backend.device(1)
    dtype = dtypes[0]
    x, y = make((3, 4), dtype, 0).to(device), make((3, 4), dtype, 1).to(device)
    expected = _run(code.replace("out=out", "out=None"), x, y, None)
    out = torch.zeros(expected.shape, dtype=expected.dtype, device=other)
    before = out.cpu().clone()
    snippet = _snippet(
        code, (3, 4), dtype, 0, f"torch.zeros({tuple(expected.shape)}, device='{other}')", device
    )
    with pytest.raises(RuntimeError):
        _run(code, x, y, out)
        pytest.fail(
            f"{name}(x, ..., out=out) with x on {device} and out on {other} was accepted; "
            "PyTorch refuses an out on another device" + reproducer(snippet)
        )
    assert torch.equal(out.cpu(), before), f"a refused {name} wrote to out on {other}"


@pytest.mark.parametrize("name", ["add", "mul", "div", "exp"])
def test_an_out_of_a_dtype_the_result_cannot_be_cast_to_is_refused(backend, device, name):
    """A floating result into an integer out is refused ("result type Float can't be cast to
    the desired output type Long"), as on the reference."""
    code, _ = OUT_OPS[name]
    x, y = make((3, 4), torch.float32, 0), make((3, 4), torch.float32, 1)
    with pytest.raises(RuntimeError):
        _run(code, x, y, torch.zeros((3, 4), dtype=torch.int64))
    out = torch.zeros((3, 4), dtype=torch.int64, device=device)
    with pytest.raises(RuntimeError):
        _run(code, x.to(device), y.to(device), out)
        pytest.fail(f"{name} wrote a float32 result into an int64 out")
    assert not out.cpu().any(), f"a refused {name} wrote to out"


# The operators whose out (or self, in place) names an input: name: code on x and y, where x
# has shape (5, 1) and y (5, 5), so the result (5, 5) does not fit in x.
ALIASING_OPS = {
    "add": "torch.add(x, y, out=x)",
    "sub": "torch.sub(x, y, out=x)",
    "mul": "torch.mul(x, y, out=x)",
    "div": "torch.div(x, y, out=x)",
    "atan2": "torch.atan2(x, y, out=x)",
    "mul_": "x.mul_(y)",
    "add_": "x.add_(y)",
    "ldexp_": "x.ldexp_(y.round())",
}


@pytest.mark.parametrize("name", sorted(ALIASING_OPS))
def test_an_out_that_is_an_input_and_too_small_for_the_broadcast_is_refused(device, name):
    code = ALIASING_OPS[name]
    run = eval(f"lambda x, y: {code}")
    x, y = make((5, 1), torch.float32, 0), make((5, 5), torch.float32, 1)
    with pytest.raises(RuntimeError, match="broadcast|shape"):
        run(x.clone(), y)
    moved = x.to(device)
    snippet = MAKE_SNIPPET + (
        f"x = make((5, 1), torch.float32, 0).to('{device}')\n"
        f"y = make((5, 5), torch.float32, 1).to('{device}')\n{code}\nprint(x.shape)"
    )
    with pytest.raises(RuntimeError, match="broadcast|shape"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # neuron-like backends warn of the resize
            run(moved, y.to(device))
        pytest.fail(
            f"{code} with x (5, 1) and y (5, 5) was accepted (x is now {tuple(moved.shape)}); "
            "the reference refuses an out that is an input and too small for the broadcast "
            "result" + reproducer(snippet)
        )
    assert moved.shape == (5, 1), f"a refused {code} resized x to {tuple(moved.shape)}"
    assert torch.equal(moved.cpu(), x), f"a refused {code} wrote to x"
