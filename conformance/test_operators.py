"""Operator numerics: operators on the device give the reference's results, within the dtype's
tolerance.

Two parts:

* ``test_opinfo[<op>.<variant>-<dtype>]``: PyTorch's own OpInfo database (from the installed
  torch) supplies the operators and their sample inputs. Samples are made on the CPU from a fixed
  seed, moved to the device, and the result compared with the CPU's. The profile sets how many
  operators and samples: a core selection for ``quick``; every OpInfo in every declared dtype
  for ``default`` and ``thorough`` (all samples); operators that a manifest known failure names
  are always included, so that the entry is checked. A profile that compares some of an
  OpInfo's samples picks one of each distinct set of arguments first (``chosen_samples``), so
  that the options listed after the plain cases are reached.
* ``test_core_op_matches_reference_on_drawn_inputs[<op>]``: hypothesis draws shapes (0-dim and
  empty ones too), dtypes and non-contiguous views for a core set of operators.

A sample that needs a dtype the backend does not declare must be refused with a TypeError.
The OpInfo selection, the samples' transport to the device and the tolerances are in
opinfo.py.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from .assertions import reproducer
from .isolation import run_known_failure_in_child
from .opinfo import (
    GRADIENT_SAMPLES,
    HOST_ARGUMENTS,
    assert_outputs_match,
    case_id,
    chosen_samples,
    gradient_cases,
    holds_undeclared,
    move_leaves,
    op_database,
    opinfo_cases,
    opinfo_name,
    opinfo_snippet,
    projected_gradients,
    sample_limit,
    seed_host,
    tensors_in,
    to_device,
    upstream_tolerances,
)
from .opinfo import (
    exclusion as exclusion,  # re-exported: the meta-tests import it from here
)
from .strategies import (
    MAKE_SNIPPET,
    apply_view,
    device_views,
    make,
    repeated_indices,
    shapes,
)


def _known_case_ids(config: pytest.Config, test: str = "test_opinfo") -> set[str]:
    session = config.pluginmanager.get_plugin("conformance-session")
    if session is None:
        return set()
    ids = set()
    for entry in session.backend.manifest.known_failures:
        if f"{test}[" in entry.test:
            ids.add(entry.test.split(f"{test}[", 1)[1].removesuffix("]"))
    return ids


def _declared_dtypes(config: pytest.Config) -> frozenset[torch.dtype]:
    session = config.pluginmanager.get_plugin("conformance-session")
    return frozenset() if session is None else frozenset(session.backend.capabilities.dtypes)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    for fixture, test, select in (
        ("opinfo_case", "test_opinfo", opinfo_cases),
        ("gradient_case", "test_opinfo_gradients", gradient_cases),
    ):
        if fixture not in metafunc.fixturenames:
            continue
        ops, problem = op_database()
        if problem:
            metafunc.parametrize(fixture, [None], ids=["unavailable"])
            return
        profile = metafunc.config.getoption("conformance_profile")
        known = _known_case_ids(metafunc.config, test)
        cases = select(profile, known, _declared_dtypes(metafunc.config))
        metafunc.parametrize(fixture, cases, ids=[case_id(op, dtype) for op, dtype in cases])


def check_sample(op, sample, dtype, index: int, backend, reference, device, tolerances) -> None:
    """One OpInfo sample: the device's result matches the CPU's, or the device refuses with a
    TypeError a dtype the reference declares and the backend does not. (A dtype that even the
    reference's manifest does not declare, complex32 or uint64, may be either.)"""
    snippet = opinfo_snippet(op, dtype, index, device)
    what = f"{opinfo_name(op)} sample {index}"

    def undeclared(value: object) -> bool:
        return any(
            reference.capabilities.supports(t.dtype) and not backend.capabilities.supports(t.dtype)
            for t in tensors_in(value)
        )

    if undeclared([sample.input, sample.args, sample.kwargs]):
        with pytest.raises(TypeError):
            to_device([sample.input, sample.args, sample.kwargs], device)
        return
    # Moved before the reference runs: an op may write to its inputs (embedding_bag with
    # max_norm renormalizes its weight in place), and the device must start from the same values.
    args = sample.args if op.name in HOST_ARGUMENTS else to_device(sample.args, device)
    moved = (to_device(sample.input, device), args, to_device(sample.kwargs, device))
    expected = op(sample.input, *sample.args, **sample.kwargs)
    if undeclared(expected):
        with pytest.raises(TypeError):
            op(moved[0], *moved[1], **moved[2])
        return
    try:
        actual = op(moved[0], *moved[1], **moved[2])
    except TypeError:
        if any(not reference.capabilities.supports(t.dtype) for t in tensors_in(expected)):
            return
        raise
    # output_process_fn_grad makes ill-defined outputs comparable (the signs of singular
    # vectors, say), as PyTorch's own cross-device check does.
    assert_outputs_match(
        sample.output_process_fn_grad(actual),
        sample.output_process_fn_grad(expected),
        device,
        what,
        snippet,
        tolerances,
    )


def test_opinfo(backend, reference, device, request, opinfo_case):
    """The OpInfo samples of one operator and dtype give the reference's results."""
    ops, problem = op_database()
    assert not problem, problem
    if run_known_failure_in_child(request):
        return
    op, dtype = opinfo_case
    limit = sample_limit(request.config.getoption("conformance_profile"), op, dtype)
    if request.node.get_closest_marker("xfail") is not None:
        limit = None  # a known failure is checked on every sample, whatever the profile
    seed_host(0)  # torch.manual_seed(0) for the CPU-made samples, cheaper (seed_host)
    samples = chosen_samples(op.sample_inputs("cpu", dtype), limit)
    tolerances = upstream_tolerances(op, dtype, device.type, "outputs")
    count = 0
    for index, sample in samples:
        check_sample(op, sample, dtype, index, backend, reference, device, tolerances)
        count += 1
    assert count, f"OpInfo has no sample input for {opinfo_name(op)} in {dtype}"


def test_opinfo_gradients(backend, reference, device, request, gradient_case):
    """The gradients of an operator's OpInfo samples (requires_grad inputs, a seeded random
    cotangent) on the device match the CPU's, and are on the device."""
    ops, problem = op_database()
    assert not problem, problem
    if run_known_failure_in_child(request):
        return
    op, dtype = gradient_case
    limit = GRADIENT_SAMPLES[request.config.getoption("conformance_profile")]
    if request.node.get_closest_marker("xfail") is not None:
        limit = None
    seed_host(0)  # torch.manual_seed(0) for the CPU-made samples, cheaper (seed_host)
    samples = chosen_samples(op.sample_inputs("cpu", dtype, requires_grad=True), limit)
    tolerances = upstream_tolerances(op, dtype, device.type, "gradients")
    count = 0
    for index, sample in samples:
        count += 1
        what = f"the gradients of {opinfo_name(op)} sample {index}"
        snippet = opinfo_snippet(op, dtype, index, device).replace(
            '"cpu", ' + str(dtype), '"cpu", ' + str(dtype) + ", requires_grad=True"
        )
        # Moved before the reference runs, as in check_sample (an op may write to its inputs).
        movable = not holds_undeclared(
            backend, reference, [sample.input, sample.args, sample.kwargs]
        )
        moved = move_leaves(op, sample, device) if movable else None
        output, expected = projected_gradients(
            op, sample, sample.input, sample.args, sample.kwargs, index
        )
        if moved is None or holds_undeclared(
            backend, reference, [output, sample.args, sample.kwargs]
        ):
            # a sample that asks for float64 (softmax's dtype=, or a float64 tensor argument as
            # `to`'s): refused, as test_opinfo checks, when the argument moves or the op runs
            with pytest.raises(TypeError):
                projected_gradients(op, sample, *(moved or move_leaves(op, sample, device)), index)
            continue
        _, actual = projected_gradients(op, sample, *moved, index)
        for position, (got, want) in enumerate(zip(actual, expected, strict=True)):
            if want is None:
                assert got is None, f"{what}: input {position} got a gradient, not on the CPU"
                continue
            assert got is not None, f"{what}: input {position} got no gradient" + reproducer(
                snippet
            )
            assert_outputs_match(
                got,
                want,
                device,
                f"{what}, input {position}",
                snippet,
                tolerances,
            )
    assert count, f"OpInfo has no sample input for {opinfo_name(op)} in {dtype}"


# ---- part 2: hypothesis-drawn inputs for a core set ----

FLOATS = (torch.float32, torch.bfloat16, torch.float16)
INTS = (torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8)
NUMERIC = FLOATS + INTS
SIGNED = FLOATS + (torch.int8, torch.int16, torch.int32, torch.int64)
ORDERED = FLOATS + (torch.int32, torch.int64, torch.uint8)
# complex64 drawn with both parts non-zero (strategies.make): the arithmetic that mixes them
COMPLEX = (torch.complex64,)

# Which value kinds (strategies.VALUE_KINDS) each family of operators is drawn with: "random"
# always on a view taken on the device; the others on any layout.
ELEMENTWISE = ("random", "extremal", "limits")
TRANSCENDENTAL = ("random", "extremal")
ORDERING = ("random", "ties", "extremal")
ACCUMULATING = ("random", "extremal", "limits")

# name: (kind, the operation as code on x, y, dim and k, the dtypes, the value kinds). Names
# ending in "_" are in-place: the base of the view must change as on the reference.
CORE_OPS = {
    "add": ("binary", "torch.add(x, y)", NUMERIC + COMPLEX, ELEMENTWISE),
    "add_": ("binary", "x.add_(y)", NUMERIC + COMPLEX, ELEMENTWISE),
    "mul": ("binary", "torch.mul(x, y)", NUMERIC + COMPLEX, ELEMENTWISE),
    "mul_": ("binary", "x.mul_(y)", NUMERIC + COMPLEX, ("random", "limits")),
    "sub": ("binary", "torch.sub(x, y)", NUMERIC + COMPLEX, ELEMENTWISE),
    "div": ("binary", "torch.div(x, y)", FLOATS + COMPLEX, TRANSCENDENTAL),
    "div_": ("binary", "x.div_(y)", FLOATS + COMPLEX, ("random",)),
    "maximum": ("binary", "torch.maximum(x, y)", NUMERIC, ELEMENTWISE),
    "where": ("binary", "torch.where(x > 0, x, y)", NUMERIC, ("random",)),
    "neg": ("unary", "torch.neg(x)", SIGNED + COMPLEX, ("random", "limits")),
    "abs_": ("unary", "x.abs_()", SIGNED, ("random", "limits")),
    "exp": ("unary", "torch.exp(x)", FLOATS + COMPLEX, TRANSCENDENTAL),
    "exp_": ("unary", "x.exp_()", FLOATS, TRANSCENDENTAL),
    "log": ("unary", "torch.log(x)", FLOATS, TRANSCENDENTAL),
    "tanh": ("unary", "torch.tanh(x)", FLOATS, TRANSCENDENTAL),
    "sigmoid": ("unary", "torch.sigmoid(x)", FLOATS, TRANSCENDENTAL),
    "sigmoid_": ("unary", "x.sigmoid_()", FLOATS, ("random",)),
    "relu": ("unary", "torch.relu(x)", SIGNED, ("random", "extremal")),
    "conj_physical": ("unary", "torch.conj_physical(x)", COMPLEX + FLOATS, ("random",)),
    "conj_physical_": ("unary", "x.conj_physical_()", COMPLEX + FLOATS, ("random",)),
    # the imaginary part, read through its view (a copy would miss the base's later writes)
    "imag_": ("unary", "x.imag.mul_(-2)", COMPLEX, ("random",)),
    "clamp": ("unary", "torch.clamp(x, -2, 3)", SIGNED, ("random", "extremal")),
    "clamp_": ("unary", "x.clamp_(-2, 3)", SIGNED, ("random",)),
    "sum": ("reduction", "x.sum(dim)", NUMERIC + COMPLEX, ACCUMULATING),
    "prod": ("reduction", "x.prod(dim) if dim is not None else x.prod()", NUMERIC, ACCUMULATING),
    "mean": ("reduction", "x.mean(dim)", FLOATS + COMPLEX, TRANSCENDENTAL),
    "amax": ("reduction", "x.amax(dim)", ORDERED, ORDERING),
    "amin": ("reduction", "x.amin(dim)", ORDERED, ORDERING),
    "argmax": ("reduction", "x.argmax(dim)", ORDERED, ORDERING),
    "argmin": ("reduction", "x.argmin(dim)", ORDERED, ORDERING),
    "logsumexp": ("scan", "torch.logsumexp(x, dim)", FLOATS, TRANSCENDENTAL),
    "max_dim": ("scan", "torch.max(x, dim)", ORDERED, ORDERING),
    "min_dim": ("scan", "torch.min(x, dim)", ORDERED, ORDERING),
    # topk's order among tied values is unspecified: its values, and the input at its indices
    "topk": (
        "scan",
        "(lambda r: (r.values, x.gather(dim, r.indices)))(torch.topk(x, k, dim))",
        ORDERED,
        ORDERING,
    ),
    "sort": ("scan", "torch.sort(x, dim=dim, stable=True)", ORDERED, ORDERING),
    "sort_descending": (
        "scan",
        "torch.sort(x, dim=dim, descending=True, stable=True)",
        ORDERED,
        ORDERING,
    ),
    "argsort": ("scan", "torch.argsort(x, dim=dim, stable=True)", ORDERED, ("ties",)),
    "softmax": ("scan", "torch.softmax(x, dim)", FLOATS, TRANSCENDENTAL),
    "log_softmax": ("scan", "torch.log_softmax(x, dim)", FLOATS, TRANSCENDENTAL),
    "cumsum": ("scan", "torch.cumsum(x, dim)", NUMERIC + COMPLEX, ACCUMULATING),
    "cumsum_": ("scan", "x.cumsum_(dim)", NUMERIC, ("random", "limits")),
    "mse_loss": ("binary", "torch.nn.functional.mse_loss(x, y)", FLOATS, TRANSCENDENTAL),
    "bce_with_logits": (
        "binary",
        "torch.nn.functional.binary_cross_entropy_with_logits(x, y.sigmoid())",
        FLOATS,
        TRANSCENDENTAL,
    ),
    "cross_entropy": (
        "binary",
        "torch.nn.functional.cross_entropy(x, y.softmax(min(1, x.dim() - 1)))",
        FLOATS,
        TRANSCENDENTAL,
    ),
    "matmul": ("matmul", "torch.matmul(x, y)", FLOATS + COMPLEX, ("random",)),
}


def _kind_dtypes(dtypes: tuple[torch.dtype, ...], values: str) -> tuple[torch.dtype, ...]:
    """The dtypes a value kind is drawn in: extremal values are floats, limits integers."""
    if values == "extremal":
        return tuple(d for d in dtypes if d.is_floating_point)
    if values == "limits":
        return tuple(
            d for d in dtypes if not (d.is_floating_point or d.is_complex or d == torch.bool)
        )
    return dtypes


CORE_CASES = [
    (name, values)
    for name, (_, _, applies_to, kinds) in sorted(CORE_OPS.items())
    for values in kinds
    if _kind_dtypes(applies_to, values)
]


@dataclasses.dataclass
class CoreInputs:
    """Inputs of a core operator: a base made on the CPU, the view of it the operator gets
    (taken after the move to the device), y (the view's shape), dim and k."""

    base: torch.Tensor
    view: str
    y: torch.Tensor
    dim: int | None
    k: int
    code: str

    def run(self, code: str, device: torch.device | None) -> tuple[object, torch.Tensor]:
        """The operation on the view of the base (on ``device``, or of a CPU copy): its
        result, and the base afterwards (in-place operators write through the view)."""
        base = self.base.clone() if device is None else self.base.to(device)
        y = self.y if device is None else self.y.to(device)
        x = apply_view(self.view, base)
        run = eval(f"lambda x, y, dim, k: {code}")
        return run(x, y, self.dim, self.k), base


@st.composite
def core_inputs(draw: st.DrawFn, kind: str, dtypes: list[torch.dtype], values: str) -> CoreInputs:
    """The inputs of an operator of ``kind``, with ``values`` of that kind, the operand x a
    view taken on the device (always for random values, sometimes for the others)."""
    dtype = draw(st.sampled_from(dtypes), label="dtype")
    seed = draw(st.integers(0, 2**16), label="seed")
    if kind == "matmul":
        batch = draw(shapes(max_dims=1, max_side=3), label="batch")
        m, k, n = (draw(st.integers(0, 5), label=side) for side in "mkn")
        transposed = draw(st.booleans(), label="transposed")
        base_shape = (*batch, k, m) if transposed else (*batch, m, k)
        view = "t.transpose(-1, -2)" if transposed else "t"
        y_shape = (*batch, k, n)
    else:
        base_shape = draw(shapes(max_dims=3, max_side=6), label="base_shape")
        min_steps = 1 if values == "random" else 0
        view = draw(device_views(base_shape, min_steps=min_steps), label="view")
        y_shape = tuple(apply_view(view, torch.empty(base_shape)).shape)
    dim, k = None, 1
    if kind in ("reduction", "scan"):
        ndim = len(y_shape)
        dims = st.sampled_from(list(range(-max(ndim, 1), max(ndim, 1))))
        dim = draw(dims if kind == "scan" else st.one_of(st.none(), dims), label="dim")
        k = min(2, y_shape[dim]) if ndim and dim is not None else 1
    base = make(tuple(base_shape), dtype, seed, values)
    y = make(y_shape, dtype, seed + 1, values)
    code = (
        f"base = make({tuple(base_shape)}, {dtype}, {seed}, {values!r})\n"
        f"y = make({y_shape}, {dtype}, {seed + 1}, {values!r})\ndim, k = {dim}, {k}"
    )
    return CoreInputs(base, view, y, dim, k, code)


def fixed_core_inputs(kind: str, dtype: torch.dtype, values: str) -> CoreInputs:
    """One input every run checks besides the drawn ones: a strided view with an offset,
    taken on the device (a transposed operand for matmul). A few drawn examples may all miss
    a kernel that reads a view as if it were contiguous; this one never does."""
    if kind == "matmul":
        base_shape, view, y_shape = (3, 4), "t.transpose(-1, -2)", (3, 2)
    else:
        base_shape, view = (5, 6), "t[1::2, 0::2]"
        y_shape = tuple(apply_view(view, torch.empty(base_shape)).shape)
    dim = 1 if kind == "scan" else None
    k = 1
    base = make(base_shape, dtype, 7, values)
    y = make(y_shape, dtype, 8, values)
    code = (
        f"base = make({base_shape}, {dtype}, 7, {values!r})\n"
        f"y = make({y_shape}, {dtype}, 8, {values!r})\ndim, k = {dim}, {k}"
    )
    return CoreInputs(base, view, y, dim, k, code)


# The snippets print the device's results from the CPU (printing formats through float64,
# which a backend may not have).
PRINT_RESULTS = (
    "print(expected, [t.cpu() for t in actual] if isinstance(actual, tuple) else actual.cpu())"
)


def _core_snippet(inputs: CoreInputs, code: str, device: torch.device) -> str:
    view = inputs.view.replace("t", "b", 1) if inputs.view.startswith("t") else inputs.view
    return (
        MAKE_SNIPPET
        + inputs.code
        + f"\nb = base.clone()\nx = {view}\nexpected = {code}\n"
        + f"b, y = base.to('{device}'), y.to('{device}')\nx = {view}\nactual = {code}\n"
        + PRINT_RESULTS
    )


@pytest.mark.parametrize(("name", "values"), CORE_CASES, ids=[f"{n}-{v}" for n, v in CORE_CASES])
def test_core_op_matches_reference_on_drawn_inputs(backend, device, name, values):
    """The operator on hypothesis-drawn shapes (0-dim and empty too), dtypes, views taken on
    the device (steps, transposes, expands, offsets) and values of one kind (random, ties,
    extremal floats, integers near their limits) gives the reference's result, and an
    in-place operator writes the reference's values through the view; an input the reference
    refuses is refused too."""
    kind, code, applies_to, _ = CORE_OPS[name]
    dtypes = [d for d in _kind_dtypes(applies_to, values) if backend.capabilities.supports(d)]
    if not dtypes:
        pytest.skip(f"the backend declares none of {applies_to} for {values} values")

    # @given inside the parametrized test: the plugin applies the profile to each collected
    # @given function once, and a parametrized one is collected once per parameter.
    # The fixed input in the first dtype, and in complex64 where drawn: a complex kernel's bug
    # (the imaginary parts' product dropped) is then reached in every run, not in one of nine
    # dtype draws.
    fixed = [dtypes[0]] + [d for d in COMPLEX if d in dtypes and d != dtypes[0]]

    @given(inputs=core_inputs(kind, dtypes, values))
    def check(inputs: CoreInputs) -> None:
        snippet = _core_snippet(inputs, code, device)
        try:
            expected, expected_base = inputs.run(code, None)
        except (RuntimeError, IndexError) as error:
            # An input the operator refuses (amax over an empty dim, an in-place write to an
            # expanded view, say): refused here too.
            with pytest.raises(type(error)):
                inputs.run(code, device)
            return
        actual, actual_base = inputs.run(code, device)
        assert_outputs_match(actual, expected, device, name, snippet)
        assert_outputs_match(actual_base, expected_base, device, f"the base after {name}", snippet)

    for dtype in fixed:
        check = example(inputs=fixed_core_inputs(kind, dtype, values))(check)
    check()


# ---- repeated indices, drawn scalar arguments, data-dependent output sizes ----

# name: the operation as code on x (a (rows, 4) tensor), index (repeated indices into its
# rows), src ((len(index), 4), x's dtype) and weights (len(index), x's dtype)
ACCUMULATING_OPS = {
    "scatter_add": "torch.scatter_add(x, 0, index[:, None].expand(-1, 4), src)",
    "scatter_add_": "x.scatter_add_(0, index[:, None].expand(-1, 4), src)",
    "scatter_reduce_sum": "x.scatter_reduce(0, index[:, None].expand(-1, 4), src, 'sum')",
    "index_add": "torch.index_add(x, 0, index, src)",
    "index_add_": "x.index_add_(0, index, src, alpha=2)",
    "index_put_accumulate": "x.index_put((index,), src, accumulate=True)",
    "index_put_accumulate_": "x.index_put_((index,), src, accumulate=True)",
    "put_accumulate": "x.put(index, weights, accumulate=True)",
    "bincount": "torch.bincount(index)",
    "bincount_weights": "torch.bincount(index, weights=weights.float(), minlength=3)",
}


@pytest.mark.parametrize("op", sorted(ACCUMULATING_OPS))
def test_accumulating_op_adds_repeated_indices(backend, device, op):
    """An accumulating operator given the same index several times adds every contribution
    (a kernel that writes instead of adding keeps only one), as on the reference."""
    code = ACCUMULATING_OPS[op]
    among = (torch.float32, torch.int64, torch.int32, torch.bfloat16)
    dtypes = [d for d in among if backend.capabilities.supports(d)]
    run = eval(f"lambda x, index, src, weights: {code}")

    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        rows = data.draw(st.integers(1, 5), label="rows")
        count = data.draw(st.integers(1, 12), label="count")
        index = data.draw(repeated_indices(rows, count), label="index")
        dtype = data.draw(st.sampled_from(dtypes), label="dtype")
        seed = data.draw(st.integers(0, 2**16), label="seed")
        # Small integers in every dtype: sums are exact, whatever the order of additions.
        small = "make({}, torch.int64, {}).div(10, rounding_mode='trunc').to(" + f"{dtype})"
        recipes = {
            "x": small.format((rows, 4), seed),
            "src": small.format((count, 4), seed + 1),
            "weights": small.format((count,), seed + 2),
        }
        values = {name: eval(recipe) for name, recipe in recipes.items()}
        values["index"] = torch.tensor(index, dtype=torch.int64)
        snippet = MAKE_SNIPPET + (
            "".join(f"{name} = {recipe}\n" for name, recipe in recipes.items())
            + f"index = torch.tensor({index})\nexpected = {code}\n"
            f"x, index, src, weights = (t.to('{device}') for t in (x, index, src, weights))\n"
            f"actual = {code}\nprint(expected, actual.cpu(), x.cpu())"
        )
        reference_x = values["x"].clone()
        expected = run(reference_x, values["index"], values["src"], values["weights"])
        moved = to_device(values, device)
        actual = run(moved["x"], moved["index"], moved["src"], moved["weights"])
        assert_outputs_match(actual, expected, device, op, snippet)
        assert_outputs_match(moved["x"], reference_x, device, f"x after {op}", snippet)

    check()


# clamp's bounds: a Python number, None, or (for the tensor overload) a tensor
BOUNDS = st.one_of(st.none(), st.integers(-6, 6), st.floats(-6, 6, width=16))


@pytest.mark.parametrize("overload", ["scalar", "tensor", "in-place"])
def test_clamp_with_drawn_bounds_matches_reference(backend, device, overload):
    """clamp with drawn bounds: min > max (every element becomes max), one side None, both
    None (refused), integer and float bounds on every declared real dtype."""
    among = (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int64, torch.int8)
    dtypes = [d for d in among if backend.capabilities.supports(d)]

    def compare(dtype: torch.dtype, seed: int, low: object, high: object) -> None:
        if overload == "tensor":
            low, high = (None if b is None else torch.tensor(b).to(dtype) for b in (low, high))
            code = "torch.clamp(x, low.to(x.device) if low is not None else None, "
            code += "high.to(x.device) if high is not None else None)"
        else:
            code = "x.clamp_(low, high)" if overload == "in-place" else "torch.clamp(x, low, high)"
        run = eval(f"lambda x, low, high: {code}")
        x = make((3, 5), dtype, seed)
        snippet = MAKE_SNIPPET + (
            f"x = make((3, 5), {dtype}, {seed})\nlow, high = {low!r}, {high!r}\n"
            f"expected = {code}\nx = x.to('{device}')\nactual = {code}\n" + PRINT_RESULTS
        )
        try:
            expected = run(x.clone(), low, high)
        except (RuntimeError, TypeError) as error:
            with pytest.raises(type(error)):
                run(x.to(device), low, high)
            return
        actual = run(x.to(device), low, high)
        assert_outputs_match(actual, expected, device, "clamp", snippet)

    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        dtype = data.draw(st.sampled_from(dtypes), label="dtype")
        seed = data.draw(st.integers(0, 2**16), label="seed")
        low = data.draw(BOUNDS, label="min")
        high = data.draw(BOUNDS, label="max")
        if low is not None and high is not None and data.draw(st.booleans(), label="min>max"):
            low, high = max(low, high) + 1, min(low, high)
        compare(dtype, seed, low, high)

    # min > max in every run: a few drawn examples may not reach it.
    compare(dtypes[0], 0, 3, -2)
    check()


# name: the operation as code on x (drawn, with ties) and mask (x > 0); the output's size
# depends on the values, so a backend may compute it on the host: the result must still be
# on the device.
DATA_DEPENDENT_OPS = {
    "nonzero": "torch.nonzero(x)",
    "nonzero_as_tuple": "torch.nonzero(x, as_tuple=True)",
    "argwhere": "torch.argwhere(x)",
    "where_condition": "torch.where(mask)",
    "masked_select": "torch.masked_select(x, mask)",
    "boolean_index": "x[mask]",
    "unique": "torch.unique(x, return_inverse=True, return_counts=True)",
    "unique_dim": "torch.unique(x.reshape(x.shape[0], -1), dim=0, return_counts=True)",
    "unique_consecutive": "torch.unique_consecutive(x, return_inverse=True, return_counts=True)",
    "repeat_interleave": "torch.repeat_interleave(x, mask.long().flatten() + 1, dim=None)",
}


@pytest.mark.parametrize("op", sorted(DATA_DEPENDENT_OPS))
def test_data_dependent_output_is_on_the_device(backend, device, op):
    """An operator whose output size depends on the values (nonzero, masked_select, unique...)
    gives the reference's result, every output tensor on the device."""
    code = DATA_DEPENDENT_OPS[op]
    among = (torch.float32, torch.int64, torch.int32, torch.bool, torch.bfloat16)
    dtypes = [d for d in among if backend.capabilities.supports(d)]
    run = eval(f"lambda x, mask: {code}")

    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        shape = data.draw(shapes(min_dims=1, max_dims=3, max_side=5), label="shape")
        dtype = data.draw(st.sampled_from(dtypes), label="dtype")
        seed = data.draw(st.integers(0, 2**16), label="seed")
        x = make(shape, dtype, seed, "ties")
        mask = make(shape, torch.bool, seed + 1)
        snippet = MAKE_SNIPPET + (
            f"x = make({shape}, {dtype}, {seed}, 'ties')\nmask = make({shape}, torch.bool, "
            f"{seed + 1})\nexpected = {code}\nx, mask = x.to('{device}'), mask.to('{device}')\n"
            f"actual = {code}\n" + PRINT_RESULTS
        )
        try:
            expected = run(x, mask)
        except RuntimeError as error:
            with pytest.raises(type(error)):
                run(x.to(device), mask.to(device))
            return
        actual = run(x.to(device), mask.to(device))
        assert_outputs_match(actual, expected, device, op, snippet)

    check()
