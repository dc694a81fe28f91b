"""Items 7 and 8: every ATen operator runs on neuron, zero-copy, with CPU semantics and dtypes."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

SUPPORTED_DTYPES = [
    torch.float32,
    torch.bfloat16,
    torch.float16,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.uint8,
    torch.bool,
    torch.complex64,
]
UNSUPPORTED_DTYPES = [torch.float64, torch.complex128]


def assert_same_on_neuron(fn, *cpu_inputs: torch.Tensor, atol: float = 1e-5) -> None:
    """Run ``fn`` on CPU inputs and on their neuron copies; the results must agree."""
    expected = fn(*cpu_inputs)
    actual = fn(*(t.to("neuron") for t in cpu_inputs))
    expected_list = expected if isinstance(expected, tuple | list) else [expected]
    actual_list = actual if isinstance(actual, tuple | list) else [actual]
    for e, a in zip(expected_list, actual_list, strict=True):
        assert a.device.type == "neuron", f"result on {a.device}, expected neuron"
        assert a.dtype == e.dtype
        assert a.shape == e.shape
        torch.testing.assert_close(a.cpu(), e, atol=atol, rtol=1e-5)


OPS = {
    "add": lambda a, b: a + b,
    "mul_scalar": lambda a, b: a * 3,
    "matmul": lambda a, b: a @ b.T,
    "sum_dim": lambda a, b: a.sum(dim=1),
    "softmax": lambda a, b: torch.softmax(a, dim=-1),
    "where": lambda a, b: torch.where(a > 0, a, b),
    "cat": lambda a, b: torch.cat([a, b], dim=0),
    "stack": lambda a, b: torch.stack([a, b]),
    "sort": lambda a, b: torch.sort(a, dim=1),
    "topk": lambda a, b: torch.topk(a, 2, dim=1),
    "cumsum": lambda a, b: torch.cumsum(a, 0),
    "nonzero": lambda a, b: torch.nonzero(a > 0),
    "masked_select": lambda a, b: torch.masked_select(a, b > 0),
    "index_select": lambda a, b: a.index_select(0, torch.tensor([2, 0]).to(a.device)),
    "gather": lambda a, b: a.gather(1, (b.abs() * 2).long().clamp(max=4)),
    "layer_norm": lambda a, b: F.layer_norm(a, (5,)),
    "conv2d": lambda a, b: F.conv2d(a.view(1, 1, 4, 5), b.view(1, 1, 4, 5)[..., :3, :3]),
    "conv_transpose1d": lambda a, b: F.conv_transpose1d(a.view(1, 4, 5), b[:, :2].reshape(4, 1, 2)),
    "max_pool": lambda a, b: F.max_pool1d(a.unsqueeze(0), 2),
    "unique": lambda a, b: torch.unique((a * 2).round()),
    "std_mean": lambda a, b: torch.std_mean(a, dim=0),
    "linalg_norm": lambda a, b: torch.linalg.vector_norm(a),
    "einsum": lambda a, b: torch.einsum("ij,kj->ik", a, b),
    "transpose_contiguous": lambda a, b: a.t().contiguous(),
    "chunk": lambda a, b: a.chunk(2, dim=1),
    "unfold": lambda a, b: a.unfold(1, 2, 1),
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_operator_matches_cpu(name):
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(4, 5, generator=generator)
    b = torch.randn(4, 5, generator=generator)
    assert_same_on_neuron(OPS[name], a, b)


def test_non_contiguous_inputs_match_cpu():
    base = torch.randn(6, 8)
    assert_same_on_neuron(lambda t: (t[::2, 1::3] * 2).exp(), base)
    assert_same_on_neuron(lambda t: t.t() @ t, base)


def test_views_share_storage_on_the_device():
    x = torch.zeros(4, 6, device="neuron")
    view = x[1:3, ::2]
    assert view.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    view.fill_(7.0)
    expected = torch.zeros(4, 6)
    expected[1:3, ::2] = 7.0
    assert torch.equal(x.cpu(), expected)
    # views made by host execution (unfold, unbind, split) alias too
    for parts in (x.unbind(0), x.split(2, dim=1), (x.unfold(1, 2, 2),)):
        for part in parts:
            assert part.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()


def test_as_strided_and_view_alias():
    x = torch.arange(12.0, device="neuron")
    strided = x.as_strided((3, 2), (4, 1), 1)
    assert torch.equal(strided.cpu(), torch.arange(12.0).as_strided((3, 2), (4, 1), 1))
    x.view(3, 4)[0, 0] = -1.0
    assert x[0].item() == -1.0


def test_in_place_ops_keep_the_data_pointer():
    x = torch.ones(1000, device="neuron")
    pointer = x.data_ptr()
    x.mul_(2).add_(1).sqrt_()
    torch.relu_(x)
    assert x.data_ptr() == pointer
    assert torch.allclose(x.cpu(), torch.full((1000,), 3.0).sqrt())


def test_results_are_born_in_device_memory_without_copies():
    x = torch.randn(256, 256, device="neuron")
    before = torch.accelerator.memory_allocated()
    y = x * 2  # 256 KiB of output
    # The output (and nothing more) was allocated from neuron memory.
    assert torch.accelerator.memory_allocated() - before == y.untyped_storage().nbytes()
    del y
    assert torch.accelerator.memory_allocated() == before


def test_out_argument_is_resized_on_the_device():
    a = torch.randn(3, 4, device="neuron")
    out = torch.empty(0, device="neuron")
    result = torch.add(a, 1, out=out)
    assert result is out
    assert out.shape == (3, 4) and out.device == a.device
    assert torch.allclose(out.cpu(), a.cpu() + 1)
    torch.sum(a, dim=0, out=out)
    assert out.shape == (4,)


def test_resize_grows_storage_on_the_tensors_device(restore_device):
    torch.accelerator.set_device_index(0)
    x = torch.ones(2, device="neuron:1")
    x.resize_(1000)
    assert x.device == torch.device("neuron:1")
    assert x.untyped_storage().nbytes() >= 4000
    assert x[:2].cpu().tolist() == [1.0, 1.0]


def test_set_variants_share_storage():
    source = torch.arange(6.0, device="neuron")
    target = torch.empty(0, device="neuron")
    target.set_(source)
    assert target.data_ptr() == source.data_ptr()
    target.set_(source.untyped_storage(), 2, (2,), (1,))
    assert target.cpu().tolist() == [2.0, 3.0]
    target.set_()
    assert target.numel() == 0 and target.device.type == "neuron"


@pytest.mark.parametrize(
    "factory",
    [
        lambda: torch.zeros(3, device="neuron"),
        lambda: torch.ones(2, 2, device="neuron"),
        lambda: torch.full((2,), 5.0, device="neuron"),
        lambda: torch.arange(5, device="neuron"),
        lambda: torch.linspace(0, 1, 5, device="neuron"),
        lambda: torch.eye(3, device="neuron"),
        lambda: torch.randn(4, device="neuron"),
        lambda: torch.tensor([1.0, 2.0], device="neuron"),
        lambda: torch.empty_strided((2, 3), (1, 2), device="neuron"),
    ],
)
def test_factory_functions_create_on_neuron(factory):
    assert factory().device == torch.device("neuron:0")


def test_mixing_devices_raises_the_cpu_cuda_error():
    neuron = torch.ones(3, device="neuron")
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        neuron + torch.ones(3)
    with pytest.raises(RuntimeError, match="neuron:0 and neuron:1"):
        neuron + torch.ones(3, device="neuron:1")
    # 0-dim CPU tensors act as scalars, as on CUDA
    assert (neuron * torch.tensor(2.0)).cpu().tolist() == [2.0, 2.0, 2.0]
    # CPU indices are accepted for indexing, as on CUDA
    assert neuron[torch.tensor([0, 2])].device.type == "neuron"


def test_local_scalar_and_copies_both_ways():
    x = torch.tensor([[1.5, 2.5]], device="neuron")
    assert x[0, 1].item() == 2.5
    assert x.to(torch.int32).cpu().tolist() == [[1, 2]]  # dtype conversion on the device
    assert torch.equal(x.to("neuron:1").to("neuron:0").cpu(), x.cpu())
    cpu = torch.empty(1, 2)
    cpu.copy_(x)
    assert cpu.tolist() == [[1.5, 2.5]]


def test_memory_formats():
    x = torch.randn(2, 3, 4, 5)
    channels_last = x.to("neuron", memory_format=torch.channels_last)
    assert channels_last.is_contiguous(memory_format=torch.channels_last)
    assert torch.equal(channels_last.cpu(), x)


@pytest.mark.parametrize("dtype", SUPPORTED_DTYPES, ids=str)
def test_supported_dtypes_round_trip(dtype):
    values = torch.tensor([0, 1, 2, 3]).to(dtype)
    on_neuron = values.to("neuron")
    assert on_neuron.dtype == dtype
    assert torch.equal(on_neuron.cpu().to(torch.float32), values.to(torch.float32))
    assert torch.zeros(2, dtype=dtype, device="neuron").dtype == dtype


@pytest.mark.parametrize("dtype", UNSUPPORTED_DTYPES, ids=str)
@pytest.mark.parametrize(
    "make",
    [
        lambda dtype: torch.zeros(2, dtype=dtype, device="neuron"),
        lambda dtype: torch.zeros(2, dtype=dtype).to("neuron"),
        lambda dtype: torch.ones(2, device="neuron").to(dtype),
        lambda dtype: torch.arange(3, device="neuron", dtype=dtype),
    ],
    ids=["factory", "move", "convert", "host-executed-factory"],
)
def test_unsupported_dtypes_raise_type_error(dtype, make):
    message = r"torch\.(float64|complex128) tensor to neuron.*Please use torch\.(float32|complex64)"
    with pytest.raises(TypeError, match=message):
        make(dtype)
    assert torch.ones(1, device="neuron").item() == 1.0  # still usable


def test_operator_without_host_kernel_fails_loudly():
    # _masked_scale has a CUDA kernel only.
    x = torch.ones(3, device="neuron")
    message = "'aten::_masked_scale' is not implemented for neuron"
    with pytest.raises(NotImplementedError, match=message):
        torch.ops.aten._masked_scale(x, x, 2.0)


def test_training_step_matches_cpu():
    torch.manual_seed(0)
    cpu_model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    neuron_model = torch.nn.Sequential(
        torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1)
    ).to("neuron")
    neuron_model.load_state_dict(cpu_model.state_dict())
    x, y = torch.randn(32, 8), torch.randn(32, 1)
    for model, device in ((cpu_model, "cpu"), (neuron_model, "neuron")):
        optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        for _ in range(5):
            optimizer.zero_grad()
            F.mse_loss(model(x.to(device)), y.to(device)).backward()
            optimizer.step()
    pairs = zip(cpu_model.parameters(), neuron_model.parameters(), strict=True)
    for cpu_param, neuron_param in pairs:
        torch.testing.assert_close(neuron_param.detach().cpu(), cpu_param.detach())


def test_convolution_backward_matches_cpu():
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 3, 8, 8, generator=generator)
    conv = torch.nn.Conv2d(3, 4, 3, padding=1)
    conv_neuron = torch.nn.Conv2d(3, 4, 3, padding=1).to("neuron")
    conv_neuron.load_state_dict(conv.state_dict())
    x_cpu = x.clone().requires_grad_()
    x_neuron = x.to("neuron").requires_grad_()
    conv(x_cpu).square().sum().backward()
    conv_neuron(x_neuron).square().sum().backward()
    close = {"rtol": 1e-4, "atol": 1e-4}
    torch.testing.assert_close(x_neuron.grad.cpu(), x_cpu.grad, **close)
    torch.testing.assert_close(conv_neuron.weight.grad.cpu(), conv.weight.grad, **close)
    torch.testing.assert_close(conv_neuron.bias.grad.cpu(), conv.bias.grad, **close)


def test_conjugate_and_negative_views_materialize_like_cpu():
    # Used to recurse without end: the Conjugate fallback cloned _copy_from's input.
    x = torch.randn(4, dtype=torch.complex64)
    on_neuron = x.to("neuron")
    assert torch.equal(on_neuron.conj().cpu(), x.conj())
    assert torch.equal(on_neuron.conj().resolve_conj().cpu(), x.conj().resolve_conj())
    assert on_neuron.conj()[1].item() == x.conj()[1].item()
    negative = torch.ops.aten._neg_view(on_neuron)
    assert torch.equal(negative.cpu(), -x)


def test_zero_tensors_live_on_neuron_without_memory_as_on_cuda():
    # Used to crash the process: the CPU kernel's ZeroTensor has a null data pointer, and the
    # result was copied to device memory from it (found by the conformance suite's gradients of
    # sgn, whose backward for real inputs is an _efficientzerotensor).
    zeros = torch._efficientzerotensor((2, 3), device="neuron")
    assert zeros.device.type == "neuron" and zeros._is_zerotensor()
    assert torch.equal(zeros.cpu(), torch.zeros(2, 3))
    assert torch.equal((torch.ones(2, 3, device="neuron") + zeros).cpu(), torch.ones(2, 3))
    assert zeros.sum().item() == 0.0
    x = torch.randn(5)
    on_neuron = x.to("neuron").requires_grad_()
    (grad,) = torch.autograd.grad(torch.sgn(on_neuron), on_neuron, torch.ones(5, device="neuron"))
    assert grad.device.type == "neuron" and torch.equal(grad.cpu(), torch.zeros(5))
    with pytest.raises(TypeError, match="float64"):
        torch._efficientzerotensor((2,), dtype=torch.float64, device="neuron")


def test_layer_norm_runs_the_cpu_kernel_not_a_decomposition():
    x = torch.randn(3, 1)
    weight, bias = torch.randn(1), torch.randn(1)
    expected = F.layer_norm(x, (1,), weight, bias)
    actual = F.layer_norm(x.neuron(), (1,), weight.neuron(), bias.neuron())
    assert torch.equal(actual.cpu(), expected)  # bit-identical: the same kernel ran


def test_sparse_results_fail_loudly_instead_of_landing_on_the_cpu():
    dense = torch.eye(3, device="neuron")
    with pytest.raises(NotImplementedError, match="neuron supports only strided"):
        dense.to_sparse()
    assert dense.sum().item() == 3.0  # still usable


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.sparse_coo_tensor([[0, 1]], [1.0, 2.0], (3,), device="neuron"),
        lambda: torch.sparse_coo_tensor([[0, 1]], [1.0, 2.0], (3,)).to("neuron"),
        lambda: torch.empty(3, layout=torch.sparse_coo, device="neuron"),
        lambda: torch.eye(2).to_sparse_csr().to("neuron").to_dense(),
    ],
    ids=["sparse_coo_tensor", "to", "empty", "csr_moved_then_used"],
)
def test_sparse_neuron_tensors_are_refused_naming_the_fix(make):
    # Without a refusal: "Could not run ... from the 'Sparseneuron' backend".
    with pytest.raises(NotImplementedError, match="sparse neuron tensor.*to_dense"):
        make()


@pytest.mark.parametrize(
    "op",
    [
        lambda s, out: torch.add(s, s, out=out),
        lambda s, out: torch.nonzero(s.expand(3), out=out.long()),
        lambda s, out: torch.mul(s, torch.tensor(2.0), out=out),
        lambda s, out: out.add_(s),
    ],
    ids=["add_out", "nonzero_out", "mul_cpu_scalar_input", "in_place_on_cpu_scalar"],
)
def test_a_cpu_scalar_never_receives_a_neuron_result(op):
    # CUDA allows 0-dim CPU tensors as inputs only: as out= or in-place self they must raise,
    # not be handed device memory.
    s = torch.tensor(2.0, device="neuron")
    out = torch.zeros([])
    with pytest.raises(RuntimeError, match="Expected all tensors to be on the same device"):
        op(s, out)
    assert out.device.type == "cpu" and out.item() == 0.0 and out.shape == ()


def test_cpu_scalars_stay_allowed_as_inputs_with_a_neuron_out():
    out = torch.empty([], device="neuron")
    torch.add(torch.tensor(2.0), torch.tensor(3.0, device="neuron"), out=out)
    assert out.item() == 5.0
    torch.add(torch.tensor(1.0, device="neuron"), torch.tensor(4.0), out=out)
    assert out.item() == 5.0


QUANTIZED_FACTORIES = {
    "quantize_per_tensor": lambda: torch.quantize_per_tensor(
        torch.randn(3, device="neuron"), 0.1, 0, torch.qint8
    ),
    "quantize_per_channel": lambda: torch.quantize_per_channel(
        torch.randn(3, 2, device="neuron"),
        torch.ones(3, device="neuron"),
        torch.zeros(3, dtype=torch.long, device="neuron"),
        0,
        torch.quint8,
    ),
    "to_neuron": lambda: torch.quantize_per_tensor(torch.randn(3), 0.1, 0, torch.qint8).to(
        "neuron"
    ),
    "empty_qint8": lambda: torch.empty(3, dtype=torch.qint8, device="neuron"),
    "empty_affine_quantized": lambda: torch._empty_affine_quantized(
        [3], scale=0.1, zero_point=0, dtype=torch.qint8, device="neuron"
    ),
}


@pytest.mark.filterwarnings("ignore:.*quantized tensor creation functions.*:UserWarning")
@pytest.mark.parametrize("make", QUANTIZED_FACTORIES.values(), ids=QUANTIZED_FACTORIES.keys())
def test_quantized_neuron_tensors_are_refused_at_creation_naming_the_fix(make):
    # Neuron has no quantized kernels: a quantized tensor used to come out as a plain tensor of a
    # qint dtype (its quantizer lost) on which flip() and friends then failed.
    with pytest.raises(NotImplementedError, match=r"quantized.*neuron.*dequantize\(\)"):
        make()
    assert torch.ones(2, device="neuron").flip(0).sum().item() == 2.0  # still usable


@pytest.mark.filterwarnings("ignore:.*quantized tensor creation functions.*:UserWarning")
def test_a_dequantized_tensor_moves_to_neuron_as_the_error_suggests():
    q = torch.quantize_per_tensor(torch.tensor([0.5, -1.0, 2.0]), 0.5, 0, torch.qint8)
    moved = q.dequantize().to("neuron")
    assert moved.flip(0).cpu().tolist() == [2.0, -1.0, 0.5]


BROADCAST_INTO_AN_INPUT = {
    "mul_out": lambda x, y: torch.mul(x, y, out=x),
    "add_out": lambda x, y: torch.add(x, y, out=x),
    "sub_out": lambda x, y: torch.sub(x, y, out=x),
    "div_out": lambda x, y: torch.div(x, y, out=x),
    "atan2_out": lambda x, y: torch.atan2(x, y, out=x),
    "ldexp_": lambda x, y: x.ldexp_(y),
}


@pytest.mark.parametrize("op", BROADCAST_INTO_AN_INPUT.values(), ids=BROADCAST_INTO_AN_INPUT.keys())
def test_an_out_that_is_an_input_is_refused_a_broadcast_shape_as_on_the_cpu(op):
    # The CPU kernel refuses to resize an out= that is also an input (TensorIterator marks it
    # read-write). Host execution used to give the kernel two host views of x, one per argument,
    # so the out= looked fresh and x silently became (5, 5) on neuron.
    for device in ("cpu", "neuron"):
        x = torch.ones(5, 1, device=device)
        y = torch.full((5, 5), 2.0, device=device)
        with pytest.raises(RuntimeError, match=r"output with shape \[5, 1\] doesn't match"):
            op(x, y)
        assert x.shape == (5, 1), device
        assert x.device.type == device


def test_an_out_that_is_an_input_of_the_result_shape_is_written_in_place():
    x = torch.arange(4.0, device="neuron")
    pointer = x.data_ptr()
    torch.mul(x, x, out=x)
    assert x.cpu().tolist() == [0.0, 1.0, 4.0, 9.0]
    assert x.data_ptr() == pointer


def test_conj_physical_in_place_on_complex_matches_the_cpu():
    # conj_physical_ has only a composite kernel that calls the conj DispatchStub for the
    # tensor's own device type: on neuron an internal assert ("missing kernel for neuron").
    values = torch.tensor([1 + 2j, -3 - 4j, 0.5j], dtype=torch.complex64)
    x = values.to("neuron")
    pointer = x.data_ptr()
    assert x.conj_physical_() is x
    assert torch.equal(x.cpu(), values.conj_physical())
    assert x.data_ptr() == pointer and not x.is_conj()
    real = torch.arange(3.0, device="neuron")
    assert torch.equal(real.conj_physical_().cpu(), torch.arange(3.0))


@pytest.mark.filterwarnings("ignore:TypedStorage is deprecated:UserWarning")
@pytest.mark.parametrize(
    "dtype, name",
    [
        (torch.float32, "FloatStorage"),
        (torch.bfloat16, "BFloat16Storage"),
        (torch.int64, "LongStorage"),
    ],
)
def test_storage_type_names_the_device_modules_class_as_on_cuda(dtype, name):
    # CUDA answers torch.cuda.FloatStorage; a device module without the classes made it None.
    x = torch.zeros(3, dtype=dtype, device="neuron")
    storage_class = x.storage_type()
    assert storage_class is getattr(torch.neuron, name)
    assert isinstance(x.storage(), storage_class)
    assert not isinstance(x.cpu().storage(), storage_class)
    made = storage_class(4)
    assert made.device.type == "neuron" and made.dtype == dtype and made.size() == 4


KAISER_WINDOWS = {
    "default": lambda **kw: torch.kaiser_window(8, **kw),
    "symmetric": lambda **kw: torch.kaiser_window(7, False, **kw),
    "beta": lambda **kw: torch.kaiser_window(9, True, 6.0, **kw),
    "length_1": lambda **kw: torch.kaiser_window(1, **kw),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("form", sorted(KAISER_WINDOWS))
def test_kaiser_window_matches_the_cpu(form, dtype):
    # kaiser_window's only kernel is composite and calls kaiser_window_stub for the device
    # asked for: on neuron an internal assert ("DispatchStub: missing kernel for neuron").
    expected = KAISER_WINDOWS[form](dtype=dtype)
    actual = KAISER_WINDOWS[form](dtype=dtype, device="neuron")
    assert actual.device.type == "neuron" and actual.dtype == dtype
    assert torch.equal(actual.cpu(), expected)


def test_kaiser_window_out_writes_the_neuron_tensor():
    # The out= forms (not in torch's Python API) call the functional one on out's device.
    out = torch.empty(0, device="neuron")
    assert torch.ops.aten.kaiser_window.beta_out(6, True, 3.0, out=out) is out
    assert out.device.type == "neuron"
    assert torch.equal(out.cpu(), torch.kaiser_window(6, True, 3.0))


# Calls every ATen operator that neuron runs through a composite kernel (no CPU and no neuron
# kernel) with arguments made from its schema, on float32 and complex64 neuron tensors, and
# prints those that reach a DispatchStub without a neuron kernel. Other errors (wrong made-up
# arguments) do not matter here. Run in a subprocess: a few internal operators crash on
# made-up arguments, on the CPU as well.
STUB_SCAN = """
import warnings
import torch

