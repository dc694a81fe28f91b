"""Dtypes and type promotion: the result dtype and the values of binary operators, for every
pair of dtypes the backend declares, for Python scalars, 0-dim tensors (on the device or on the
CPU) and n-dim tensors, compared with the reference and with ``torch.result_type``.

A promotion whose result the backend does not declare (a float64 0-dim CPU tensor with an
integer tensor on a device without float64) must raise a TypeError, never compute in another
dtype.
"""

from __future__ import annotations

import functools
import operator
import warnings
from collections.abc import Callable

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from .assertions import assert_matches_reference, assert_on_device, reproducer
from .strategies import CORE_DTYPES, MAKE_SNIPPET, TensorSpec, halfway_values, make, shapes

BinaryOp = Callable[[object, object], torch.Tensor]

# name: (function, what the result dtype is in terms of torch.result_type, Python operator)
# "promoted": result_type(a, b); "float": result_type, or the default float for integers and
# bool (true division); "bool": comparisons.
BINARY_OPS: dict[str, tuple[BinaryOp, str, str | None]] = {
    "add": (torch.add, "promoted", "+"),
    "sub": (torch.sub, "promoted", "-"),
    "mul": (torch.mul, "promoted", "*"),
    "div": (torch.div, "float", None),
    "true_divide": (torch.true_divide, "float", "/"),
    "div_floor": (lambda a, b: torch.div(a, b, rounding_mode="floor"), "promoted", None),
    "floor_divide": (torch.floor_divide, "promoted", "//"),
    "remainder": (torch.remainder, "promoted", "%"),
    "maximum": (torch.maximum, "promoted", None),
    "minimum": (torch.minimum, "promoted", None),
    "eq": (torch.eq, "bool", "=="),
    "lt": (torch.lt, "bool", "<"),
    "ge": (torch.ge, "bool", ">="),
    "bitwise_and": (torch.bitwise_and, "promoted", "&"),
    "bitwise_or": (torch.bitwise_or, "promoted", "|"),
    "bitwise_xor": (torch.bitwise_xor, "promoted", "^"),
}
PYTHON_OPERATORS: dict[str, BinaryOp] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
    "/": operator.truediv,
    "//": operator.floordiv,
    "%": operator.mod,
    "==": operator.eq,
    "<": operator.lt,
    ">=": operator.ge,
    "&": operator.and_,
    "|": operator.or_,
    "^": operator.xor,
}
DIVISIONS = {"div", "true_divide", "div_floor", "floor_divide", "remainder"}

# The dtypes a manifest can declare and this area promotes between. float8 has no arithmetic
# on the reference; complex32 is experimental in PyTorch and no manifest declares it.
PROMOTION_DTYPES = CORE_DTYPES
SCALARS = {"int": 3, "negative int": -2, "float": 2.5, "bool": True, "complex": 1 + 2j}
OPERAND_KINDS = ("n-dim with n-dim", "0-dim with n-dim", "n-dim with 0-dim", "cpu 0-dim")

pytestmark = pytest.mark.filterwarnings("ignore:ComplexHalf support is experimental")


def expected_result_dtype(op: str, a: object, b: object) -> torch.dtype:
    """The result dtype that ``torch.result_type`` (the oracle) predicts for ``op``."""
    rule = BINARY_OPS[op][1]
    if rule == "bool":
        return torch.bool
    promoted = torch.result_type(a, b)
    if rule == "float" and not (promoted.is_floating_point or promoted.is_complex):
        return torch.get_default_dtype()
    return promoted


def operand(dtype: torch.dtype, shape: tuple[int, ...], seed: int, divisor: bool) -> torch.Tensor:
    """A CPU operand; an integer divisor has no zeros (integer division by zero raises on the
    CPU and is undefined on accelerators, so it is not a semantic to compare)."""
    tensor = TensorSpec(shape, dtype, seed).make()
    if divisor and not (dtype.is_floating_point or dtype.is_complex):
        tensor = torch.where(tensor == 0, torch.ones_like(tensor), tensor)
    return tensor


