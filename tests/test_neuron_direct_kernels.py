"""Direct kernels (NeuronDirectKernels.cpp): the hot operators registered unboxed for neuron.

They skip the boxed fallback but must keep every guarantee it gives: the path is checked through
the per-thread call counters the extension exposes (the direct kernels' and the fallback's), and
each behaviour is compared against the CPU, error messages included. Where a behaviour could
differ between the two paths (device checks, aliasing, in-place, promotion, reused host views),
the test runs on the direct path: it fails if the direct kernels are gone (the path test) or wrong.
"""

from __future__ import annotations

import copy
import json
import re
import threading
from collections.abc import Callable

import pytest
import torch
import torch.nn.functional as F

from device_agnostic.neuron import _C

D = "neuron"


class Calls:
    """The direct kernels' and the boxed fallback's calls on this thread during the block."""

    def __enter__(self) -> Calls:
        self._direct, self._boxed = _C._direct_kernel_calls(), _C._boxed_fallback_calls()
        return self

    def __exit__(self, *exc: object) -> None:
        self.direct = _C._direct_kernel_calls() - self._direct
        self.boxed = _C._boxed_fallback_calls() - self._boxed


def _inputs(dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return {
        "a": torch.randn(4, 5, generator=g).to(dtype),
        "b": torch.randn(4, 5, generator=g).to(dtype),
        "m": torch.randn(5, 3, generator=g).to(dtype),
        "bias": torch.randn(3, generator=g).to(dtype),
        "batch": torch.randn(2, 4, 5, generator=g).to(dtype),
        "target": torch.tensor([0, 2, 1, 4]),
        "image": torch.randn(1, 2, 5, 5, generator=g).to(dtype),
        "kernel": torch.randn(3, 2, 3, 3, generator=g).to(dtype),
    }


# Each calls exactly one direct kernel on neuron inputs (the lambdas get the dict of _inputs).
DIRECT_OPS: dict[str, Callable[[dict], torch.Tensor]] = {
    "add": lambda t: t["a"] + t["b"],
    "add_alpha": lambda t: torch.add(t["a"], t["b"], alpha=3),
    "add_": lambda t: t["a"].clone().add_(t["b"], alpha=-0.5),
    "sub": lambda t: t["a"] - t["b"],
    "sub_": lambda t: t["a"].clone().sub_(t["b"]),
    "mul": lambda t: t["a"] * t["b"],
    "mul_": lambda t: t["a"].clone().mul_(t["b"]),
    "div": lambda t: t["a"] / t["b"],
    "div_": lambda t: t["a"].clone().div_(t["b"]),
    "sum_dim": lambda t: t["a"].sum(dim=0),
    "sum_all": lambda t: t["a"].sum(),
    "mm": lambda t: t["a"] @ t["m"],
    "addmm": lambda t: torch.addmm(t["bias"], t["a"], t["m"], beta=0.5, alpha=2),
    "bmm": lambda t: torch.bmm(t["batch"], t["batch"].transpose(1, 2)),
    "softmax": lambda t: torch.softmax(t["a"], dim=-1),
    "log_softmax": lambda t: torch.log_softmax(t["a"], dim=0),
    "relu": lambda t: torch.relu(t["a"]),
    "relu_": lambda t: t["a"].clone().relu_(),
    "threshold_backward": lambda t: torch.ops.aten.threshold_backward(t["b"], t["a"], 0.0),
    "softmax_backward": lambda t: torch.ops.aten._softmax_backward_data(
        t["b"], torch.softmax(t["a"], -1), -1, t["a"].dtype
    ),
    "log_softmax_backward": lambda t: torch.ops.aten._log_softmax_backward_data(
        t["b"], torch.log_softmax(t["a"], -1), -1, t["a"].dtype
    ),
    "nll_loss": lambda t: F.nll_loss(torch.log_softmax(t["a"], -1), t["target"]),
    "nll_loss_backward": lambda t: torch.ops.aten.nll_loss_backward(
        torch.tensor(1.0).to(t["a"].device),
        t["a"],
        t["target"],
        None,
        1,
        -100,
        torch.tensor(4.0).to(t["a"].device),
    ),
    "fill_": lambda t: t["a"].clone().fill_(2.5),
    "zero_": lambda t: t["a"].clone().zero_(),
    "conv2d": lambda t: F.conv2d(t["image"], t["kernel"], t["bias"], padding=1),
}


def _on(device: str, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    return {k: v.to(device) for k, v in tensors.items()}


@pytest.mark.parametrize("name", DIRECT_OPS)
def test_each_hot_operator_takes_the_direct_path_and_matches_the_cpu(name):
    cpu = _inputs()
    neuron = _on(D, cpu)
    with Calls() as calls:
        result = DIRECT_OPS[name](neuron)
    # Without the direct kernels every one of these calls is the fallback's.
    assert calls.direct >= 1 and calls.boxed == 0, (calls.direct, calls.boxed)
    expected = DIRECT_OPS[name](cpu)
    assert result.device.type == "neuron"
    assert result.dtype == expected.dtype and result.shape == expected.shape
    assert result.stride() == expected.stride()
    torch.testing.assert_close(result.cpu(), expected)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.int32, torch.complex64])