warnings.filterwarnings("ignore")
SKIP = ("sparse", "mkldnn", "cudnn", "miopen", "quantiz", "mps", "nested", "_foreach",
        "fbgemm", "vulkan", "xnnpack", "from_file", "_print", "to_padded",
        "_thnn_differentiable")  # the last segfaults on made-up arguments on the CPU too

def value(arg, dtype):
    kind = str(arg.type)
    if arg.default_value is not None or (kind.endswith("?") and "Tensor" not in kind):
        return None, False
    tensor = lambda: torch.full((4, 4), 0.5, dtype=dtype, device="neuron")
    if "Tensor" in kind:
        return ([tensor(), tensor()] if "[]" in kind or "List" in kind else tensor()), True
    made = {"int": 4, "SymInt": 4, "float": 0.5, "Scalar": 2, "number": 2, "bool": False,
            "Device": torch.device("neuron"), "ScalarType": dtype, "str": "mean"}
    if kind in made:
        return made[kind], True
    if kind.startswith(("int[", "SymInt[", "List[int]")):
        return [4, 4], True
    if kind.startswith("float["):
        return [0.5], True
    raise TypeError(kind)

tried, hits = 0, set()
for name in torch._C._dispatch_get_all_op_names():
    has = lambda key: torch._C._dispatch_has_kernel_for_dispatch_key(name, key)
    if not name.startswith("aten::") or has("CPU") or has("PrivateUse1"):
        continue
    if not any(has(key) for key in ("CompositeExplicitAutograd", "CompositeImplicitAutograd",
                                    "CompositeExplicitAutogradNonFunctional")):
        continue
    base, _, overload = name[6:].partition(".")
    if any(word in base for word in SKIP):
        continue
    try:
        op = getattr(getattr(torch.ops.aten, base), overload or "default")
    except (AttributeError, RuntimeError):
        continue
    for dtype in (torch.float32, torch.complex64):
        args, kwargs = [], {}
        try:
            for arg in op._schema.arguments:
                if arg.is_out:
                    kwargs[arg.name] = torch.empty(0, dtype=dtype, device="neuron")
                    continue
                made, given = value(arg, dtype)
                if not given:
                    if arg.name == "device":
                        kwargs["device"] = torch.device("neuron")
                    elif arg.name == "dtype" and "window" in base:
                        kwargs["dtype"] = dtype
                elif arg.kwarg_only:
                    kwargs[arg.name] = made
                else:
                    args.append(made)
        except TypeError:
            continue
        tried += 1
        try:
            op(*args, **kwargs)
        except Exception as error:
            if "DispatchStub" in str(error):
                hits.add(name)
