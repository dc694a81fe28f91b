"""Operator numerics: operators on the device give the reference's results, within the dtype's
tolerance.

Two parts:

* ``test_opinfo[<op>.<variant>-<dtype>]``: PyTorch's own OpInfo database (from the installed
  torch) supplies the operators and their sample inputs. Samples are made on the CPU from a fixed
  seed, moved to the device, and the result compared with the CPU's. The profile sets how many
  operators and samples: a core selection for ``quick``, more for ``default``, all for
  ``thorough``; operators that a manifest known failure names are always included, so that the
  entry is checked.
* ``test_core_op_matches_reference_on_drawn_inputs[<op>]``: hypothesis draws shapes (0-dim and
  empty ones too), dtypes and non-contiguous views for a core set of operators.

A sample that needs a dtype the backend does not declare must be refused with a TypeError.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Iterator

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from .assertions import assert_matches_reference, assert_on_device, reproducer
from .isolation import run_known_failure_in_child
from .strategies import MAKE_SNIPPET, TensorSpec, shapes, strided_views

# ---- part 1: PyTorch's OpInfo database ----

# The core selection of the quick profile (every variant of each name).
QUICK_OPS = (
    # elementwise
    "abs", "neg", "add", "sub", "mul", "div", "pow", "exp", "log", "sqrt", "rsqrt", "sin",
    "tanh", "sigmoid", "erf", "floor", "sign", "clamp", "where", "maximum", "lerp", "addcmul",
    # reductions and scans
    "sum", "mean", "prod", "amax", "argmax", "var", "logsumexp", "cumsum",
    # linear algebra
    "mm", "bmm", "matmul", "addmm", "outer", "einsum", "linalg.vector_norm",
    # shapes and indexing
    "cat", "stack", "flip", "roll", "gather", "index_select", "masked_fill", "tril", "repeat",
    "scatter_add", "index_add", "nonzero",
    # sorting
    "sort", "topk",
    # neural networks
    "nn.functional.relu", "nn.functional.gelu", "nn.functional.silu", "softmax",
    "log_softmax", "nn.functional.layer_norm", "nn.functional.linear", "nn.functional.conv2d",
    "nn.functional.max_pool2d", "nn.functional.cross_entropy", "nn.functional.mse_loss",
)  # fmt: skip
# The quick profile's bfloat16 subset: well-conditioned operators, where bfloat16 rounding
# differences between kernels stay within the bfloat16 tolerance.
QUICK_BFLOAT16_OPS = (
    "add", "mul", "sub", "exp", "tanh", "sigmoid", "sum", "mean", "amax", "softmax", "matmul",
    "nn.functional.relu", "nn.functional.gelu", "nn.functional.linear", "cat", "where", "clamp",
)  # fmt: skip
# Profile: {dtype: operators beyond the core selection, every Nth eligible one}, samples per op
PROFILE_DEPTH = {
    "quick": ({}, 8),
    "default": ({torch.float32: 4}, 24),
    "thorough": ({torch.float32: 1, torch.bfloat16: 1}, None),
}

RANDOM_OPS = {
    "bernoulli", "cauchy", "exponential", "geometric", "log_normal", "multinomial", "normal",
    "uniform", "rand_like", "randn_like", "randint_like", "randint", "randn",
    "nn.functional.rrelu", "pca_lowrank", "svd_lowrank", "nn.functional.gumbel_softmax",
}  # fmt: skip
# Arguments that an operator requires on the CPU whatever the device of its input (documented:
# tensor_split's indices_or_sections "must be a long tensor on the CPU").
HOST_ARGUMENTS = {"tensor_split"}


@functools.cache
def op_database() -> tuple[list, str]:
    """PyTorch's OpInfo list, or ([], why it cannot be loaded)."""
    frozen = torch.backends.flags_frozen()
    try:
        from torch.testing._internal.common_methods_invocations import op_db
    except ImportError as error:
        return [], (
            f"PyTorch's OpInfo database cannot be imported ({error}); torch.testing._internal "
            "needs the expecttest package: pip install expecttest"
        )
    finally:
        # torch.testing._internal freezes torch.backends flags for PyTorch's own suite
        # (disable_global_flags, which has no inverse); other areas of this suite set them.
        # The flag lives in the globals of torch/backends/__init__.py.
        if not frozen:
            torch.backends.flags_frozen.__globals__["__allow_nonbracketed_mutation_flag"] = True
    return list(op_db), ""


