"""Framework integration: everyday PyTorch features that must work on any accelerator without
the user naming it (GradScaler(), activation checkpointing with dropout, save_on_cpu with pinned
memory, DLPack, fork_rng(), flex_attention, printing a tensor).

Each test is written against the documented, device-generic behaviour; where stock torch still
assumes CUDA, the backend's manifest lists the test as a known failure, naming the torch code
at fault and linking where it is tracked.
"""

from __future__ import annotations

import re
import warnings

import pytest
import torch
import torch.nn.functional as F
import torch.utils.checkpoint

from .assertions import assert_matches_reference, assert_on_device
from .requirements import require_accelerator


def test_grad_scaler_without_a_device_uses_the_current_accelerator(backend, device):
    require_accelerator(backend)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scaler = torch.amp.GradScaler(init_scale=2.0**4)
    assert scaler.is_enabled(), (
        f"torch.amp.GradScaler() disabled itself on {device.type}: "
        f"{[str(w.message) for w in caught]}"
    )
    scaled = scaler.scale(torch.tensor(3.0, device=device))
    assert_on_device(scaled, device, what="GradScaler().scale(loss)")
    assert scaled.item() == 3.0 * 2**4


def _dropout_block(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return F.dropout(torch.tanh(x @ weight), p=0.5, training=True).sum(dim=1)


def _gradients(device: torch.device, seed: int, checkpointed: bool) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(8, 16, generator=generator).to(device).requires_grad_()
    weight = torch.randn(16, 32, generator=generator).to(device).requires_grad_()
    torch.manual_seed(seed)  # seeds the device's generators too
    if checkpointed:
        out = torch.utils.checkpoint.checkpoint(
            _dropout_block, x, weight, use_reentrant=False, preserve_rng_state=True
        )
    else:
        out = _dropout_block(x, weight)
    out.square().sum().backward()
    return [x.grad.cpu(), weight.grad.cpu()]


def test_checkpoint_recomputes_dropout_with_the_same_mask(device):
    expected = _gradients(device, seed=1, checkpointed=False)
    other_mask = _gradients(device, seed=2, checkpointed=False)
    assert not torch.equal(expected[1], other_mask[1]), "dropout did not depend on the seed"
    actual = _gradients(device, seed=1, checkpointed=True)
    for name, got, want in zip(("x.grad", "weight.grad"), actual, expected, strict=True):
        assert_matches_reference(
            got,
            want,
            what=f"{name} through checkpoint(preserve_rng_state=True) on {device} (the "
            "recomputed forward must draw the same dropout mask)",
        )


def test_save_on_cpu_pins_the_saved_tensors(backend, device):
    require_accelerator(backend)
    hooks = torch.autograd.graph.save_on_cpu(pin_memory=True)
    packed: list[torch.Tensor] = []
    pack = hooks.pack_hook

    def inspecting_pack(tensor: torch.Tensor) -> object:
        result = pack(tensor)
        packed.append(result[1])
        return result

    hooks.pack_hook = inspecting_pack  # read by saved_tensors_hooks.__enter__
    x = torch.randn(4, 4, device=device, requires_grad=True)
    with hooks:
        loss = (x * x).sin().sum()
    loss.backward()
    assert packed, "save_on_cpu packed no tensor"
    expected_grad = (2 * x * (x * x).cos()).detach()
    assert_matches_reference(x.grad, expected_grad.cpu().to(device), what="x.grad via save_on_cpu")
    pinned = backend.capabilities.pinned_memory
    for tensor in packed:
        assert tensor.device.type == "cpu", f"save_on_cpu saved a tensor on {tensor.device}"
        assert tensor.is_pinned() == pinned, (
            f"save_on_cpu(pin_memory=True) saved a tensor with is_pinned()={tensor.is_pinned()} "
            f"on a backend whose manifest declares pinned_memory = {str(pinned).lower()}"
        )


def test_dlpack_device_names_the_backend_device(device):
    from torch.utils.dlpack import DLDeviceType

    tensor = torch.arange(4.0, device=device)
    device_type, index = tensor.__dlpack_device__()
    assert isinstance(device_type, DLDeviceType), f"{device_type!r} is not a DLDeviceType"
    assert index == (device.index or 0)
    if device.type == torch._C._get_privateuse1_backend_name():
        # DLPack's device type for an out-of-tree device, whatever the backend is named.
        assert device_type == DLDeviceType.kDLExtDev, (
            f"__dlpack_device__() of a {device.type} (PrivateUse1) tensor is {device_type!r}"
        )


def test_from_dlpack_shares_the_tensor_memory(device):
    tensor = torch.arange(4.0, device=device)
    shared = torch.from_dlpack(tensor)
    assert shared.device == tensor.device
    assert shared.data_ptr() == tensor.data_ptr(), "from_dlpack copied the tensor"
    shared[0] = -1.0
    assert tensor[0].item() == -1.0


@pytest.mark.filterwarnings("ignore:.*fork_rng without explicitly specifying")
def test_fork_rng_without_arguments_restores_the_accelerator_rng(backend, device):
    require_accelerator(backend)
    torch.manual_seed(0)
    before = backend.module.get_rng_state(device.index)
    expected = torch.rand(4, device=device)
    backend.module.set_rng_state(before, device.index)
    with torch.random.fork_rng():
        torch.rand(100, device=device)
    after = backend.module.get_rng_state(device.index)
    assert torch.equal(after, before), "fork_rng() did not restore the accelerator's RNG state"
    assert torch.equal(torch.rand(4, device=device).cpu(), expected.cpu())


def _causal(batch: int, head: int, q_index: torch.Tensor, kv_index: torch.Tensor) -> torch.Tensor:
    return q_index >= kv_index


def test_flex_attention_runs_eagerly_on_the_device(device):
    try:
        from torch.nn.attention import flex_attention as flex
    except ImportError:
        pytest.skip("not applicable: needs torch >= 2.5 (torch.nn.attention.flex_attention)")
    if not torch._dynamo.is_dynamo_supported():
        pytest.skip("not applicable: flex_attention needs dynamo, unsupported here")
    block_mask = flex.create_block_mask(_causal, 1, 1, 128, 128, device=device)
    generator = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 128, 16, generator=generator) for _ in range(3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "flex_attention called without torch.compile()"
        out = flex.flex_attention(q.to(device), k.to(device), v.to(device), block_mask=block_mask)
    assert_on_device(out, device, what="flex_attention output")
    expected = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    assert_matches_reference(out, expected, what="causal flex_attention vs causal SDPA on cpu")


PRINTED_DTYPES = (torch.float32, torch.bfloat16, torch.float16, torch.complex64)


def test_printing_a_tensor_matches_the_cpu(backend, device):
    # Exactly representable values, so any correct formatting path prints the same digits.
    values = torch.tensor([[0.5, -1.25, 3.0], [float("inf"), float("nan"), 1024.0]])
    cases = [values.to(dtype) for dtype in PRINTED_DTYPES if backend.capabilities.supports(dtype)]
    cases.append(torch.arange(2000.0).reshape(40, 50) / 4)  # summarized ("...") printing
    for tensor in cases:
        on_device = tensor.to(device)
        printed = repr(on_device)
        if device.type != "cpu":
            assert f"device='{device}'" in printed, f"repr does not name the device:\n{printed}"
        # Without the device suffix (and the line wrapping it may cause), the text is the CPU's.
        without_device = re.sub(r",\s*device='[^']*'", "", printed)
        assert " ".join(without_device.split()) == " ".join(repr(tensor).split()), (
            f"repr of a {tensor.dtype} tensor on {device}:\n{printed}\non the cpu:\n{tensor!r}"
        )
        assert str(on_device) == printed