print("TRIED", tried)
print("HITS", sorted(hits))
"""


def test_no_composite_operator_reaches_a_dispatch_stub(run_python):
    # A composite kernel that calls a DispatchStub with the tensors' device type (kaiser_window,
    # conj_physical_) asserts on neuron unless neuron routes the operator to host execution.
    result = run_python(STUB_SCAN, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in result.stdout.splitlines() if " " in line)
    assert int(lines["TRIED"]) > 1500, result.stdout  # the scan reached the operators
    assert lines["HITS"] == "[]", result.stdout


@pytest.mark.parametrize("transposed", [False, True], ids=["conv", "conv_transpose"])
@pytest.mark.parametrize(
    "input_format, weight_format",
    [
        (torch.channels_last, torch.contiguous_format),
        (torch.contiguous_format, torch.channels_last),
        (torch.channels_last, torch.channels_last),
    ],
    ids=["input_cl", "weight_cl", "both_cl"],
)
def test_convolution_layouts_are_what_torch_predicts_for_neuron(
    transposed, input_format, weight_format
):
    # FakeTensor (torch.compile) predicts a PrivateUse1 convolution's result and gradients in
    # the format of _determine_backend_memory_format for the Overrideable backend; the CPU
    # kernel neuron runs returns channels-last for a channels-last input or weight. Values stay
    # the CPU's.
    from torch._subclasses.fake_tensor import FakeTensorMode

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 4, 6, 6, generator=generator).to(memory_format=input_format)
    w = torch.randn(4, 4, 3, 3, generator=generator).to(memory_format=weight_format)
    grad = torch.randn(2, 4, 6, 6, generator=generator).to(memory_format=input_format)
    conv = (1, 1), (1, 1), (1, 1), transposed, (0, 0), 1

    def run(x, w, grad, fake=None):
        inputs = (x, w, grad) if fake is None else tuple(map(fake.from_tensor, (x, w, grad)))
        y = torch.ops.aten.convolution(inputs[0], inputs[1], None, *conv)
        grads = torch.ops.aten.convolution_backward(
            inputs[2], inputs[0], inputs[1], None, *conv, (True, True, False)
        )
        return y, *grads[:2]

    on_neuron = [t.to("neuron") for t in (x, w, grad)]
    with FakeTensorMode() as fake:
        predicted = run(*on_neuron, fake=fake)
    results = run(*on_neuron)
    for got, want, expected in zip(results, predicted, run(x, w, grad), strict=True):
        assert got.device.type == "neuron"
        assert got.stride() == want.stride()
        assert torch.equal(got.cpu(), expected)  # the CPU kernel ran
