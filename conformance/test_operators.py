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
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import random
import sys
import unittest
from collections.abc import Iterator

import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from .assertions import TOLERANCES, assert_matches_reference, assert_on_device, reproducer
from .isolation import run_known_failure_in_child
from .strategies import (
    MAKE_SNIPPET,
    apply_view,
    device_views,
    make,
    repeated_indices,
    shapes,
)

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
# Which (OpInfo, dtype) pairs a profile compares, and how many samples of each. quick: the core
# selection in float32 and bfloat16, and in every other declared dtype a stratified sample of
# it (each core operator in one of every 8 declared dtypes, rotating). default and thorough:
# every OpInfo in every declared dtype (the reference's kernel and the exclusions permitting).
# Coverage is what default buys; its time is kept in budget by the samples per case: the core
# selection in float32 and bfloat16 gets DEPTH_SAMPLES of them, every other case
# OTHER_DTYPE_SAMPLES, thorough all of them; chosen_samples picks which (distinct arguments
# first: an OpInfo's first samples are its plain cases, its options come after them).
QUICK_STRATA = 8
DEPTH_SAMPLES = {"quick": 8, "default": 24, "thorough": None}
OTHER_DTYPE_SAMPLES = {"quick": 4, "default": 2, "thorough": None}
# Gradients (OpInfo's backward samples), for the floating dtypes: quick compares these in
# float32 (elementwise, reductions, linear algebra, indexing and the nn functions whose
# backwards are kernels of their own); default and thorough every OpInfo that supports autograd
# in every declared floating dtype (default GRADIENT_SAMPLES of them, thorough all of them).
QUICK_GRADIENT_OPS = (
    "div", "pow", "tanh", "sigmoid", "prod", "amax", "cumsum", "logsumexp", "var", "matmul",
    "gather", "sort", "log_softmax", "nn.functional.gelu", "nn.functional.layer_norm",
    "nn.functional.conv2d", "nn.functional.max_pool2d", "nn.functional.cross_entropy",
)  # fmt: skip
GRADIENT_SAMPLES = {"quick": 2, "default": 3, "thorough": None}

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
    _cheaper_sample_inputs()
    return list(op_db), ""


def _cheaper_sample_inputs() -> None:
    """Make OpInfo.sample_inputs cheap to call, with the same samples. Measured with cProfile
    on the default profile, two helpers of torch.testing._internal took most of an OpInfo
    case's time:

    * ``extract_test_fn``, called twice per sample_inputs call to find the running unittest
      test, walks ``inspect.stack()``, which reads every frame's source line and searches
      sys.modules for each frame's module (about 0.3 s a call under pytest). The version here
      walks the same frames for the same answer without reading source (no unittest test is
      ever running here, so samples keep their default seeding).
    * ``set_rng_seed``, called before each sample, calls ``torch.manual_seed``, which on a
      build without CUDA queues a lazy seeding call for CUDA, XPU and MTIA, each recording
      ``traceback.format_stack()`` (about 8 ms a call). Samples are made on the CPU: seeding
      the CPU generator (with Python's and NumPy's, as before) makes the same samples.
    """
    from torch.testing._internal import common_utils
    from torch.testing._internal.opinfo import core

    def extract_test_fn() -> object:
        frame = sys._getframe(1)
        while frame is not None:
            candidate = frame.f_locals.get("self")
            if isinstance(candidate, unittest.TestCase):
                *_, class_name, test_name = candidate.id().rsplit(".", 2)
                if class_name == type(candidate).__name__ and test_name.startswith("test"):
                    return getattr(candidate, test_name).__func__
            frame = frame.f_back
        return None

    def set_rng_seed(seed: int | None = None) -> None:
        seed = common_utils.SEED if seed is None else seed
        seed_host(seed)

    common_utils.extract_test_fn = extract_test_fn
    core.extract_test_fn = extract_test_fn
    common_utils.set_rng_seed = set_rng_seed


def seed_host(seed: int) -> None:
    """Seed the CPU generator, Python's and NumPy's (what OpInfo samples made on the CPU draw
    from): ``torch.manual_seed``'s effect on them, without its cost (see above)."""
    torch.random.default_generator.manual_seed(seed)
    random.seed(seed)
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(seed)


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