@pytest.mark.parametrize("name", ["add", "mul", "sub", "sum_dim", "mm", "add_", "relu"])
def test_direct_kernels_across_dtypes(name, dtype):
    cpu = _inputs(dtype)
    try:
        expected = DIRECT_OPS[name](cpu)
    except RuntimeError as error:  # e.g. a float alpha with integers: neuron must say the same
        with pytest.raises(RuntimeError, match=re.escape(str(error).split("\n")[0])):
            DIRECT_OPS[name](_on(D, cpu))
        return
    with Calls() as calls:
        result = DIRECT_OPS[name](_on(D, cpu))
    assert calls.boxed == 0
    assert result.dtype == expected.dtype
    torch.testing.assert_close(result.cpu(), expected)


def test_a_training_step_of_an_mlp_runs_without_the_fallback_and_matches_the_cpu():
    torch.manual_seed(0)
    model_cpu = torch.nn.Sequential(
        torch.nn.Linear(16, 8),
        torch.nn.ReLU(),
        torch.nn.Linear(8, 8),
        torch.nn.ReLU(),
        torch.nn.Linear(8, 3),
    )
    model = copy.deepcopy(model_cpu).to(D)
    x_cpu = torch.randn(6, 16)
    y_cpu = torch.tensor([0, 1, 2, 2, 1, 0])
    x, y = x_cpu.to(D), y_cpu.to(D)
    opt_cpu = torch.optim.SGD(model_cpu.parameters(), lr=0.1, foreach=False)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, foreach=False)
    losses = []
    for step in range(3):
        for m, o, xx, yy in ((model_cpu, opt_cpu, x_cpu, y_cpu), (model, opt, x, y)):
            o.zero_grad(set_to_none=True)
            if m is model:
                with Calls() as calls:
                    loss = F.cross_entropy(m(xx), yy)
                    loss.backward()
                    o.step()
                assert calls.boxed == 0, f"step {step}: {calls.boxed} calls took the fallback"
                assert calls.direct >= 20
            else:
                loss = F.cross_entropy(m(xx), yy)
                loss.backward()
                o.step()
            losses.append(loss.item())
    torch.testing.assert_close(losses[1::2], losses[0::2])
    for p_cpu, p in zip(model_cpu.parameters(), model.parameters(), strict=True):
        assert p.device.type == "neuron" and p.grad.device.type == "neuron"
        torch.testing.assert_close(p.detach().cpu(), p_cpu.detach())


# ---- device checks ------------------------------------------------------------------------------

SAME_DEVICE = "Expected all tensors to be on the same device"


@pytest.mark.parametrize(
    "call",
    [
        lambda n, c: n + c,
        lambda n, c: c * n,
        lambda n, c: n.clone().add_(c),
        lambda n, c: c.clone().add_(n),  # a CPU self written in place
        lambda n, c: n @ c.T,
        lambda n, c: torch.addmm(n[0], n, c.T),
        lambda n, c: F.conv2d(n.view(1, 1, 4, 5), c.view(1, 1, 4, 5)[..., :3, :3]),
        lambda n, c: torch.ops.aten.threshold_backward(n, c, 0.0),
    ],
)
def test_a_cpu_tensor_with_dimensions_is_refused_as_on_cuda(call):
    n, c = torch.randn(4, 5, device=D), torch.randn(4, 5)
    with Calls() as calls, pytest.raises(RuntimeError, match=SAME_DEVICE):
        call(n, c)
    assert calls.boxed == 0


