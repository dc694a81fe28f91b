"""PyTorch's OpInfo database as the operators area uses it: which (OpInfo, dtype) cases each
profile compares and which of their samples (``opinfo_cases``, ``gradient_cases``,
``chosen_samples``), how samples travel to the device (``to_device``, ``move_leaves``), the
tolerances upstream accepts between a device and the CPU (``upstream_tolerances``), and the
comparison of outputs and gradients with the reference's. The tests are in test_operators.py.
"""

from __future__ import annotations

import functools
import itertools
import random
import sys
import unittest
from collections.abc import Iterator

import pytest
import torch

from .assertions import TOLERANCES, assert_matches_reference, assert_on_device, reproducer

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


def opinfo_name(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def _skips_compare_cpu(op, dtype: torch.dtype) -> bool:
    """True if PyTorch's own cross-device check (TestCommon.test_compare_cpu) skips or expects
    a failure for this operator on every device: outputs that legitimately differ."""
    for info in itertools.chain(op.decorators, op.skips):
        if getattr(info, "test_name", None) != "test_compare_cpu":
            continue
        if info.device_type is None and (info.dtypes is None or dtype in info.dtypes):
            return True
    return False


def exclusion(op, dtype: torch.dtype) -> str:
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


def sample_limit(profile: str, op, dtype: torch.dtype) -> int | None:
    """How many of the OpInfo's samples the profile compares for (op, dtype)."""
    core = {torch.float32: QUICK_OPS, torch.bfloat16: QUICK_BFLOAT16_OPS}.get(dtype, ())
    return DEPTH_SAMPLES[profile] if op.name in core else OTHER_DTYPE_SAMPLES[profile]


def argument_signature(sample) -> tuple[str, str]:
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


def chosen_samples(samples, limit: int | None) -> list[tuple[int, object]]:
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


def case_id(op, dtype: torch.dtype) -> str:
    return f"{opinfo_name(op)}-{str(dtype).removeprefix('torch.')}"


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
    what: str,
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


def opinfo_snippet(op, dtype: torch.dtype, index: int, device: torch.device) -> str:
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


def move_leaves(op, sample, device: torch.device) -> tuple[object, object, object]:
    """The sample's input, args and kwargs on ``device`` (``to_device_leaves``); the args stay
    on the host for the ops that take host arguments."""
    args = sample.args if op.name in HOST_ARGUMENTS else to_device_leaves(sample.args, device)
    return (
        to_device_leaves(sample.input, device),
        args,
        to_device_leaves(sample.kwargs, device),
    )


def projected_gradients(op, sample, sample_input, args, kwargs, seed: int) -> tuple[object, list]:
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


def holds_undeclared(backend, reference, value: object) -> bool:
    """True if ``value`` holds a tensor or a dtype the reference declares and the backend
    does not."""
    if isinstance(value, torch.dtype):
        return reference.capabilities.supports(value) and not backend.capabilities.supports(value)
    if isinstance(value, torch.Tensor):
        return holds_undeclared(backend, reference, value.dtype)
    if isinstance(value, (list, tuple)):
        return any(holds_undeclared(backend, reference, item) for item in value)
    if isinstance(value, dict):
        return any(holds_undeclared(backend, reference, item) for item in value.values())
    return False
