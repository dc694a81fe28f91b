"""Automatic mixed precision: torch.autocast's op lists for each declared autocast dtype, and
loss scaling with torch.amp.GradScaler(<backend>).

Expectations follow PyTorch's Autocast Op Reference: ops on the lower-precision list run in the
autocast dtype, ops on the float32 list run in float32, and unlisted ops "run in the type defined
by their inputs". Accelerators (CUDA, XPU, MPS and PrivateUse1 backends that reuse CUDA's lists)
share one float32 list; the CPU's is shorter, so the CPU is held to its own documented list.
A backend that lowers fewer (or other) ops on purpose declares its lists in its manifest
(``autocast_lower_precision_ops``, ``autocast_float32_ops``); the tests follow them.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from .assertions import TOLERANCES, assert_dtype, assert_matches_reference, assert_on_device

AUTOCAST_CANDIDATES = (torch.bfloat16, torch.float16)

Op = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

# Ops every backend's autocast runs in the lower-precision dtype (float32 operands).
LOWER_PRECISION: dict[str, Op] = {
    "mm": lambda a, b: torch.mm(a, b),
    "matmul": lambda a, b: a @ b,
    "bmm": lambda a, b: torch.bmm(a[None], b[None]),
    "addmm": lambda a, b: torch.addmm(a, a, b),
    "baddbmm": lambda a, b: torch.baddbmm(a[None], a[None], b[None]),
    "linear": lambda a, b: F.linear(a, b, b[0]),
    "conv1d": lambda a, b: F.conv1d(a[None], b[:, :, None]),
    "conv2d": lambda a, b: F.conv2d(a[None, None], b[None, None, :3, :3]),
}

_TARGETS = torch.tensor([0, 1, 2, 3])

# Ops on an accelerator's float32 list (lower-precision operands), and whether the CPU's
# float32 list has them too. Unlisted ops run in their inputs' dtype.
FLOAT32: dict[str, tuple[Op, bool]] = {
    "softmax": (lambda a, b: torch.softmax(a, dim=0), False),
    "log_softmax": (lambda a, b: torch.log_softmax(a, dim=0), False),
    "layer_norm": (lambda a, b: F.layer_norm(a, (4,)), False),
    "group_norm": (lambda a, b: F.group_norm(a[None], 2), False),
    "exp": (lambda a, b: torch.exp(a), False),
    "log": (lambda a, b: torch.log(a.abs() + 1), False),
    "sum": (lambda a, b: torch.sum(a), False),
    "cumsum": (lambda a, b: torch.cumsum(a, dim=0), False),
    "pow": (lambda a, b: torch.pow(a, 2), False),
    "prod": (lambda a, b: torch.prod(a), True),
    "mse_loss": (lambda a, b: F.mse_loss(a, b), True),
    "l1_loss": (lambda a, b: F.l1_loss(a, b), True),
    "nll_loss": (lambda a, b: F.nll_loss(a, _TARGETS.to(a.device)), True),
    "cross_entropy": (lambda a, b: F.cross_entropy(a, _TARGETS.to(a.device)), True),
    "binary_cross_entropy_with_logits": (
        lambda a, b: F.binary_cross_entropy_with_logits(a, b.sigmoid()),
        True,
    ),
    "cdist": (lambda a, b: torch.cdist(a[None], b[None]), True),
}


def _operands(device: torch.device, dtype: torch.dtype = torch.float32) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return [torch.randn(4, 4, generator=generator).to(device, dtype) for _ in range(2)]


def lower_precision_ops(backend) -> frozenset[str]:
    """The ops the backend's autocast lowers: its manifest's list, by default CUDA's."""
    declared = backend.capabilities.autocast_lower_precision_ops
    return frozenset(LOWER_PRECISION) if declared is None else declared


def float32_ops(backend) -> frozenset[str]:
    """The ops the backend's autocast runs in float32: its manifest's list, by default CUDA's
    (the CPU's own documented list is shorter)."""
    declared = backend.capabilities.autocast_float32_ops
    if declared is not None:
        return declared
    return frozenset(name for name, (_, on_cpu) in FLOAT32.items() if on_cpu or not backend.is_cpu)


def test_declared_autocast_op_lists_name_ops_the_suite_knows(backend):
    for field, known in (
        ("autocast_lower_precision_ops", LOWER_PRECISION),
        ("autocast_float32_ops", FLOAT32),
    ):
        declared = getattr(backend.capabilities, field)
        unknown = sorted(set(declared or ()) - set(known))
        assert not unknown, (
            f"{backend.manifest.source}: {field} names {unknown}, which the suite does not "
            f"know; known: {sorted(known)}"
        )


def _require_autocast_dtype(backend, dtype: torch.dtype) -> None:
    if dtype not in backend.capabilities.autocast_dtypes:
        pytest.skip(f"not applicable: autocast_dtypes does not declare {dtype}")


