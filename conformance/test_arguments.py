"""Operators judged on their *arguments*, not only their values: hypothesis draws the options
PyTorch documents for the core operators (non-default options of selection ops, ``dtype=`` of
reductions and scans, the special arguments of embedding-like ops and their backward, negative
dims and indices, shift amounts, integer powers, broadcasting over a non-leading dimension),
and the device must give the reference's result, or refuse what the reference refuses.

A kernel that handles the default of an option and gets another wrong passes every test that
calls the operator with its defaults, and OpInfo's first samples mostly do.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from .opinfo import assert_outputs_match, to_device
from .strategies import MAKE_SNIPPET, make, shapes

FLOATS = (torch.float32, torch.bfloat16)
INTS = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
ORDERED = (torch.float32, torch.int32, torch.int64)


def _dim(shape: tuple[int, ...]) -> st.SearchStrategy:
    """A dim of a tensor of ``shape``, negative ones as often as positive."""
    ndim = max(len(shape), 1)
    return st.integers(-ndim, ndim - 1)


def _broadcastable(shape: tuple[int, ...]) -> st.SearchStrategy:
    """A shape that broadcasts against ``shape`` with a 1 in a non-leading dim (or fewer dims)."""
    if len(shape) < 2:
        return st.just((1,) * len(shape))
    return st.lists(st.booleans(), min_size=len(shape), max_size=len(shape)).map(
        lambda ones: (
            tuple(
                1 if one and index > 0 else side
                for index, (one, side) in enumerate(zip(ones, shape, strict=True))
            )
            if any(ones[1:])
            else (*shape[:1], 1, *shape[2:])
        )
    )


# name: (code on x (drawn) and the drawn options; the dtypes of x; the value kind of x; the
# options as {name: a function of x's shape giving a strategy})
Options = dict[str, object]
ARGUMENT_OPS: dict[str, tuple[str, tuple[torch.dtype, ...], str, Options]] = {
    # selection ops: non-default options, negative dims
    "topk": (
        "torch.topk(x, k, dim, largest=largest, sorted=True)",
        ORDERED,
        "random",
        {
            "dim": _dim,
            "largest": lambda shape: st.booleans(),
            "k": lambda shape: st.integers(0, 2),
        },
    ),
    "sort": (
        "torch.sort(x, dim=dim, descending=descending, stable=True)",
        ORDERED,
        "ties",
        {"dim": _dim, "descending": lambda shape: st.booleans()},
    ),
    "argmax": (
        "torch.argmax(x, dim, keepdim=keepdim)",
        ORDERED,
        "ties",
        {"dim": _dim, "keepdim": lambda shape: st.booleans()},
    ),
    "min_dim": (
        "torch.min(x, dim, keepdim=keepdim)",
        ORDERED,
        "random",
        {"dim": _dim, "keepdim": lambda shape: st.booleans()},
    ),
    "kthvalue": (
        "torch.kthvalue(x, k, dim, keepdim=keepdim)",
        (torch.float32, torch.int64),
        "random",
        {"dim": _dim, "keepdim": lambda shape: st.booleans(), "k": lambda s: st.integers(1, 3)},
    ),
    # dtype= of reductions and scans (an int8 input summed in int64 does not wrap)
    "cumsum_dtype": (
        "torch.cumsum(x, dim, dtype=dtype)",
        (torch.int8, torch.uint8, torch.int32, torch.float32, torch.bfloat16),
        "limits",
        {"dim": _dim, "dtype": lambda s: st.sampled_from([None, torch.int64, torch.float32])},
    ),
    "cumprod_dtype": (
        "torch.cumprod(x, dim, dtype=dtype)",
        (torch.int8, torch.int32, torch.float32),
        "random",
        {"dim": _dim, "dtype": lambda s: st.sampled_from([None, torch.int64, torch.float32])},
    ),
    "sum_dtype": (
        "torch.sum(x, dim, keepdim=keepdim, dtype=dtype)",
        (torch.int8, torch.uint8, torch.int16, torch.float32, torch.bfloat16),
        "limits",
        {
            "dim": _dim,
            "keepdim": lambda s: st.booleans(),
            "dtype": lambda s: st.sampled_from([None, torch.int64, torch.float32]),
        },
    ),
    "softmax_dtype": (
        "torch.softmax(x, dim, dtype=dtype)",
        (torch.bfloat16, torch.float16, torch.float32),
        "random",
        {"dim": _dim, "dtype": lambda s: st.sampled_from([None, torch.float32])},
    ),
    # negative dims and indices
    "index_negative": (
        "x[torch.tensor(index, dtype=torch.int64)]",
        ORDERED,
        "random",
        {"index": lambda s: st.lists(st.integers(-s[0], max(s[0] - 1, -s[0])), max_size=4)},
    ),
    "select_negative": (
        "x.select(dim, -1)",
        ORDERED,
        "random",
        {"dim": _dim},
    ),
    "narrow_negative": (
        "x.narrow(dim, -1, 1)",
        ORDERED,
        "random",
        {"dim": _dim},
    ),
    "gather_negative_dim": (
        "torch.gather(x, dim, torch.zeros_like(x, dtype=torch.int64).select(dim, 0)"
        ".unsqueeze(dim) + x.shape[dim] - 1)",
        ORDERED,
        "random",
        {"dim": _dim},
    ),
    "roll": (
        "torch.roll(x, shifts, dim)",
        ORDERED,
        "random",
        {"dim": _dim, "shifts": lambda s: st.integers(-7, 7)},
    ),
    "flip_transpose": (
        "x.flip(dim).transpose(dim, -1)",
        ORDERED,
        "random",
        {"dim": _dim},
    ),
    # shift amounts, integer powers
    "left_shift": (
        "torch.bitwise_left_shift(x, amount)",
        (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8),
        "random",
        {"amount": lambda s: st.integers(0, 7)},
    ),
    "right_shift": (
        "x >> amount",
        (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8),
        "limits",
        {"amount": lambda s: st.integers(0, 7)},
    ),
    "pow_integer": (
        "torch.pow(x, exponent)",
        (torch.float32, torch.bfloat16, torch.int32, torch.int64),
        "random",
        {"exponent": lambda s: st.integers(-3, 4)},
    ),
    "pow_tensor_exponent": (
        "torch.pow(x, (x.abs() % 4).to(x.dtype) - (1 if x.is_floating_point() else 0))",
        (torch.float32, torch.int64),
        "random",
        {},
    ),
    # broadcasting over a non-leading dimension
    "add_broadcast": (
        "torch.add(x, y, alpha=alpha)",
        (torch.float32, torch.int32, torch.bfloat16),
        "random",
        {"y_shape": _broadcastable, "alpha": lambda s: st.integers(-2, 2)},
    ),
    "mul_broadcast": (
        "torch.mul(x, y)",
        (torch.float32, torch.int64),
        "random",
        {"y_shape": _broadcastable},
    ),
    "maximum_broadcast": (
        "torch.maximum(y, x)",
        (torch.float32, torch.int64),
        "random",
        {"y_shape": _broadcastable},
    ),
    "where_broadcast": (
        "torch.where(y > 0, x, y)",
        (torch.float32, torch.int64),
        "random",
        {"y_shape": _broadcastable},
    ),
}


# name: [(shape, dtype, seed, options)]: a non-default argument each, checked in every run
# (a few drawn examples may all miss it)
FIXED_ARGUMENTS: dict[str, list[tuple[tuple[int, ...], torch.dtype, int, dict]]] = {
    "topk": [((3, 5), torch.float32, 0, {"dim": -1, "largest": False, "k": 2})],
    "sort": [((3, 5), torch.int64, 0, {"dim": -2, "descending": True})],
    "argmax": [((3, 5), torch.float32, 0, {"dim": -1, "keepdim": True})],
    "cumsum_dtype": [
        ((3, 6), torch.int8, 0, {"dim": -1, "dtype": torch.int64}),
        ((3, 6), torch.uint8, 1, {"dim": 0, "dtype": torch.int64}),
        ((3, 6), torch.int32, 2, {"dim": 1, "dtype": torch.int64}),
    ],
    "sum_dtype": [((4, 5), torch.int8, 0, {"dim": -1, "keepdim": False, "dtype": torch.int64})],
    "softmax_dtype": [((3, 5), torch.bfloat16, 0, {"dim": -1, "dtype": torch.float32})],
    "roll": [((3, 5), torch.float32, 0, {"dim": -1, "shifts": -2})],
    "left_shift": [((3, 5), torch.int32, 0, {"amount": 5})],
    "right_shift": [((3, 5), torch.int8, 0, {"amount": 3})],
    "pow_integer": [
        ((3, 5), torch.float32, 0, {"exponent": -3}),
        ((3, 5), torch.int64, 0, {"exponent": 3}),
    ],
    "add_broadcast": [((2, 3, 4), torch.float32, 0, {"y_shape": (2, 1, 4), "alpha": -2})],
    "mul_broadcast": [((2, 3, 4), torch.float32, 0, {"y_shape": (2, 1, 4)})],
    "maximum_broadcast": [((3, 4), torch.int64, 0, {"y_shape": (3, 1)})],
}


@pytest.mark.parametrize("name", sorted(ARGUMENT_OPS))
def test_op_matches_reference_on_drawn_arguments(backend, device, name):
    """The operator with drawn options gives the reference's result (or its refusal)."""
    code, among, values, options = ARGUMENT_OPS[name]
    dtypes = [d for d in among if backend.capabilities.supports(d)]
    if not dtypes:
        pytest.skip(f"not applicable: the backend declares none of {among}")
    parameters = ", ".join(["x", "y", *(key for key in options if key != "y_shape")])
    function = eval(f"lambda {parameters}: {code}")

    def run(x: torch.Tensor, y: torch.Tensor, drawn: dict) -> object:
        return function(x, y, **drawn)

    def compare(shape: tuple[int, ...], dtype: torch.dtype, seed: int, drawn: dict) -> None:
        y_shape = drawn.pop("y_shape", shape)
        # "limits" are integers' values; floats drawn with them get random ones
        kind = "random" if values == "limits" and dtype.is_floating_point else values
        x = make(shape, dtype, seed, kind)
        y = make(y_shape, dtype, seed + 1)
        snippet = MAKE_SNIPPET + (
            f"x = make({shape}, {dtype}, {seed}, {kind!r})\ny = make({y_shape}, {dtype}, "
            f"{seed + 1})\n"
            + "".join(f"{key} = {value!r}\n" for key, value in drawn.items())
            + f"expected = {code}\nx, y = x.to('{device}'), y.to('{device}')\nactual = {code}\n"
            "print(expected, actual)"
        )
        try:
            expected = run(x, y, drawn)
        except (RuntimeError, IndexError, ValueError) as error:
            with pytest.raises(type(error)):
                run(x.to(device), y.to(device), drawn)
                pytest.fail(f"{name}: the reference refuses these arguments ({error})")
            return
        actual = run(x.to(device), y.to(device), drawn)
        assert_outputs_match(actual, expected, device, name, snippet)

    # The non-default arguments every run checks besides the drawn ones (in the first
    # declared dtype of the case's list that the backend has).
    for shape, dtype, seed, drawn in FIXED_ARGUMENTS.get(name, ()):
        if dtype in dtypes:
            compare(shape, dtype, seed, dict(drawn))

    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        shape = data.draw(shapes(min_dims=1, max_dims=3, max_side=5), label="shape")
        dtype = data.draw(st.sampled_from(dtypes), label="dtype")
        seed = data.draw(st.integers(0, 2**16), label="seed")
        drawn = {key: data.draw(option(shape), label=key) for key, option in options.items()}
        compare(shape, dtype, seed, drawn)

    check()