def test_cpu_scalars_are_accepted_as_inputs_only():
    a_cpu = torch.randn(3, 4)
    a = a_cpu.to(D)
    scalar = torch.tensor(2.5)
    with Calls() as calls:
        torch.testing.assert_close((a * scalar).cpu(), a_cpu * scalar)
        torch.testing.assert_close((scalar + a).cpu(), scalar + a_cpu)
        torch.testing.assert_close(torch.add(a, scalar, alpha=2).cpu(), a_cpu + 2 * scalar)
    assert calls.direct == 3 and calls.boxed == 0
    # Written: a 0-dim CPU self of an in-place op, which would receive device memory.
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.tensor(1.0).add_(torch.tensor(1.0, device=D))
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.tensor(1.0).mul_(a.sum())


def test_tensors_on_two_neuron_devices_are_refused():
    if torch.accelerator.device_count() < 2:
        pytest.skip("needs two neuron devices")
    a, b = torch.ones(3, device="neuron:0"), torch.ones(3, device="neuron:1")
    with pytest.raises(RuntimeError, match=f"{SAME_DEVICE}.*neuron:0 and neuron:1"):
        a + b
    # Results land on their inputs' device, not the current one.
    c = torch.ones(3, device="neuron:1") * 2
    assert c.device == torch.device("neuron:1")


def test_out_arguments_keep_the_fallbacks_rules():
    a = torch.randn(3, device=D)
    with pytest.raises(RuntimeError, match=SAME_DEVICE):
        torch.add(a, a, out=torch.empty(3))
    out = torch.empty(0, device=D)
    torch.add(a, a, out=out)  # out= is not a direct kernel: the fallback resizes it
    torch.testing.assert_close(out.cpu(), 2 * a.cpu())


# ---- CPU semantics ------------------------------------------------------------------------------


def _same_error(fn: Callable[[str], object]) -> None:
    """``fn(device)`` raises on the CPU; it must raise the same type and message on neuron."""
    with pytest.raises(Exception) as on_cpu:
        fn("cpu")
    with pytest.raises(type(on_cpu.value)) as on_neuron:
        fn(D)
    assert str(on_neuron.value).split("\n")[0] == str(on_cpu.value).split("\n")[0]


@pytest.mark.parametrize(
    "fn",
    [
        # Promotion an in-place op cannot write back.
        lambda d: torch.ones(3, dtype=torch.int32, device=d).add_(torch.ones(3, device=d)),
        lambda d: torch.ones(3, dtype=torch.int32, device=d).mul_(2.5),
        # Bool subtraction.
        lambda d: (
            torch.ones(3, dtype=torch.bool, device=d) - torch.ones(3, dtype=torch.bool, device=d)
        ),
        # Shapes.
        lambda d: torch.ones(3, device=d) + torch.ones(4, device=d),
        lambda d: torch.ones(3, device=d).add_(torch.ones(2, 3, device=d)),
        lambda d: torch.ones(2, 3, device=d) @ torch.ones(2, 3, device=d),
        lambda d: torch.ones(2, 3, dtype=torch.float16, device=d) @ torch.ones(3, 3, device=d),
        # Partial self-overlap written in place.
        lambda d: (lambda x: x[1:].add_(x[:-1]))(torch.ones(5, device=d)),
        lambda d: torch.ones(1, 3, device=d).expand(4, 3).add_(1.0),
        lambda d: torch.softmax(torch.ones(3, device=d), dim=2),
        lambda d: F.nll_loss(torch.randn(4, 3, device=d), torch.tensor([0, 1, 2, 3], device=d)),
    ],
)
def test_errors_are_the_cpus(fn):
    _same_error(fn)


@pytest.mark.parametrize(
    "fn",
    [
        lambda d: torch.arange(6, device=d).reshape(2, 3) + torch.ones(3, device=d),  # int + float
        lambda d: torch.arange(6, device=d) * 2.5,  # a Python float
        lambda d: torch.ones(3, dtype=torch.float16, device=d) + torch.ones(3, device=d),
        lambda d: torch.ones(3, dtype=torch.bfloat16, device=d) * torch.tensor(3.0),  # CPU scalar
        lambda d: torch.arange(6, device=d) / torch.arange(1, 7, device=d),  # true division
        lambda d: torch.ones(3, 1, device=d) - torch.arange(4.0, device=d),  # broadcasting
        lambda d: torch.ones(4, 3, device=d).t() @ torch.ones(4, 2, device=d),  # strided input
        lambda d: torch.arange(12.0, device=d).reshape(3, 4)[:, ::2].sum(0),
        lambda d: torch.ones(3, dtype=torch.int32, device=d).sum(),  # sum promotes to int64
        lambda d: torch.ones(3, dtype=torch.float16, device=d).sum(dtype=torch.float32),
        lambda d: torch.softmax(torch.ones(2, 3, dtype=torch.bfloat16, device=d), 1),
        lambda d: torch.zeros(2, 3, dtype=torch.bool, device=d) + 1,
        lambda d: torch.ones(2, 2, dtype=torch.complex64, device=d).conj() * 1j,  # conj bit
        lambda d: torch.ones(2, 2, dtype=torch.complex64, device=d)._neg_view() + 1,  # neg bit
    ],
)
def test_promotion_broadcasting_and_layout_are_the_cpus(fn):
    expected = fn("cpu")
    with Calls() as calls:
        result = fn(D)
    assert calls.boxed == 0 or calls.direct > 0
    assert result.dtype == expected.dtype and result.shape == expected.shape
    torch.testing.assert_close(result.cpu(), expected)