@pytest.mark.parametrize("dtype", AUTOCAST_CANDIDATES, ids=str)
@pytest.mark.parametrize("name", sorted(LOWER_PRECISION))
def test_lower_precision_ops_run_in_the_autocast_dtype(backend, device, name, dtype):
    _require_autocast_dtype(backend, dtype)
    a, b = _operands(device)
    with torch.autocast(device.type, dtype=dtype):
        result = LOWER_PRECISION[name](a, b)
    # An op the manifest leaves off its list runs in its inputs' dtype (float32 here).
    expected = dtype if name in lower_precision_ops(backend) else torch.float32
    assert_on_device(result, device, what=name)
    assert_dtype(
        result,
        expected,
        what=f"{name} under torch.autocast({device.type!r}, {dtype}) "
        f"({'on' if expected == dtype else 'off'} the lower-precision list)",
    )


def _reference_lacks_kernel(reference, op: Op, dtype: torch.dtype) -> str | None:
    """Why the reference cannot run ``op`` on ``dtype`` operands (outside autocast), or None."""
    try:
        op(*_operands(reference.device(), dtype))
    except (RuntimeError, NotImplementedError) as error:
        return f"{type(error).__name__}: {str(error).splitlines()[0]}"
    return None


@pytest.mark.parametrize("dtype", AUTOCAST_CANDIDATES, ids=str)
@pytest.mark.parametrize("name", sorted(FLOAT32))
def test_precision_sensitive_ops_run_in_float32(backend, reference, device, name, dtype):
    _require_autocast_dtype(backend, dtype)
    op, _ = FLOAT32[name]
    if name not in float32_ops(backend):
        # Off the float32 list an op runs in its inputs' dtype: defined only where the reference
        # has a kernel for it (cdist has no half-precision kernel on the CPU or on CUDA).
        missing = _reference_lacks_kernel(reference, op, dtype)
        if missing is not None:
            pytest.skip(
                f"not applicable: {name} is off the declared autocast_float32_ops and the "
                f"reference ({reference.name}) has no {dtype} kernel for it ({missing})"
            )
    a, b = _operands(device, dtype)
    with torch.autocast(device.type, dtype=dtype):
        result = op(a, b)
    # An op off the backend's float32 list runs in its inputs' dtype.
    expected = torch.float32 if name in float32_ops(backend) else dtype
    assert_on_device(result, device, what=name)
    assert_dtype(
        result, expected, what=f"{name}({dtype} operands) under torch.autocast({device.type!r})"
    )


def _lowered_op(backend) -> str:
    """An op the backend declares its autocast lowers (linear if it does), or skip."""
    declared = sorted(lower_precision_ops(backend) & set(LOWER_PRECISION))
    if not declared:
        pytest.skip("not applicable: autocast_lower_precision_ops declares no op")
    return "linear" if "linear" in declared else declared[0]


@pytest.mark.parametrize("dtype", AUTOCAST_CANDIDATES, ids=str)
def test_autocast_results_match_the_reference(backend, reference, device, dtype):
    _require_autocast_dtype(backend, dtype)
    name = _lowered_op(backend)
    a, b = _operands(device)
    with torch.autocast(device.type, dtype=dtype):
        actual = LOWER_PRECISION[name](a, b)
    # The reference computes what the backend declares: the op on operands rounded to dtype.
    ref_a, ref_b = (t.to(reference.device(), dtype) for t in (a, b))
    expected = LOWER_PRECISION[name](ref_a, ref_b)
    assert_matches_reference(
        actual,
        expected,
        what=f"{name} under autocast({dtype})",
        # Two roundings to the autocast dtype (operands, result) may land one ulp apart.
        tolerance=tuple(2 * t for t in TOLERANCES[dtype]),
    )


@pytest.mark.parametrize("dtype", AUTOCAST_CANDIDATES, ids=str)
def test_autocast_gradients_keep_the_parameters_dtype(backend, device, dtype):
    _require_autocast_dtype(backend, dtype)
    layer = torch.nn.Linear(4, 3).to(device)
    x = _operands(device)[0]
    with torch.autocast(device.type, dtype=dtype):
        out = layer(x)
    # linear off the declared lower-precision list runs in its inputs' dtype, float32.
    lowered = "linear" in lower_precision_ops(backend)
    expected = dtype if lowered else torch.float32
    assert_dtype(
        out,
        expected,
        what=f"Linear output under autocast (linear {'on' if lowered else 'off'} the declared "
        "autocast_lower_precision_ops)",
    )
    out.float().sum().backward()
    assert_dtype(layer.weight.grad, torch.float32, what="weight.grad of a float32 Linear")
    assert_on_device(layer.weight.grad, device, what="weight.grad")