# Embedding-like ops: their special arguments, forward and the weight's gradient.
EMBEDDING_OPS = {
    "embedding": (
        "torch.nn.functional.embedding(index, weight, padding_idx=padding_idx, "
        "scale_grad_by_freq=scale_grad_by_freq)"
    ),
    "embedding_bag": (
        "torch.nn.functional.embedding_bag(index, weight, offsets, mode=mode, "
        "per_sample_weights=per_sample_weights, padding_idx=padding_idx, "
        "include_last_offset=include_last_offset)"
    ),
}


@pytest.mark.parametrize("name", sorted(EMBEDDING_OPS))
def test_embedding_like_op_matches_reference_on_drawn_arguments_and_backward(device, name):
    """embedding and embedding_bag with drawn padding_idx (negative too), scale_grad_by_freq,
    mode, per_sample_weights and include_last_offset, over repeated indices: the result and
    the weight's gradient are the reference's (the padding row gets none)."""
    code = EMBEDDING_OPS[name]

    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        rows = data.draw(st.integers(2, 6), label="rows")
        count = data.draw(st.integers(1, 10), label="count")
        index = data.draw(st.lists(st.integers(0, rows - 1), min_size=count, max_size=count))
        seed = data.draw(st.integers(0, 2**16), label="seed")
        padding_idx = data.draw(st.one_of(st.none(), st.integers(-rows, rows - 1)), label="pad")
        mode = data.draw(st.sampled_from(["sum", "mean", "max"]), label="mode")
        options = {
            "padding_idx": padding_idx,
            "scale_grad_by_freq": data.draw(st.booleans(), label="scale_grad_by_freq"),
            "mode": mode,
            "include_last_offset": data.draw(st.booleans(), label="include_last_offset"),
        }
        cuts = data.draw(st.lists(st.integers(0, count), max_size=3), label="offsets")
        # include_last_offset: offsets ends with the number of indices (its documented form)
        ends = {count} if options["include_last_offset"] else set()
        offsets = torch.tensor(sorted({0, *cuts, *ends}), dtype=torch.int64)
        weights = (
            make((count,), torch.float32, seed + 2)
            if mode == "sum" and data.draw(st.booleans(), label="per_sample_weights")
            else None
        )
        weight = make((rows, 3), torch.float32, seed)
        index_tensor = torch.tensor(index, dtype=torch.int64)
        snippet = MAKE_SNIPPET + (
            f"weight = make({(rows, 3)}, torch.float32, {seed}).requires_grad_()\n"
            f"index = torch.tensor({index})\noffsets = torch.tensor({offsets.tolist()})\n"
            f"options = {options!r}, per_sample_weights={weights is not None}\n"
            f"out = {code}\nout.backward(torch.ones_like(out))\nprint(out, weight.grad)"
        )

        def forward_backward(where: torch.device | None) -> tuple[object, object]:
            leaf = (weight if where is None else weight.to(where)).clone().requires_grad_()
            moved = [index_tensor, offsets, weights]
            if where is not None:
                moved = to_device(moved, where)
            kwargs = dict(options)
            if name == "embedding":
                kwargs = {k: kwargs[k] for k in ("padding_idx", "scale_grad_by_freq")}
            else:
                kwargs.pop("scale_grad_by_freq")
                kwargs["per_sample_weights"] = moved[2]
            if name == "embedding":
                out = torch.nn.functional.embedding(moved[0], leaf, **kwargs)
            else:
                out = torch.nn.functional.embedding_bag(moved[0], leaf, moved[1], **kwargs)
            out = out[0] if isinstance(out, tuple) else out
            cotangent = make(tuple(out.shape), torch.float32, seed + 3)
            out.backward(cotangent if where is None else cotangent.to(where))
            return out.detach(), leaf.grad

        try:
            expected = forward_backward(None)
        except (RuntimeError, ValueError, IndexError) as error:
            with pytest.raises(type(error)):
                forward_backward(device)
            return
        actual = forward_backward(device)
        assert_outputs_match(actual[0], expected[0], device, name, snippet)
        assert_outputs_match(
            actual[1], expected[1], device, f"the weight's gradient of {name}", snippet
        )

    check()


def test_embedding_padding_row_gets_no_gradient(device):
    """The fixed case of the drawn test above, in every run (a few drawn examples may all miss
    padding_idx on a repeated index): embedding's weight gradient leaves the padding row zero."""
    weight = make((4, 3), torch.float32, 0)
    index = torch.tensor([0, 2, 2, 1, -2])
    snippet = MAKE_SNIPPET + (
        "weight = make((4, 3), torch.float32, 0).requires_grad_()\n"
        "out = torch.nn.functional.embedding(torch.tensor([0, 2, 2, 1, -2]) % 4, weight, "
        "padding_idx=2)\nout.backward(torch.ones_like(out))\nprint(weight.grad)"
    )

    def weight_grad(where: torch.device) -> torch.Tensor:
        leaf = weight.to(where).clone().requires_grad_()
        out = torch.nn.functional.embedding((index % 4).to(where), leaf, padding_idx=2)
        out.backward(torch.ones_like(out))
        return leaf.grad

    expected = weight_grad(torch.device("cpu"))
    assert_outputs_match(
        weight_grad(device), expected, device, "embedding's weight gradient", snippet
    )