def opinfo_cases(
    profile: str, known: set[str], declared: frozenset[torch.dtype] = frozenset()
) -> list[tuple[object, torch.dtype]]:
    """The (OpInfo, dtype) pairs the profile compares, plus those ``known`` names by test id.

    quick: the core selection in float32 and bfloat16, a stratified sample of it in the other
    ``declared`` dtypes; default and thorough: every OpInfo in float32, bfloat16 and every
    ``declared`` dtype that the reference has a kernel for and no exclusion applies to."""
    ops, _ = op_database()
    everything = profile != "quick"
    cases = []
    for dtype, core in ((torch.float32, QUICK_OPS), (torch.bfloat16, QUICK_BFLOAT16_OPS)):
        for op in ops:
            if exclusion(op, dtype):
                continue
            if everything or op.name in core or case_id(op, dtype) in known:
                cases.append((op, dtype))
    selected = {case_id(op, d) for op, d in cases}
    for stratum, dtype in enumerate(other_dtypes(declared)):
        for op in ops:
            if exclusion(op, dtype):
                chosen = False
            elif everything:
                chosen = True
            else:
                # quick rotates over the core selection's names (all variants of a name together)
                index = QUICK_OPS.index(op.name) if op.name in QUICK_OPS else -stratum - 1
                chosen = (index + stratum) % QUICK_STRATA == 0
            if chosen or case_id(op, dtype) in known - selected:
                cases.append((op, dtype))
    return cases


# The dtypes beyond float32 and bfloat16 that OpInfo cases are drawn in, where declared, in
# this order (quick's rotation follows it); any other declared dtype comes after them.
OTHER_DTYPES = (
    torch.float16, torch.float64, torch.int64, torch.int32, torch.int16, torch.int8,
    torch.uint8, torch.bool, torch.complex64, torch.complex128,
)  # fmt: skip


def other_dtypes(declared: frozenset[torch.dtype]) -> list[torch.dtype]:
    """The ``declared`` dtypes but float32 and bfloat16: OTHER_DTYPES' order, then the rest
    (float8 formats, say) by name."""
    listed = [d for d in OTHER_DTYPES if d in declared]
    rest = declared - set(OTHER_DTYPES) - {torch.float32, torch.bfloat16}
    return listed + sorted(rest, key=str)


def sample_limit(profile: str, op, dtype: torch.dtype) -> int | None:  # noqa: ANN001
    """How many of the OpInfo's samples the profile compares for (op, dtype)."""
    core = {torch.float32: QUICK_OPS, torch.bfloat16: QUICK_BFLOAT16_OPS}.get(dtype, ())
    return DEPTH_SAMPLES[profile] if op.name in core else OTHER_DTYPE_SAMPLES[profile]


def argument_signature(sample) -> tuple[str, str]:  # noqa: ANN001 - an OpInfo SampleInput
    """What a sample asks of the operator besides its values: (its arguments with every tensor
    written as "T", the same with each tensor's rank and layout). Two samples that differ in
    the first call a kernel with different options (a reduction, a weight, a dim, largest=);
    in the second only, with tensors of other ranks or strides."""

    def leaf(value: object, ranks: bool) -> str:
        if isinstance(value, torch.Tensor):
            return f"T{value.dim()}{'c' if value.is_contiguous() else 's'}" if ranks else "T"
        if isinstance(value, (list, tuple)):
            return "(" + ",".join(leaf(item, ranks) for item in value) + ")"
        if isinstance(value, dict):
            return "{" + ",".join(f"{k}:{leaf(v, ranks)}" for k, v in sorted(value.items())) + "}"
        return repr(value)

    return (
        leaf([sample.args, sample.kwargs], False),
        leaf([sample.input, sample.args, sample.kwargs], True),
    )


def chosen_samples(samples, limit: int | None) -> list[tuple[int, object]]:  # noqa: ANN001
    """Which of an OpInfo's samples a case compares, with their indices: all of them without a
    ``limit``; else the first sample of each distinct set of arguments (at most 2 * ``limit``:
    the options an OpInfo lists after its plain cases, such as cross_entropy's reduction= and
    weight=, are reached), then of each distinct rank and layout, then the rest in order, up to
    ``limit`` samples or the argument sets, whichever is more."""
    if limit is None:
        return list(enumerate(samples))
    listed = list(enumerate(samples))
    signatures = [argument_signature(sample) for _, sample in listed]
    chosen: list[int] = []
    for level in (0, 1):
        seen = {signatures[index][level] for index in chosen}
        for index, signature in enumerate(signatures):
            cap = 2 * limit if level == 0 else limit
            if len(chosen) >= cap:
                break
            if signature[level] not in seen:
                seen.add(signature[level])
                chosen.append(index)
    chosen += [index for index, _ in listed if index not in chosen][: max(0, limit - len(chosen))]
    return [listed[index] for index in sorted(chosen)]


def gradient_cases(
    profile: str, known: set[str], declared: frozenset[torch.dtype] = frozenset()
) -> list[tuple[object, torch.dtype]]:
    """The (OpInfo, floating dtype) pairs whose backward the profile compares."""
    ops, _ = op_database()
    cases = []
    for dtype in (torch.float32, torch.bfloat16, torch.float16, torch.float64):
        if dtype not in declared and dtype != torch.float32:
            continue
        for op in ops:
            if not op.supports_autograd or exclusion(op, dtype):
                continue
            if dtype not in op.supported_backward_dtypes("cpu"):
                continue
            core = dtype == torch.float32 and op.name in QUICK_GRADIENT_OPS
            if core or profile != "quick" or case_id(op, dtype) in known:
                cases.append((op, dtype))
    return cases