def test_in_place_results_are_the_argument_and_views_alias():
    base_cpu = torch.arange(12.0).reshape(3, 4)
    base = base_cpu.to(D)
    column = base[:, 1]  # a strided view
    with Calls() as calls:
        returned = column.add_(100)
        base.mul_(base)  # the same tensor twice, written: Full overlap is allowed
        doubled = base[0].add_(base[0])
    assert calls.direct == 3 and calls.boxed == 0
    assert returned is column and doubled.data_ptr() == base.data_ptr()
    base_cpu[:, 1].add_(100)
    base_cpu.mul_(base_cpu)
    base_cpu[0].add_(base_cpu[0])
    torch.testing.assert_close(base.cpu(), base_cpu)
    assert column.data_ptr() == base.data_ptr() + 4 and column._version == base._version


def test_autograd_through_the_direct_kernels():
    a_cpu = torch.randn(4, 5, requires_grad=True)
    m_cpu = torch.randn(5, 3, requires_grad=True)
    a = a_cpu.detach().to(D).requires_grad_()
    m = m_cpu.detach().to(D).requires_grad_()

    def f(a: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return torch.log_softmax(torch.relu(a * 2 - 1) @ m + m.sum(0), -1).sum()

    f(a_cpu, m_cpu).backward()
    with Calls() as calls:
        f(a, m).backward()
    assert calls.boxed == 0 and calls.direct >= 10
    torch.testing.assert_close(a.grad.cpu(), a_cpu.grad)
    torch.testing.assert_close(m.grad.cpu(), m_cpu.grad)
    x = torch.ones(3, device=D, requires_grad=True)
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
        x.add_(1)


def test_autocast_still_casts_before_the_direct_kernels():
    a_cpu, b_cpu = torch.randn(4, 5), torch.randn(5, 3)
    a, b = a_cpu.to(D), b_cpu.to(D)
    with torch.autocast(D), Calls() as calls:
        result = a @ b
        summed = torch.addmm(torch.zeros(3, device=D), a, b)
        soft = torch.softmax(result, -1)  # softmax autocasts to float32
    assert calls.boxed == 0 and calls.direct >= 3
    assert result.dtype == torch.bfloat16 and summed.dtype == torch.bfloat16
    assert soft.dtype == torch.float32
    torch.testing.assert_close(result.cpu(), a_cpu.bfloat16() @ b_cpu.bfloat16())


def test_inference_mode_results():
    a = torch.randn(3, device=D)
    with torch.inference_mode():
        r = a + a
        s = a * 2
    assert r.is_inference() and s.is_inference() and r.device.type == "neuron"
    torch.testing.assert_close(r.cpu(), 2 * a.cpu())
    # Views made in inference mode are not reused outside it (their dispatch keys differ).
    t = a.clone().requires_grad_()
    (t * t).sum().backward()
    torch.testing.assert_close(t.grad.cpu(), 2 * a.cpu())


def test_reused_host_views_carry_each_calls_geometry_dtype_and_bits():
    # Each call refills host views of earlier calls: sizes, strides, offset, dtype and the
    # conj/neg bits must all be this call's, whatever came before.
    torch.manual_seed(0)
    cases = [
        lambda d, x: x + x.flip(0),
        lambda d, x: x.t().contiguous() * 2,
        lambda d, x: x[1:, ::2] * x[:-1, 1::2],
        lambda d, x: x.to(torch.complex64).conj() * (1 + 1j),
        lambda d, x: x.to(torch.complex64) * (1 + 1j),
        lambda d, x: x.to(torch.complex64)._neg_view() + 1,
        lambda d, x: x.int() + 3,
        lambda d, x: x.half().sum(1),
        lambda d, x: x.sum(),
        lambda d, x: x @ x.t(),
    ]
    x_cpu = torch.randn(6, 6)
    x = x_cpu.to(D)
    for _ in range(3):
        for case in cases:
            torch.testing.assert_close(case(D, x).cpu(), case("cpu", x_cpu))


def test_threads_have_their_own_host_views():
    x_cpu = torch.randn(64, 64)
    x = x_cpu.to(D)
    errors: list[BaseException] = []

    def work(scale: float) -> None:
        try:
            for _ in range(200):
                torch.testing.assert_close(((x * scale) @ x).cpu(), (x_cpu * scale) @ x_cpu)
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=work, args=(float(i + 1),)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[0]


# ---- profiler, asynchronous mode, switch --------------------------------------------------------


def test_the_profiler_sees_direct_kernels_with_device_time():
    a = torch.randn(128, 128, device=D)
    with torch.autograd.profiler.profile(use_device=D) as prof, Calls() as calls:
        for _ in range(3):
            (a @ a + a).sum()
    assert calls.boxed == 0 and calls.direct == 9
    averages = {e.key: e for e in prof.key_averages()}
    for name in ("aten::mm", "aten::add", "aten::sum"):
        assert averages[name].count == 3
        assert averages[name].device_time_total > 0, f"{name} ran on neuron without device time"


ASYNC_SCRIPT = """
import json
import torch
from device_agnostic.neuron import _C

x = torch.randn(1024, 1024, device="neuron")
w = torch.randn(1024, 1024, device="neuron") / 32
# Warm-up, twice: the first call of a signature runs synchronously (it checks the Meta kernel's
# prediction), which would drain the stream; after it every call below is deferred, so the
# stream is still busy with the 12 matmuls when the host looks.
for _ in range(2):
    (x @ w * 0 + 1).sum().item()
torch.accelerator.synchronize()
direct, boxed = _C._direct_kernel_calls(), _C._boxed_fallback_calls()
y = x
for _ in range(12):
    y = y @ w
z = y * 0 + 1
pending = not torch.accelerator.current_stream().query()
value = z.sum().item()
print(json.dumps({"async": _C._async_enabled(), "pending": pending, "value": value,
                  "direct": _C._direct_kernel_calls() - direct,
                  "boxed": _C._boxed_fallback_calls() - boxed}))
"""


def test_asynchronous_mode_defers_the_hot_operators_through_the_fallback(run_python):
    completed = run_python(ASYNC_SCRIPT, env={"NEURON_LAUNCH_BLOCKING": "0"}, timeout=180)
    assert completed.returncode == 0, completed.stderr[-3000:]
    result = json.loads(completed.stdout.strip().splitlines()[-1])
    assert result["async"] is True
    # 12 mm, mul, add (and sum): all boxed and handed to the stream, which is still busy when
    # the host looks; the value is read after it drains.
    assert result == {**result, "direct": 0, "boxed": 15, "value": 1024 * 1024.0}
    assert result["pending"] is True


def test_the_switch_turns_the_direct_kernels_off(run_python):
    code = """
    import torch
    from device_agnostic.neuron import _C
    a = torch.ones(3, device="neuron")
    image, kernel = torch.ones(1, 1, 3, 3, device="neuron"), torch.ones(1, 1, 2, 2, device="neuron")
    direct, boxed = _C._direct_kernel_calls(), _C._boxed_fallback_calls()
    b = torch.nn.functional.conv2d(image, kernel)
    c = a + a
    print(_C._direct_kernel_calls() - direct, _C._boxed_fallback_calls() - boxed,
          float(c.sum()), float(b.sum()))
    """
    off = run_python(code, env={"NEURON_DIRECT_KERNELS": "0"})
    assert off.returncode == 0, off.stderr[-3000:]
    on = run_python(code, env={"NEURON_DIRECT_KERNELS": None})
    assert on.returncode == 0, on.stderr[-3000:]
    # conv2d and add: through the fallback, or through direct kernels.
    assert off.stdout.split() == ["0", "2", "6.0", "16.0"]
    assert on.stdout.split() == ["2", "0", "6.0", "16.0"]
    bad = run_python("import torch", env={"NEURON_DIRECT_KERNELS": "yes"})
    assert bad.returncode != 0 and "NEURON_DIRECT_KERNELS must be 0" in bad.stderr