def test_default_autocast_dtype_is_declared(backend, device):
    default = torch.get_autocast_dtype(device.type)
    assert default in backend.capabilities.autocast_dtypes, (
        f"torch.get_autocast_dtype({device.type!r}) is {default}, which "
        f"{backend.manifest.source} does not list in autocast_dtypes"
    )
    with torch.autocast(device.type) as context:
        assert torch.is_autocast_enabled(device.type)
        assert context.fast_dtype == default
        assert_dtype(torch.mm(*_operands(device)), default, what="mm under default autocast")
    assert not torch.is_autocast_enabled(device.type)


def test_disabled_autocast_leaves_dtypes_alone(backend, device):
    a, b = _operands(device)
    with torch.autocast(device.type), torch.autocast(device.type, enabled=False):
        assert_dtype(a @ b, torch.float32, what="mm with autocast disabled")


@pytest.mark.parametrize("dtype", AUTOCAST_CANDIDATES, ids=str)
def test_undeclared_autocast_dtype_is_refused(backend, device, dtype):
    if dtype in backend.capabilities.autocast_dtypes:
        pytest.skip(f"not applicable: autocast_dtypes declares {dtype}")
    a, b = _operands(device)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with torch.autocast(device.type, dtype=dtype):
                result = a @ b
        except RuntimeError:
            return  # refused loudly
    assert caught, f"torch.autocast({device.type!r}, {dtype}) neither raised nor warned"
    assert_dtype(result, torch.float32, what=f"mm under a refused {dtype} autocast")


# ---- loss scaling: torch.amp.GradScaler(<backend>) ----


def _model_and_optimizer(device: torch.device) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2).to(device)
    return model, torch.optim.SGD(model.parameters(), lr=0.1)


def _loss(model: torch.nn.Module, device: torch.device) -> torch.Tensor:
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(8, 4, generator=generator).to(device)
    return model(x).square().mean()


def _scaled_backward(scaler, model, device) -> None:
    model.zero_grad()
    scaler.scale(_loss(model, device)).backward()


def test_grad_scaler_scales_the_loss(device):
    scaler = torch.amp.GradScaler(device.type, init_scale=2.0**10)
    loss = torch.tensor(3.0, device=device)
    scaled = scaler.scale(loss)
    assert_on_device(scaled, device, what="scaler.scale(loss)")
    assert scaled.item() == 3.0 * 2**10
    assert scaler.get_scale() == 2.0**10


def test_grad_scaler_unscale_restores_the_gradients(device):
    model, optimizer = _model_and_optimizer(device)
    _loss(model, device).backward()
    expected = [p.grad.clone() for p in model.parameters()]
    scaler = torch.amp.GradScaler(device.type, init_scale=2.0**12)
    _scaled_backward(scaler, model, device)
    scaler.unscale_(optimizer)
    for param, want in zip(model.parameters(), expected, strict=True):
        assert_on_device(param.grad, device, what="unscaled grad")
        assert_matches_reference(param.grad, want, what="grad after unscale_")


def test_grad_scaler_skips_steps_with_inf_or_nan_gradients(device):
    model, optimizer = _model_and_optimizer(device)
    scaler = torch.amp.GradScaler(device.type, init_scale=2.0**8, backoff_factor=0.5)
    for poison in (float("inf"), float("nan")):
        before = [p.detach().cpu().clone() for p in model.parameters()]
        scale_before = scaler.get_scale()
        _scaled_backward(scaler, model, device)
        model.weight.grad[0, 0] = poison
        scaler.step(optimizer)
        scaler.update()
        for param, old in zip(model.parameters(), before, strict=True):
            assert torch.equal(param.detach().cpu(), old), (
                f"optimizer.step() ran although a gradient was {poison}"
            )
        assert scaler.get_scale() == scale_before * 0.5, (
            f"after a {poison} step the scale is {scaler.get_scale()}, expected the backoff "
            f"{scale_before} * 0.5"
        )


def test_grad_scaler_grows_the_scale_after_growth_interval_clean_steps(device):
    model, optimizer = _model_and_optimizer(device)
    scaler = torch.amp.GradScaler(
        device.type, init_scale=2.0**8, growth_factor=2.0, growth_interval=3
    )
    before = [p.detach().cpu().clone() for p in model.parameters()]
    scales = []
    for _ in range(3):
        _scaled_backward(scaler, model, device)
        scaler.step(optimizer)
        scaler.update()
        scales.append(scaler.get_scale())
    assert scales == [2.0**8, 2.0**8, 2.0**9], f"scales after each clean step: {scales}"
    moved = any(
        not torch.equal(p.detach().cpu(), old)
        for p, old in zip(model.parameters(), before, strict=True)
    )
    assert moved, "clean steps did not update the parameters"