def case_id(op, dtype: torch.dtype) -> str:  # noqa: ANN001
    return f"{opinfo_name(op)}-{str(dtype).removeprefix('torch.')}"


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


def to_device(value: object, device: torch.device) -> object:
    """``value`` with every tensor in it (in lists, tuples and dicts too) moved to ``device``,
    and every mention of the CPU device (samples made on the CPU name it, as in
    ``x.to("cpu", torch.float64)``) made ``device``. Always a copy, also on the device the
    value is on (the CPU backend): an op that writes to its inputs must not reach the
    reference's."""
    if isinstance(value, torch.Tensor):
        return value.to(device, copy=True)
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
    actual: object,
    expected: object,
    device: torch.device,
    what: str,
    snippet: str,
    tolerances: dict[torch.dtype, tuple[float, float]] | None = None,
) -> None:
    """Every tensor in ``actual`` is on the device and matches ``expected``'s (within
    ``tolerances`` of its dtype where given, else the suite's); other leaves (Python numbers,
    sizes) are equal."""
    if isinstance(expected, torch.Tensor):
        assert isinstance(actual, torch.Tensor), f"{what} is a {type(actual).__name__}"
        assert_on_device(actual, device, what=what)
        tolerance = (tolerances or {}).get(expected.dtype)
        assert_matches_reference(actual, expected, what=what, snippet=snippet, tolerance=tolerance)
    elif isinstance(expected, (list, tuple)):
        assert isinstance(actual, (list, tuple)) and len(actual) == len(expected), (
            f"{what} is {actual!r}, the reference's is {expected!r}" + reproducer(snippet)
        )
        for index, (item, reference_item) in enumerate(zip(actual, expected, strict=True)):
            assert_outputs_match(
                item, reference_item, device, f"{what}[{index}]", snippet, tolerances
            )
    elif isinstance(expected, float):
        assert actual == pytest.approx(expected, rel=1e-5, nan_ok=True), (
            f"{what} is {actual!r}, the reference's is {expected!r}" + reproducer(snippet)
        )
    else:
        assert actual == expected, f"{what} is {actual!r}, the reference's is {expected!r}"


# PyTorch's own tests that compare a device's results with the CPU's: an OpInfo's tolerance
# override for one of them is what upstream accepts between that device's kernels and the CPU's.
CPU_COMPARISONS = {
    "outputs": (("TestCommon", "test_compare_cpu"), ("TestConsistency", "test_output_match")),
    "gradients": (("TestConsistency", "test_output_grad_match"),),
}


def upstream_tolerances(
    op,
    dtype: torch.dtype,
    device_type: str,
    what: str,  # noqa: ANN001
) -> dict[torch.dtype, tuple[float, float]]:
    """``{dtype: (rtol, atol)}`` widened to the tolerance overrides the OpInfo declares for
    upstream's CPU comparisons (``CPU_COMPARISONS[what]``) on ``device_type`` or on every
    device; empty when it declares none. (MPS's consistency tests, for one, accept
    embedding_bag's float16 gradients within rtol 0.047, atol 0.006.)"""
    from torch.testing._internal.common_device_type import precisionOverride, toleranceOverride
    from torch.testing._internal.opinfo.core import DecorateInfo

    rtol, atol = TOLERANCES.get(dtype, (0.0, 0.0))
    widened = False
    for info in op.decorators:
        if not isinstance(info, DecorateInfo):
            continue
        for cls_name, test_name in CPU_COMPARISONS[what]:
            try:
                active = info.is_active(cls_name, test_name, device_type, dtype, {})
            except Exception:  # an active_if that needs the test's parameters: not ours
                active = False
            if not active:
                continue
            for decorator in info.decorators:
                if isinstance(decorator, toleranceOverride) and dtype in decorator.d:
                    rtol = max(rtol, decorator.d[dtype].rtol)
                    atol = max(atol, decorator.d[dtype].atol)
                    widened = True
                elif isinstance(decorator, precisionOverride) and dtype in decorator.d:
                    atol = max(atol, decorator.d[dtype])
                    widened = True
    return {dtype: (rtol, atol)} if widened else {}


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


def check_sample(op, sample, dtype, index: int, backend, reference, device, tolerances) -> None:  # noqa: ANN001
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