def opinfo_name(op) -> str:  # noqa: ANN001 - an OpInfo
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def _skips_compare_cpu(op, dtype: torch.dtype) -> bool:  # noqa: ANN001
    """True if PyTorch's own cross-device check (TestCommon.test_compare_cpu) skips or expects
    a failure for this operator on every device: outputs that legitimately differ."""
    for info in itertools.chain(op.decorators, op.skips):
        if getattr(info, "test_name", None) != "test_compare_cpu":
            continue
        if info.device_type is None and (info.dtypes is None or dtype in info.dtypes):
            return True
    return False


def exclusion(op, dtype: torch.dtype) -> str:  # noqa: ANN001
    """Why this operator is not compared with the reference, or "" if it is."""
    name = op.name
    if name in RANDOM_OPS or "dropout" in name or "fractional_max_pool" in name:
        return "random output"
    if "empty" in name or name in ("resize_", "resize_as_") or op.has_nondeterministic_output:
        return "uninitialized or nondeterministic output"
    if op.is_factory_function:
        return "a factory (the creation area)"
    if "sparse" in name:
        return "sparse layouts"
    if name.startswith("jiterator"):
        return "CUDA only (jiterator)"
    if _skips_compare_cpu(op, dtype):
        return "PyTorch's own cross-device check skips it"
    if not op.supports_dtype(dtype, "cpu"):
        return f"the reference has no {dtype} kernel"
    return ""


def opinfo_cases(profile: str, known: set[str]) -> list[tuple[object, torch.dtype]]:
    """The (OpInfo, dtype) pairs the profile compares, plus those ``known`` names by test id."""
    ops, _ = op_database()
    beyond_core, _ = PROFILE_DEPTH[profile]
    cases = []
    for dtype, core in ((torch.float32, QUICK_OPS), (torch.bfloat16, QUICK_BFLOAT16_OPS)):
        eligible = [op for op in ops if not exclusion(op, dtype)]
        every_nth = beyond_core.get(dtype)
        for index, op in enumerate(eligible):
            selected = op.name in core or (every_nth is not None and index % every_nth == 0)
            if selected or case_id(op, dtype) in known:
                cases.append((op, dtype))
    return cases


def case_id(op, dtype: torch.dtype) -> str:  # noqa: ANN001
    return f"{opinfo_name(op)}-{str(dtype).removeprefix('torch.')}"


def _known_case_ids(config: pytest.Config) -> set[str]:
    session = config.pluginmanager.get_plugin("conformance-session")
    if session is None:
        return set()
    ids = set()
    for entry in session.backend.manifest.known_failures:
        if "test_opinfo[" in entry.test:
            ids.add(entry.test.split("test_opinfo[", 1)[1].removesuffix("]"))
    return ids


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "opinfo_case" not in metafunc.fixturenames:
        return
    ops, problem = op_database()
    if problem:
        metafunc.parametrize("opinfo_case", [None], ids=["unavailable"])
        return
    profile = metafunc.config.getoption("conformance_profile")
    cases = opinfo_cases(profile, _known_case_ids(metafunc.config))
    metafunc.parametrize("opinfo_case", cases, ids=[case_id(op, dtype) for op, dtype in cases])


def to_device(value: object, device: torch.device) -> object:
    """``value`` with every tensor in it (in lists, tuples and dicts too) moved to ``device``,
    and every mention of the CPU device (samples made on the CPU name it, as in
    ``x.to("cpu", torch.float64)``) made ``device``."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, (list, tuple)):
        return type(value)(to_device(item, device) for item in value)
    if isinstance(value, dict):
        return {key: to_device(item, device) for key, item in value.items()}
    if isinstance(value, (str, torch.device)) and str(value) == "cpu":
        return device
    return value


def tensors_in(value: object) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from tensors_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from tensors_in(item)


def assert_outputs_match(
    actual: object, expected: object, device: torch.device, what: str, snippet: str
) -> None:
    """Every tensor in ``actual`` is on the device and matches ``expected``'s; other leaves
    (Python numbers, sizes) are equal."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{what} is a {type(actual).__name__}"
        assert_on_device(actual, device, what=what)
        assert_matches_reference(actual, expected, what=what, snippet=snippet)
    elif isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)) and len(actual) == len(expected), (
            f"{what} is {actual!r}, the reference's is {expected!r}" + reproducer(snippet)
        )
        for index, (item, reference_item) in enumerate(zip(actual, expected, strict=True)):
            assert_outputs_match(item, reference_item, device, f"{what}[{index}]", snippet)
    elif isinstance(expected, float):
        assert actual == pytest.approx(expected, rel=1e-5, nan_ok=True), (
            f"{what} is {actual!r}, the reference's is {expected!r}" + reproducer(snippet)
        )
    else:
        assert actual == expected, f"{what} is {actual!r}, the reference's is {expected!r}"