def _semantic_error(error: Exception) -> bool:
    # "not implemented for 'Half'" is the reference's kernel coverage, not a rule of the
    # operator: a device may well have the kernel. Any other refusal is a rule of PyTorch's.
    return "not implemented for" not in str(error)


@functools.cache
def _reference_outcome(op: str, kind: str, dtype_a: torch.dtype, dtype_b: torch.dtype) -> str:
    """What the reference does with this combination: "ok", "error" (a rule of PyTorch's) or
    "uncovered" (the reference has no kernel for it: not compared)."""
    a, b = make_operands(op, kind, dtype_a, dtype_b, seed=0)
    try:
        BINARY_OPS[op][0](a, b)
    except (RuntimeError, TypeError) as error:
        return "error" if _semantic_error(error) else "uncovered"
    return "ok"


def make_operands(
    op: str, kind: str, dtype_a: torch.dtype, dtype_b: torch.dtype, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    shape_a = () if kind == "0-dim with n-dim" else (2, 3)
    shape_b = () if kind in ("n-dim with 0-dim", "cpu 0-dim") else (2, 3)
    a = operand(dtype_a, shape_a, seed, divisor=False)
    b = operand(dtype_b, shape_b, seed + 1, divisor=op in DIVISIONS)
    return a, b


def _to_device(a: torch.Tensor, b: torch.Tensor, kind: str, device: torch.device):
    # A 0-dim CPU tensor is a valid operand for a tensor on any device (as on CUDA).
    return a.to(device), (b if kind == "cpu 0-dim" else b.to(device))


def call_code(op: str, a: str, b: str) -> str:
    """``op`` applied to the operands ``a`` and ``b``, as code for a snippet."""
    if op == "div_floor":
        return f"torch.div({a}, {b}, rounding_mode='floor')"
    return f"torch.{op}({a}, {b})"


def _snippet(op: str, a: str, b: str, device: torch.device, kind: str = "") -> str:
    move_b = "b" if kind == "cpu 0-dim" else f"b.to('{device}')"
    return (
        MAKE_SNIPPET
        + f"a, b = {a}, {b}\n"
        + f"expected = {call_code(op, 'a', 'b')}\n"
        + f"actual = {call_code(op, f'a.to({str(device)!r})', move_b)}\n"
        + "print(expected.dtype, actual.dtype)"
    )


def check_binary(
    op: str,
    operands: tuple[object, object],
    on_device: tuple[object, object],
    backend,
    device: torch.device,
    snippet: str,
) -> None:
    """Run ``op`` on the reference operands and on the device operands; compare the result dtype
    with the reference's and the oracle's, and the values. A result dtype the backend does not
    declare must be refused with a TypeError, and so must what the reference refuses by a rule
    of PyTorch's (with the reference's error type)."""
    function = BINARY_OPS[op][0]
    try:
        expected = function(*operands)
    except (RuntimeError, TypeError) as error:
        if _semantic_error(error):
            with pytest.raises(type(error)):
                function(*on_device)
        return
    oracle = expected_result_dtype(op, *operands)
    assert expected.dtype == oracle, (
        f"the reference computes {op} in {expected.dtype}, torch.result_type says {oracle}"
        + reproducer(snippet)
    )
    assert_device_computes_like_the_reference(
        lambda: function(*on_device), expected, backend, device, op, snippet
    )


def assert_device_computes_like_the_reference(
    compute: Callable[[], torch.Tensor],
    expected: torch.Tensor,
    backend,
    device: torch.device,
    what: str,
    snippet: str,
) -> None:
    """``compute()`` on the device gives ``expected`` (the reference's result) or, if the backend
    does not declare the result's dtype, raises a TypeError. complex32, which no manifest can
    declare, may do either."""
    if expected.dtype in PROMOTION_DTYPES and not backend.capabilities.supports(expected.dtype):
        with pytest.raises(TypeError):
            compute()
        return
    try:
        actual = compute()
    except TypeError:
        if expected.dtype in PROMOTION_DTYPES:
            raise
        return
    assert_on_device(actual, device, what=what)
    assert_matches_reference(actual, expected, what=what, snippet=snippet)


def _declared(backend) -> list[torch.dtype]:
    return [d for d in PROMOTION_DTYPES if backend.capabilities.supports(d)]


@pytest.mark.parametrize("kind", OPERAND_KINDS)
@pytest.mark.parametrize("op", sorted(BINARY_OPS))
def test_binary_op_promotes_every_dtype_pair_like_the_reference(backend, device, op, kind):
    """Every pair of declared dtypes (and, for a 0-dim CPU operand, every dtype): the result
    dtype equals the reference's and torch.result_type's, and so do the values."""
    declared = _declared(backend)
    # A 0-dim CPU operand may have any dtype, even one the device lacks (float64, say).
    second = PROMOTION_DTYPES if kind == "cpu 0-dim" else declared
    problems = []
    for dtype_a in declared:
        for dtype_b in second:
            if _reference_outcome(op, kind, dtype_a, dtype_b) != "ok":
                continue
            a, b = make_operands(op, kind, dtype_a, dtype_b, seed=7)
            device_a, device_b = _to_device(a, b, kind, device)
            snippet = _snippet(
                op,
                f"make({tuple(a.shape)}, {dtype_a}, 7)",
                f"make({tuple(b.shape)}, {dtype_b}, 8)",
                device,
                kind,
            )
            try:
                check_binary(op, (a, b), (device_a, device_b), backend, device, snippet)
            except AssertionError as error:
                problems.append(f"{dtype_a} {op} {dtype_b}: {error}")
    assert not problems, f"{len(problems)} dtype pair(s) differ:\n" + "\n\n".join(problems[:3])


@pytest.mark.parametrize("kind", OPERAND_KINDS[:3])
@pytest.mark.parametrize("op", sorted(BINARY_OPS))
def test_invalid_dtype_pairs_are_refused_like_the_reference(backend, device, op, kind):
    """Pairs the reference refuses by a rule of PyTorch's (bool subtraction, bitwise operators
    on floats, ordering of complex numbers) are refused on the device with the same error type."""
    declared = _declared(backend)
    problems = []
    for dtype_a in declared:
        for dtype_b in declared:
            if _reference_outcome(op, kind, dtype_a, dtype_b) != "error":
                continue
            a, b = make_operands(op, kind, dtype_a, dtype_b, seed=7)
            try:
                BINARY_OPS[op][0](a, b)
            except (RuntimeError, TypeError) as error:
                expected_error = type(error)
            device_a, device_b = _to_device(a, b, kind, device)
            try:
                result = BINARY_OPS[op][0](device_a, device_b)
            except expected_error:
                continue
            except Exception as error:
                problems.append(f"{dtype_a} {op} {dtype_b}: {type(error).__name__}: {error}")
                continue
            problems.append(
                f"{dtype_a} {op} {dtype_b}: the reference raises {expected_error.__name__}, "
                f"the device returns a {result.dtype} tensor"
            )
    assert not problems, "\n".join(problems[:10])


@pytest.mark.parametrize("scalar", sorted(SCALARS))
@pytest.mark.parametrize("op", sorted(BINARY_OPS))
def test_python_scalar_operand_promotes_like_the_reference(backend, device, op, scalar):
    """tensor op scalar and scalar op tensor (a Python int, float, bool or complex): a scalar
    only raises the category, and the result dtype and values equal the reference's."""
    function, _, symbol = BINARY_OPS[op]
    value = SCALARS[scalar]
    problems = []
    for dtype in _declared(backend):
        tensor = operand(dtype, (2, 3), seed=3, divisor=op in DIVISIONS)
        on_device = tensor.to(device)
        forms = [("tensor, scalar", lambda t, f=function: f(t, value))]
        if symbol is not None:
            forms.append(("scalar, tensor", lambda t, f=PYTHON_OPERATORS[symbol]: f(value, t)))
        for form, call in forms:
            try:
                expected = call(tensor)
            except (RuntimeError, TypeError) as error:
                if not _semantic_error(error):
                    continue
                with pytest.raises(type(error)):
                    call(on_device)
                continue
            oracle = expected_result_dtype(op, tensor, value)
            reversed_text = f"{value!r} {symbol} x"
            call_text = (
                call_code(op, "x", repr(value)) if form == "tensor, scalar" else (reversed_text)
            )
            snippet = (
                MAKE_SNIPPET
                + f"x = make((2, 3), {dtype}, 3)\nexpected = {call_text}\n"
                + f"x = x.to('{device}')\nactual = {call_text}\nprint(expected.dtype, actual.dtype)"
            )
            try:
                assert expected.dtype == oracle, (
                    f"the reference computes {expected.dtype}, torch.result_type says {oracle}"
                )
                assert_device_computes_like_the_reference(
                    lambda c=call, t=on_device: c(t), expected, backend, device, op, snippet
                )
            except AssertionError as error:
                problems.append(f"{dtype} ({form}, {scalar}): {error}")
    assert not problems, "\n\n".join(problems[:3])


@st.composite
def broadcastable_shapes(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Two shapes that broadcast together (including 0-dim and empty ones)."""
    first = draw(shapes(max_dims=3, max_side=4))
    second = []
    for side in first[len(first) - draw(st.integers(0, len(first))) :]:
        second.append(draw(st.sampled_from([side, 1])))
    if draw(st.booleans()):
        first, second = tuple(second), first
    return tuple(first), tuple(second)


@pytest.mark.parametrize("op", sorted(BINARY_OPS))
def test_broadcast_binary_op_matches_reference(backend, device, op):
    """Hypothesis-drawn dtype pairs, broadcast shapes and values: result dtype and values."""
    declared = _declared(backend)

    # @given inside the parametrized test: the plugin applies the profile to each collected
    # @given function once, and a parametrized one is collected once per parameter.
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        dtype_a = data.draw(st.sampled_from(declared), label="dtype_a")
        dtype_b = data.draw(st.sampled_from(declared), label="dtype_b")
        shape_a, shape_b = data.draw(broadcastable_shapes(), label="shapes")
        seed = data.draw(st.integers(0, 2**16), label="seed")
        a = operand(dtype_a, shape_a, seed, divisor=False)
        b = operand(dtype_b, shape_b, seed + 1, divisor=op in DIVISIONS)
        snippet = _snippet(
            op,
            f"make({shape_a}, {dtype_a}, {seed})",
            f"make({shape_b}, {dtype_b}, {seed + 1})",
            device,
        )
        check_binary(op, (a, b), (a.to(device), b.to(device)), backend, device, snippet)

    check()


@pytest.mark.parametrize("op", ["add_", "mul_", "sub_", "div_"])
def test_in_place_op_keeps_the_dtype_or_refuses_the_cast(backend, device, op):
    """``a.op_(b)`` computes in result_type(a, b) and stores in a's dtype; when that would cast
    to a lower category (float into int, complex into float) it is refused, as on the reference."""
    declared = _declared(backend)
    problems = []
    for dtype_a in declared:
        for dtype_b in declared:
            a = operand(dtype_a, (2, 3), 5, divisor=False)
            b = operand(dtype_b, (2, 3), 6, divisor=op == "div_")
            try:
                expected = getattr(a.clone(), op)(b)
            except (RuntimeError, TypeError) as error:
                if not _semantic_error(error):
                    continue
                try:
                    getattr(a.to(device), op)(b.to(device))
                except type(error):
                    continue
                except Exception as other:
                    problems.append(f"{dtype_a}.{op}({dtype_b}): {type(other).__name__} {other}")
                    continue
                problems.append(f"{dtype_a}.{op}({dtype_b}): the reference refuses ({error})")
                continue
            target = a.to(device)
            storage = target.untyped_storage().data_ptr()
            actual = getattr(target, op)(b.to(device))
            try:
                assert actual is target, f"{op} did not return its input"
                assert target.untyped_storage().data_ptr() == storage, f"{op} reallocated"
                assert_matches_reference(
                    actual,
                    expected,
                    what=f"{dtype_a}.{op}({dtype_b})",
                    snippet=MAKE_SNIPPET
                    + f"a, b = make((2, 3), {dtype_a}, 5), make((2, 3), {dtype_b}, 6)\n"
                    + f"print(a.clone().{op}(b), a.to('{device}').{op}(b.to('{device}')).cpu())",
                )
            except AssertionError as error:
                problems.append(str(error))
    assert not problems, "\n\n".join(problems[:3])


@pytest.mark.parametrize("dtype", [torch.float64, torch.complex128], ids=str)
def test_undeclared_promotion_raises_a_type_error(backend, device, dtype):
    """An int32 tensor with a 0-dim CPU tensor of a higher category promotes to that tensor's
    dtype; a device without that dtype refuses with a TypeError naming it."""
    x = torch.arange(6, dtype=torch.int32).reshape(2, 3)
    scalar = torch.tensor(1.5, dtype=dtype)
    expected = torch.add(x, scalar)
    assert expected.dtype == dtype == torch.result_type(x, scalar)
    if backend.capabilities.supports(dtype):
        assert_matches_reference(torch.add(x.to(device), scalar), expected, what="add")
        return
    with pytest.raises(TypeError, match=str(dtype).removeprefix("torch.")):
        torch.add(x.to(device), scalar)


def test_integer_division_follows_python_semantics(device):
    """floor_divide and remainder round toward negative infinity (remainder takes the divisor's
    sign); div with rounding_mode="trunc" rounds toward zero; true division gives floats."""
    a = torch.tensor([7, -7, 7, -7, 0], dtype=torch.int64)
    b = torch.tensor([2, 2, -2, -2, 3], dtype=torch.int64)
    expectations = {
        "floor_divide": ([3, -4, -4, 3, 0], torch.floor_divide),
        "remainder": ([1, 1, -1, -1, 0], torch.remainder),
        "trunc": ([3, -3, -3, 3, 0], lambda x, y: torch.div(x, y, rounding_mode="trunc")),
    }
    for name, (values, function) in expectations.items():
        actual = function(a.to(device), b.to(device))
        assert actual.dtype == torch.int64, f"{name} gives {actual.dtype}"
        assert actual.cpu().tolist() == values, f"{name}: {actual.cpu().tolist()} != {values}"
    quotient = torch.true_divide(a.to(device), b.to(device))
    assert quotient.dtype == torch.get_default_dtype()
    assert quotient.cpu().tolist() == [3.5, -3.5, -3.5, 3.5, 0.0]


def test_default_dtype_governs_float_results(backend, device):
    """Integer true division and a float scalar times an integer tensor give the default dtype,
    and follow torch.set_default_dtype (restored afterwards)."""
    x = torch.arange(4).to(device)
    assert (x / 2).dtype == torch.get_default_dtype()
    assert (x * 1.5).dtype == torch.get_default_dtype()
    previous = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.bfloat16)
        if not backend.capabilities.supports(torch.bfloat16):
            with pytest.raises(TypeError):
                x / 2
            return
        assert (x / 2).dtype == torch.bfloat16
        assert (x * 1.5).dtype == torch.bfloat16
        assert torch.tensor([1.0], device=device).dtype == torch.bfloat16
        assert (x / 2).cpu().tolist() == [0.0, 0.5, 1.0, 1.5]
    finally:
        torch.set_default_dtype(previous)


# ---- conversions: every pair of declared dtypes ----

CONVERSION_DTYPES = CORE_DTYPES + (torch.float8_e4m3fn, torch.float8_e5m2)
LOW_PRECISION_FLOATS = (torch.float16, torch.bfloat16, torch.float8_e4m3fn, torch.float8_e5m2)


def conversion_source(dtype: torch.dtype, seed: int) -> torch.Tensor:
    """Values of ``dtype`` that conversions get wrong: random ones, extremal floats or integers
    at their limits, k + 0.5 (truncated toward zero into integers) and, for every
    lower-precision float, values exactly halfway between two of its neighbours (rounded to
    the even one)."""
    kind = "extremal" if dtype.is_floating_point else "limits"
    parts = [make((8,), dtype, seed), make((8,), dtype, seed + 1, kind)]
    if dtype.is_floating_point or dtype.is_complex:
        halves = make((6,), torch.int64, seed + 2).div(5, rounding_mode="trunc") + 0.5
        parts.append(halves.to(dtype))
        for target in LOW_PRECISION_FLOATS:
            halfway = halfway_values(target, seed + 3, count=6)
            exact = halfway.to(dtype).to(torch.float32) == halfway
            parts.append(halfway[exact].to(dtype))
    return torch.cat(parts)


def convertible(values: torch.Tensor, target: torch.dtype) -> torch.Tensor:
    """The values whose conversion to ``target`` C++ defines: a float converts to an integer
    only if it is finite and its truncation fits (else undefined behaviour, which differs
    between CPUs and accelerators)."""
    if target.is_floating_point or target.is_complex or target == torch.bool:
        return values
    if not (values.dtype.is_floating_point or values.dtype.is_complex):
        return values
    real = values.real if values.dtype.is_complex else values
    real = real.float()
    info = torch.iinfo(target)
    keep = real.isfinite() & (real.trunc() >= info.min) & (real.trunc() <= min(info.max, 2**24))
    return values[keep]


@pytest.mark.parametrize("source", CONVERSION_DTYPES, ids=lambda d: str(d).removeprefix("torch."))
def test_conversion_to_every_declared_dtype_matches_reference(backend, device, source):
    """A tensor converted on the device (``.to(dtype)``) from ``source`` to every declared
    dtype gives the reference's values: round-to-nearest-even for halfway values,
    truncation into integers, wrap-around between integers, NaN, infinities and -0.0 kept."""
    if not backend.capabilities.supports(source):
        pytest.skip(f"the backend does not declare {source}")
    targets = [d for d in CONVERSION_DTYPES if backend.capabilities.supports(d)]

    @given(seed=st.integers(0, 2**16))
    def check(seed: int) -> None:
        values = conversion_source(source, seed)
        on_device = values.to(device)
        for target in targets:
            kept = convertible(values, target)
            snippet = MAKE_SNIPPET + (
                "from conformance.test_dtypes import conversion_source, convertible\n"
                f"x = convertible(conversion_source({source}, {seed}), {target})\n"
                f"expected = x.to({target})\nactual = x.to('{device}').to({target})\n"
                "print(expected, actual.cpu())"
            )
            try:
                expected = kept.to(target)
            except (RuntimeError, TypeError) as error:
                with pytest.raises(type(error)):
                    convertible(on_device, target).to(target)
                continue
            actual = convertible(on_device, target).to(target)
            assert_on_device(actual, device, what=f"{source} to {target}")
            assert_matches_reference(
                actual, expected, what=f"{source} to {target}", snippet=snippet, tolerance=(0, 0)
            )

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Casting complex values to real discards..."
        check()


@given(seed=st.integers(0, 2**16), decimals=st.integers(0, 2))
def test_round_halves_to_even_like_the_reference(backend, device, seed, decimals):
    """torch.round of values halfway between two candidates rounds to the even one (2.5 to
    2, -0.5 to -0.0), as on the reference, with and without decimals."""
    halves = (make((12,), torch.int64, seed).div(4, rounding_mode="trunc") + 0.5).float()
    values = halves / 10**decimals
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        if not backend.capabilities.supports(dtype):
            continue
        x = values.to(dtype)
        expected = torch.round(x, decimals=decimals)
        actual = torch.round(x.to(device), decimals=decimals)
        assert_matches_reference(
            actual,
            expected,
            what=f"round({dtype}, decimals={decimals})",
            tolerance=(0, 0),
            snippet=MAKE_SNIPPET
            + f"x = ((make((12,), torch.int64, {seed}).div(4, rounding_mode='trunc') + 0.5)"
            f".float() / 10**{decimals}).to({dtype})\n"
            f"print(torch.round(x, decimals={decimals}), "
            f"torch.round(x.to('{device}'), decimals={decimals}).cpu())",
        )