def to_device_leaves(value: object, device: torch.device) -> object:
    """``value`` moved to ``device`` like ``to_device``, each tensor that requires grad made
    a leaf there (its gradient is then the device's own)."""
    if isinstance(value, torch.Tensor):
        moved = value.detach().to(device, copy=True)
        return moved.requires_grad_() if value.requires_grad else moved
    if isinstance(value, (list, tuple)):
        return type(value)(to_device_leaves(item, device) for item in value)
    if isinstance(value, dict):
        return {key: to_device_leaves(item, device) for key, item in value.items()}
    return to_device(value, device)


def _move_leaves(op, sample, device: torch.device) -> tuple[object, object, object]:  # noqa: ANN001
    """The sample's input, args and kwargs on ``device`` (``to_device_leaves``); the args stay
    on the host for the ops that take host arguments."""
    args = sample.args if op.name in HOST_ARGUMENTS else to_device_leaves(sample.args, device)
    return (
        to_device_leaves(sample.input, device),
        args,
        to_device_leaves(sample.kwargs, device),
    )


def _gradients(op, sample, sample_input, args, kwargs, seed: int) -> tuple[object, list]:  # noqa: ANN001
    """The gradients of a seeded random projection of the op's floating outputs with
    respect to every input that requires grad (None where an input gets none).

    The outputs go through the sample's ``output_process_fn_grad`` first, as in PyTorch's own
    gradient tests: it makes the projection well defined where an output is not (linalg.eig's
    eigenvectors are defined up to a phase, so a loss of them raises in the backward)."""
    inputs = [t for t in tensors_in([sample_input, args, kwargs]) if t.requires_grad]
    output = op(sample_input, *args, **kwargs)
    outputs = [
        t
        for t in tensors_in(sample.output_process_fn_grad(output))
        if t.requires_grad and (t.is_floating_point() or t.is_complex())
    ]
    if not inputs or not outputs:
        return output, []
    generator = torch.Generator().manual_seed(seed)
    cotangents = [
        torch.randn(t.shape, generator=generator, dtype=torch.float32).to(t.dtype).to(t.device)
        for t in outputs
    ]
    grads = torch.autograd.grad(outputs, inputs, cotangents, allow_unused=True)
    return output, list(grads)


def _undeclared(backend, reference, value: object) -> bool:  # noqa: ANN001
    """True if ``value`` holds a tensor or a dtype the reference declares and the backend
    does not."""
    if isinstance(value, torch.dtype):
        return reference.capabilities.supports(value) and not backend.capabilities.supports(value)
    if isinstance(value, torch.Tensor):
        return _undeclared(backend, reference, value.dtype)
    if isinstance(value, (list, tuple)):
        return any(_undeclared(backend, reference, item) for item in value)
    if isinstance(value, dict):
        return any(_undeclared(backend, reference, item) for item in value.values())
    return False


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
        movable = not _undeclared(backend, reference, [sample.input, sample.args, sample.kwargs])
        moved = _move_leaves(op, sample, device) if movable else None
        output, expected = _gradients(op, sample, sample.input, sample.args, sample.kwargs, index)
        if moved is None or _undeclared(backend, reference, [output, sample.args, sample.kwargs]):
            # a sample that asks for float64 (softmax's dtype=, or a float64 tensor argument as
            # `to`'s): refused, as test_opinfo checks, when the argument moves or the op runs
            with pytest.raises(TypeError):
                _gradients(op, sample, *(moved or _move_leaves(op, sample, device)), index)
            continue
        _, actual = _gradients(op, sample, *moved, index)
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
        run = eval(f"lambda x, y, dim, k: {code}")  # noqa: S307 - our own table
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
    @given(inputs=core_inputs(kind, dtypes, values))
    @example(inputs=fixed_core_inputs(kind, dtypes[0], values))
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
    run = eval(f"lambda x, index, src, weights: {code}")  # noqa: S307 - our own table

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
        values = {name: eval(recipe) for name, recipe in recipes.items()}  # noqa: S307
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

    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        dtype = data.draw(st.sampled_from(dtypes), label="dtype")
        seed = data.draw(st.integers(0, 2**16), label="seed")
        low = data.draw(BOUNDS, label="min")
        high = data.draw(BOUNDS, label="max")
        if low is not None and high is not None and data.draw(st.booleans(), label="min>max"):
            low, high = max(low, high) + 1, min(low, high)
        if overload == "tensor":
            low, high = (None if b is None else torch.tensor(b).to(dtype) for b in (low, high))
            code = "torch.clamp(x, low.to(x.device) if low is not None else None, "
            code += "high.to(x.device) if high is not None else None)"
        else:
            code = "x.clamp_(low, high)" if overload == "in-place" else "torch.clamp(x, low, high)"
        run = eval(f"lambda x, low, high: {code}")  # noqa: S307 - our own code
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
    run = eval(f"lambda x, mask: {code}")  # noqa: S307 - our own table

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