def opinfo_snippet(op, dtype: torch.dtype, index: int, device: torch.device) -> str:  # noqa: ANN001
    return f"""
from torch.testing._internal.common_methods_invocations import op_db
op = next(o for o in op_db if (o.name, o.variant_test_name) == {(op.name, op.variant_test_name)})
torch.manual_seed(0)
sample = list(op.sample_inputs("cpu", {dtype}))[{index}]
print(sample)

def move(v, device="{device}"):
    if isinstance(v, torch.Tensor):
        return v.to(device)
    if isinstance(v, (list, tuple)):
        return type(v)(move(i, device) for i in v)
    if isinstance(v, dict):
        return {{k: move(i, device) for k, i in v.items()}}
    return device if str(v) == "cpu" else v

expected = op(sample.input, *sample.args, **sample.kwargs)
actual = op(move(sample.input), *move(sample.args), **move(sample.kwargs))
print(expected, move(actual, "cpu"))
"""


def check_sample(op, sample, dtype, index: int, backend, reference, device) -> None:  # noqa: ANN001
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
    expected = op(sample.input, *sample.args, **sample.kwargs)
    args = sample.args if op.name in HOST_ARGUMENTS else to_device(sample.args, device)
    moved = (to_device(sample.input, device), args, to_device(sample.kwargs, device))
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
    )


def test_opinfo(backend, reference, device, request, opinfo_case):
    """The OpInfo samples of one operator and dtype give the reference's results."""
    ops, problem = op_database()
    assert not problem, problem
    if run_known_failure_in_child(request):
        return
    op, dtype = opinfo_case
    _, limit = PROFILE_DEPTH[request.config.getoption("conformance_profile")]
    if request.node.get_closest_marker("xfail") is not None:
        limit = None  # a known failure is checked on every sample, whatever the profile
    torch.manual_seed(0)
    samples = itertools.islice(op.sample_inputs("cpu", dtype), limit)
    count = 0
    for index, sample in enumerate(samples):
        check_sample(op, sample, dtype, index, backend, reference, device)
        count += 1
    assert count, f"OpInfo has no sample input for {opinfo_name(op)} in {dtype}"


# ---- part 2: hypothesis-drawn inputs for a core set ----

FLOATS = (torch.float32, torch.bfloat16, torch.float16)
NUMERIC = FLOATS + (torch.int32, torch.int64)

# name: (kind, the operation as code on x, y and dim, the dtypes it applies to)
CORE_OPS = {
    "add": ("binary", "torch.add(x, y)", NUMERIC),
    "mul": ("binary", "torch.mul(x, y)", NUMERIC),
    "sub": ("binary", "torch.sub(x, y)", NUMERIC),
    "div": ("binary", "torch.div(x, y)", FLOATS),
    "where": ("binary", "torch.where(x > 0, x, y)", NUMERIC),
    "exp": ("unary", "torch.exp(x)", FLOATS),
    "log": ("unary", "torch.log(x)", FLOATS),
    "tanh": ("unary", "torch.tanh(x)", FLOATS),
    "sigmoid": ("unary", "torch.sigmoid(x)", FLOATS),
    "relu": ("unary", "torch.relu(x)", NUMERIC),
    "clamp": ("unary", "torch.clamp(x, -2, 3)", NUMERIC),
    "sum": ("reduction", "x.sum(dim)", NUMERIC),
    "mean": ("reduction", "x.mean(dim)", FLOATS),
    "amax": ("reduction", "x.amax(dim)", NUMERIC),
    "softmax": ("scan", "torch.softmax(x, dim)", FLOATS),
    "cumsum": ("scan", "torch.cumsum(x, dim)", NUMERIC),
    "sort": ("scan", "torch.sort(x, dim=dim, stable=True)", NUMERIC),
    "matmul": ("matmul", "torch.matmul(x, y)", FLOATS),
}


@st.composite
def core_inputs(
    draw: st.DrawFn, kind: str, dtypes: list[torch.dtype]
) -> tuple[dict[str, object], str]:
    """The inputs x (a non-contiguous view half of the time), y and dim for an operator of
    ``kind``, made on the CPU, and the code that rebuilds them in a snippet."""
    dtype = draw(st.sampled_from(dtypes), label="dtype")
    seed = draw(st.integers(0, 2**16), label="seed")
    if kind == "matmul":
        batch = draw(shapes(max_dims=1, max_side=3), label="batch")
        m, k, n = (draw(st.integers(0, 5), label=side) for side in "mkn")
        if draw(st.booleans(), label="transposed"):
            x = _make((*batch, k, m), dtype, seed).transpose(-1, -2)
            x_code = f"make({(*batch, k, m)}, {dtype}, {seed}).transpose(-1, -2)"
        else:
            x = _make((*batch, m, k), dtype, seed)
            x_code = f"make({(*batch, m, k)}, {dtype}, {seed})"
        y_shape = (*batch, k, n)
        values = {"x": x, "y": _make(y_shape, dtype, seed + 1), "dim": None}
        return values, f"x = {x_code}\ny = make({y_shape}, {dtype}, {seed + 1})"
    base_shape = draw(shapes(max_dims=3, max_side=6), label="base_shape")
    index = draw(st.one_of(st.none(), strided_views(base_shape)), label="view")
    x = _make(base_shape, dtype, seed)
    x_code = f"make({base_shape}, {dtype}, {seed})"
    if index is not None:
        x, x_code = x[index], f"{x_code}[{index}]"
    dim = None
    if kind in ("reduction", "scan"):
        dims = st.sampled_from(list(range(-max(x.dim(), 1), max(x.dim(), 1))))
        dim = draw(dims if kind == "scan" else st.one_of(st.none(), dims), label="dim")
    y_shape = tuple(x.shape)
    values = {"x": x, "y": _make(y_shape, dtype, seed + 1), "dim": dim}
    return values, f"x = {x_code}\ny = make({y_shape}, {dtype}, {seed + 1})\ndim = {dim}"


def _make(shape: tuple[int, ...], dtype: torch.dtype, seed: int) -> torch.Tensor:
    return TensorSpec(tuple(shape), dtype, seed).make()


@pytest.mark.parametrize("name", sorted(CORE_OPS))
def test_core_op_matches_reference_on_drawn_inputs(backend, device, name):
    """The operator on hypothesis-drawn shapes (0-dim and empty too), dtypes and non-contiguous
    views gives the reference's result; an input the reference refuses is refused too."""
    kind, code, applies_to = CORE_OPS[name]
    dtypes = [d for d in applies_to if backend.capabilities.supports(d)]
    assert dtypes, f"the backend declares none of {applies_to}"
    run = eval(f"lambda x, y, dim: {code}")  # noqa: S307 - our own table, also the snippet

    # @given inside the parametrized test: the plugin applies the profile to each collected
    # @given function once, and a parametrized one is collected once per parameter.
    @given(inputs=core_inputs(kind, dtypes))
    def check(inputs: tuple[dict[str, object], str]) -> None:
        values, inputs_code = inputs
        snippet = (
            MAKE_SNIPPET + inputs_code + f"\nexpected = {code}\n"
            f"x, y = x.to('{device}'), y.to('{device}')\nactual = {code}\n"
            "print(expected, [t.cpu() for t in actual] if isinstance(actual, tuple) else "
            "actual.cpu())"
        )
        try:
            expected = run(**values)
        except (RuntimeError, IndexError) as error:
            # An input the operator refuses (amax over an empty dim, say): refused here too.
            with pytest.raises(type(error)):
                run(**to_device(values, device))
            return
        actual = run(**to_device(values, device))
        assert_outputs_match(actual, expected, device, name, snippet)

    check()
