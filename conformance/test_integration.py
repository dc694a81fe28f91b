"""Framework integration: everyday PyTorch features that must work on any accelerator without
the user naming it: GradScaler() and FSDP's ShardedGradScaler, activation checkpointing with
dropout, save_on_cpu with pinned memory, DLPack, fork_rng(), flex_attention and PagedAttention,
printing a tensor, the profiler's tables and memory timeline (and its HTML plot's title),
DataParallel and parallel_apply, torch.load's device errors, new_subgroups, jit.trace, DebugMode,
VonMises sampling, DCP staging, fork_rng()'s and TorchTidy's advice, collect_env's report,
torch.compile leaving the RNG and the matmul precision alone and synchronizing the current
device, the error for device tensors sent to another process, Tensor.<device>(non_blocking=True)
on a tensor subclass.

Each test is written against the documented, device-generic behaviour; where stock torch still
assumes CUDA, the backend's manifest lists the test as a known failure, naming the torch code
at fault, linking where it is tracked, and naming the patch of the series that fixes it
(``fixed_by``): on a patched torch the test must pass, which is how the report shows stock and
patched torch side by side.
"""

from __future__ import annotations

import copy
import re
import warnings

import pytest
import torch
import torch.nn.functional as F
import torch.utils.checkpoint

from .assertions import assert_matches_reference, assert_on_device
from .requirements import require_accelerator, require_devices


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


def test_printing_in_scientific_notation_matches_the_cpu(backend, device):
    # Values spanning many decades make the formatter pick scientific notation from the range of
    # the values; a tensor in an autograd graph and a Parameter add their own suffix and prefix.
    values = torch.tensor([1.0e-8, -0.25, 1.0, 3.0e4, 1.0e10])
    dtypes = [
        dtype for dtype in (torch.float32, torch.bfloat16) if backend.capabilities.supports(dtype)
    ]
    for dtype in dtypes:
        cpu_tensor = values.to(dtype)
        leaf = cpu_tensor.to(device).requires_grad_()
        cases = [
            (leaf * 1, cpu_tensor.clone().requires_grad_() * 1),
            (torch.nn.Parameter(cpu_tensor.to(device)), torch.nn.Parameter(cpu_tensor.clone())),
        ]
        for on_device, on_cpu in cases:
            printed = repr(on_device)
            without_device = re.sub(r",\s*device='[^']*'", "", printed)
            assert " ".join(without_device.split()) == " ".join(repr(on_cpu).split()), (
                f"repr of a {dtype} tensor on {device}:\n{printed}\non the cpu:\n{on_cpu!r}"
            )


def test_save_on_cpu_pins_by_default_like_the_named_accelerator(backend, device):
    require_accelerator(backend)

    def pinned_states(**kwargs: object) -> list[bool]:
        hooks = torch.autograd.graph.save_on_cpu(pin_memory=True, **kwargs)
        pack = hooks.pack_hook
        states: list[bool] = []

        def inspecting_pack(tensor: torch.Tensor) -> object:
            result = pack(tensor)
            states.append(result[1].is_pinned())
            return result

        hooks.pack_hook = inspecting_pack  # read by saved_tensors_hooks.__enter__
        x = torch.randn(4, 4, device=device, requires_grad=True)
        with hooks:
            loss = (x * x).sin().sum()
        loss.backward()
        assert states, "save_on_cpu packed no tensor"
        return states

    named = pinned_states(device_type=device.type)
    default = pinned_states()
    assert default == named, (
        f"save_on_cpu(pin_memory=True) pinned {default} of the saved tensors, but "
        f"save_on_cpu(pin_memory=True, device_type={device.type!r}) pinned {named}: without "
        f"device_type it must use the current accelerator ({device.type})"
    )


def _single_rank_fake_process_group(device: torch.device, world_size: int = 1) -> None:
    """A single-process "fake" process group with a backend for ``device``'s type (no
    communication; enough for APIs that only need a group to exist)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    backend = "cpu:fake" if device.type == "cpu" else f"cpu:fake,{device.type}:fake"
    dist.init_process_group(backend, rank=0, world_size=world_size, store=FakeStore())


def test_sharded_grad_scaler_without_a_device_uses_the_current_accelerator(backend, device):
    require_accelerator(backend)
    if not torch.distributed.is_available():
        pytest.skip("not applicable: torch.distributed is not available")
    if device.type == "mps":
        # ShardedGradScaler rejects MPS tensors (_is_supported_device); its default stays
        # "cuda" on a Mac by design (patch 0014).
        pytest.skip("not applicable: ShardedGradScaler does not support MPS tensors")
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scaler = ShardedGradScaler(init_scale=2.0**4)
    assert scaler.is_enabled(), (
        f"ShardedGradScaler() disabled itself on {device.type}: {[str(w.message) for w in caught]}"
    )
    scaled = scaler.scale(torch.tensor(3.0, device=device))
    assert_on_device(scaled, device, what="ShardedGradScaler().scale(loss)")
    assert scaled.item() == 3.0 * 2**4


def test_sharded_grad_scaler_step_unscales_the_gradients(backend, device):
    if not torch.distributed.is_available():
        pytest.skip("not applicable: torch.distributed is not available")
    import torch.distributed as dist
    from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

    generator = torch.Generator().manual_seed(0)
    weight = torch.randn(2, 4, generator=generator)
    inputs = torch.randn(3, 4, generator=generator)
    expected_grad = inputs.sum(dim=0).expand(2, 4)  # d/dW of (inputs @ W.T).sum()
    _single_rank_fake_process_group(device)
    try:
        param = torch.nn.Parameter(weight.clone().to(device))
        optimizer = torch.optim.SGD([param], lr=0.5)
        scaler = ShardedGradScaler(device.type, init_scale=2.0**10)
        scaler.scale((inputs.to(device) @ param.T).sum()).backward()
        scaler.unscale_(optimizer)
        assert_matches_reference(param.grad, expected_grad, what="grad after unscale_()")
        scaler.step(optimizer)
        scaler.update()
    finally:
        dist.destroy_process_group()
    assert_matches_reference(param.detach(), weight - 0.5 * expected_grad, what="step()")
    assert scaler.get_scale() == 2.0**10


def test_new_subgroups_default_to_one_subgroup_per_node(backend, device):
    require_accelerator(backend)
    if not torch.distributed.is_available():
        pytest.skip("not applicable: torch.distributed is not available")
    import torch.distributed as dist

    per_node = torch.accelerator.device_count()
    _single_rank_fake_process_group(device, world_size=2 * per_node)
    try:
        subgroup, subgroups = dist.new_subgroups()
        ranks = [dist.get_process_group_ranks(group) for group in subgroups]
        own = dist.get_process_group_ranks(subgroup)
    finally:
        dist.destroy_process_group()
    nodes = [list(range(per_node)), list(range(per_node, 2 * per_node))]
    assert ranks == nodes, (
        f"new_subgroups() on 2 nodes of {per_node} {device.type} devices made groups {ranks}"
    )
    assert own == nodes[0], f"rank 0 was put in subgroup {own}"


def test_memory_timeline_defaults_to_the_current_accelerator(backend, device):
    require_accelerator(backend)
    import json
    import tempfile
    from pathlib import Path

    from torch.profiler import ProfilerActivity, profile

    # The device's timeline must be told apart from the host's: 1 MiB on the device and 3 MiB on
    # the host. A backend that stages fills on the host puts the device's peak on the host's
    # timeline too; the 3 MiB keep the two apart. (The timeline counts only tensors an operator
    # touched: torch.empty alone would leave the device's empty.)
    with profile(
        activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True, with_stack=True
    ) as prof:
        x = torch.ones(256 * 1024, device=device)  # 1 MiB
        host = torch.ones(3 * 256 * 1024)  # 3 MiB
        del x, host

    def peak(**kwargs: str) -> int:
        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)  # export_memory_timeline is deprecated
            path = Path(tmp) / "timeline.json"
            prof.export_memory_timeline(str(path), **kwargs)
            _, sizes = json.loads(path.read_text())
        return max((sum(s) for s in sizes), default=0)

    named = peak(device=f"{device.type}:0")
    assert 1 << 20 <= named < 3 << 20, (
        f"the {device.type}:0 memory timeline peaks at {named} bytes, not the 1 MiB allocated there"
    )
    host = peak(device="cpu")
    assert host >= 3 << 20, f"the cpu memory timeline peaks at {host} bytes, not 3 MiB or more"
    default = peak()
    assert default != host, (
        f"export_memory_timeline() without a device exported the cpu timeline (peak {host} "
        f"bytes), not {device.type}:0's ({named}): it must default to the current accelerator"
    )
    assert default == named, (
        f"export_memory_timeline() without a device peaks at {default} bytes, but the "
        f"{device.type}:0 timeline at {named}: it must default to the current accelerator"
    )


def test_jit_trace_checks_the_trace_on_the_device(device):
    module = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()).to(device)
    x = torch.randn(3, 4).to(device)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # torch.jit.trace is deprecated
        warnings.simplefilter("error", torch.jit.TracerWarning)
        traced = torch.jit.trace(module, x)  # check_trace=True compares the two runs
    assert_on_device(traced(x), device, what="traced module output")
    assert_matches_reference(traced(x), module(x).detach(), what="traced vs eager module")


def test_debug_mode_tensor_hashes_match_the_cpu(device):
    try:
        from torch.utils._debug_mode import DebugMode
    except ImportError:
        pytest.skip("not applicable: needs torch.utils._debug_mode.DebugMode")

    def hashed_log(on: torch.device) -> str:
        x = torch.arange(6.0).to(on)
        hashes = DebugMode.log_tensor_hashes(hash_fn=["norm", "hash_tensor"])
        with DebugMode() as debug_mode, hashes:
            torch.view_as_complex((x * 2).reshape(3, 2)).abs().sum()
        return debug_mode.debug_string()

    on_device, on_cpu = hashed_log(device), hashed_log(torch.device("cpu"))
    assert on_device == on_cpu, (
        f"DebugMode tensor hashes on {device}:\n{on_device}\non the cpu:\n{on_cpu}"
    )


def _accelerator_devices(backend) -> list[torch.device]:
    return [backend.device(index) for index in range(min(2, backend.device_count))]


def test_data_parallel_splits_the_batch_over_the_accelerator(backend, device):
    require_accelerator(backend)
    import copy

    generator = torch.Generator().manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
    reference = copy.deepcopy(module)
    x = torch.randn(10, 4, generator=generator)
    devices = _accelerator_devices(backend)
    model = torch.nn.DataParallel(module.to(devices[0]), device_ids=[d.index for d in devices])
    out = model(x.to(devices[0]))
    out.square().sum().backward()
    expected = reference(x)
    expected.square().sum().backward()
    assert_on_device(out, devices[0], what="DataParallel output")
    assert_matches_reference(
        out, expected, what=f"DataParallel over {devices} vs the module on cpu"
    )
    for (name, got), want in zip(module.named_parameters(), reference.parameters(), strict=True):
        assert_matches_reference(got.grad, want.grad, what=f"{name}.grad through DataParallel")


def test_parallel_apply_takes_the_accelerator_devices(backend, device):
    require_accelerator(backend)
    from torch.nn.parallel import parallel_apply

    devices = _accelerator_devices(backend)
    modules = [torch.nn.Linear(4, 3).to(d) for d in devices]
    inputs = [torch.randn(2, 4).to(d) for d in devices]
    outputs = parallel_apply(modules, inputs, devices=devices)  # torch.device objects
    for out, module, inp, target in zip(outputs, modules, inputs, devices, strict=True):
        assert_on_device(out, target, what=f"parallel_apply replica on {target}")
        assert_matches_reference(out, module(inp), what=f"parallel_apply replica on {target}")


def test_parallel_apply_runs_the_replicas_under_autocast(backend, device):
    require_accelerator(backend)
    from torch.nn.parallel import parallel_apply

    dtypes = sorted(backend.capabilities.autocast_dtypes, key=str)
    if not dtypes:
        pytest.skip("not applicable: no autocast_dtypes declared")
    devices = _accelerator_devices(backend)
    modules = [torch.nn.Linear(8, 4).to(d) for d in devices]
    inputs = [torch.randn(3, 8).to(d) for d in devices]
    for dtype in dtypes:
        with torch.autocast(device.type, dtype=dtype):
            outputs = parallel_apply(modules, inputs)
        got = [out.dtype for out in outputs]
        assert got == [dtype] * len(devices), (
            f"parallel_apply under torch.autocast({device.type!r}, dtype={dtype}) gave replica "
            f"outputs of dtype {got} (autocast state not carried into the replica threads)"
        )


def test_paged_attention_without_a_device_uses_the_current_accelerator(backend, device):
    require_accelerator(backend)
    try:
        from torch.nn.attention.experimental._paged_attention import PagedAttention
    except ImportError:
        pytest.skip("not applicable: needs torch >= 2.6 (flex_attention PagedAttention)")
    paged = PagedAttention(n_pages=4, page_size=128, max_batch_size=2)
    for name in ("page_table", "capacity", "physical_to_logical"):
        assert_on_device(getattr(paged, name), device, what=f"PagedAttention().{name}")


def test_profiler_table_sorts_by_the_device_name(backend, device):
    require_accelerator(backend)
    from torch.profiler import ProfilerActivity, profile, supported_activities

    if device.type == torch._C._get_privateuse1_backend_name():
        activity = ProfilerActivity.PrivateUse1
    else:
        activity = getattr(ProfilerActivity, device.type.upper(), None)
    if activity not in supported_activities():
        pytest.skip(f"not applicable: the profiler has no activity for {device.type}")
    x = torch.randn(16, 16, device=device)
    with profile(activities=[ProfilerActivity.CPU, activity]) as prof:
        (x @ x).relu()
    averages = prof.key_averages()
    # The table's columns are named after the device ("Self NEURON"); so is its sort key.
    for prefix in ("self_", ""):
        by_name = averages.table(sort_by=f"{prefix}{device.type}_time_total")
        assert by_name == averages.table(sort_by=f"{prefix}device_time_total"), (
            f"table(sort_by='{prefix}{device.type}_time_total') did not sort by the device time"
        )


def test_loading_a_checkpoint_of_a_missing_device_suggests_the_accelerator(backend, device):
    require_accelerator(backend)
    import io
    from unittest import mock

    import torch.serialization

    if torch.cuda.is_available():
        pytest.skip("not applicable: needs a machine without CUDA (the checkpoint is CUDA's)")
    buffer = io.BytesIO()
    with mock.patch.object(torch.serialization, "location_tag", lambda storage: "cuda:0"):
        torch.save({"weight": torch.arange(4.0)}, buffer)  # as if saved on a CUDA machine
    buffer.seek(0)
    with pytest.raises(RuntimeError) as error:
        torch.load(buffer)
    hint = f"map_location=torch.device('{device.type}')"
    assert hint in str(error.value), (
        f"torch.load of a CUDA checkpoint on a {device.type} machine does not suggest {hint}: "
        f"{error.value}"
    )
    buffer.seek(0)
    loaded = torch.load(buffer, map_location=torch.device(device.type))
    assert_on_device(loaded["weight"], device, what="torch.load(map_location=<accelerator>)")


def test_von_mises_samples_on_the_device(device):
    import math

    from torch.distributions import VonMises

    torch.manual_seed(0)
    loc = torch.tensor([1.0, -2.0], device=device)
    concentration = torch.tensor([4.0, 1e-4], device=device)  # 1e-4: pytorch#88443
    samples = VonMises(loc, concentration).sample((4000,))
    assert_on_device(samples, device, what="VonMises(...).sample()")
    assert samples.dtype == torch.float32, f"VonMises.sample() returned {samples.dtype}"
    samples = samples.cpu()
    assert ((samples >= -math.pi) & (samples < math.pi)).all(), "samples outside [-pi, pi)"
    circular_mean = torch.atan2(samples[:, 0].sin().mean(), samples[:, 0].cos().mean())
    assert abs(circular_mean.item() - 1.0) < 0.05, (
        f"the circular mean of VonMises(loc=1, concentration=4) samples is {circular_mean.item()}"
    )


def test_state_dict_stager_pins_the_staged_tensors(backend, device):
    require_accelerator(backend)
    from torch.distributed.checkpoint._state_dict_stager import StateDictStager

    state_dict = {"weight": torch.randn(8, 8, device=device), "bias": torch.randn(8, device=device)}
    stager = StateDictStager(pin_memory=True, share_memory=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        staged = stager.stage(state_dict)
    pinned = backend.capabilities.pinned_memory
    for name, tensor in staged.items():
        assert tensor.device.type == "cpu", f"StateDictStager staged {name} on {tensor.device}"
        assert_matches_reference(tensor, state_dict[name].cpu(), what=f"staged {name}")
        assert tensor.is_pinned() == pinned, (
            f"StateDictStager(pin_memory=True) staged {name} with is_pinned()={tensor.is_pinned()} "
            f"on a backend whose manifest declares pinned_memory = {str(pinned).lower()}"
            + "".join(f"; warned: {w.message}" for w in caught)
        )
    stager.close()


@pytest.mark.parametrize("kind", ["GRU", "LSTM"])
def test_recurrent_layers_train_like_the_cpu(device, kind):
    # ATen sends every non-CPU device to the fused cells (_thnn_fused_gru_cell /
    # _thnn_fused_lstm_cell), which only CUDA implements in-tree: a backend must provide them.
    torch.manual_seed(0)
    reference = getattr(torch.nn, kind)(6, 8, num_layers=2, batch_first=True)
    module = copy.deepcopy(reference).to(device)
    x = torch.randn(3, 5, 6, generator=torch.Generator().manual_seed(1))
    out, _ = module(x.to(device).requires_grad_())
    expected, _ = reference(x.clone().requires_grad_())
    assert_on_device(out, device, what=f"nn.{kind} output")
    assert_matches_reference(out, expected, what=f"nn.{kind} output on {device} vs cpu")
    out.square().sum().backward()
    expected.square().sum().backward()
    for (name, got), want in zip(module.named_parameters(), reference.parameters(), strict=True):
        assert_matches_reference(got.grad, want.grad, what=f"nn.{kind} {name}.grad on {device}")


# ---- second wave, frontend (patches 0022-0039): fork_rng's advice, TorchTidy's TF32 advice,
# collect_env, dynamo's RNG preservation, multiprocessing's error ----


def test_fork_rng_warning_gives_advice_the_backend_understands(backend, device, monkeypatch):
    require_accelerator(backend)
    if backend.module.device_count() < 2:
        pytest.skip("not applicable: fork_rng() only warns with more than one device")
    monkeypatch.setattr(torch.random, "_fork_rng_warned_already", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.random.fork_rng():
            pass
    messages = [str(w.message) for w in caught if "fork_rng" in str(w.message)]
    assert len(messages) == 1, f"expected one fork_rng() warning, got {messages}"
    message = messages[0]
    assert "device.upper()" not in message, f"fork_rng()'s warning is a broken f-string: {message}"
    variables = set(re.findall(r"\b[A-Za-z]+_VISIBLE_DEVICES\b", message))
    expected = {"CUDA_VISIBLE_DEVICES"} if device.type == "cuda" else set()
    assert variables == expected, (
        f"fork_rng()'s warning on {device.type} names {sorted(variables)}, which "
        f"{device.type} does not read: {message}"
    )
    assert "devices=[0]" in message


def test_profiler_gives_no_cuda_tf32_advice_for_device_matmuls(backend, device):
    require_accelerator(backend)
    if device.type == "cuda":
        pytest.skip("not applicable: the TF32 advice is meant for CUDA matmuls")
    from torch.profiler._pattern_matcher import FP32MatMulPattern

    a = torch.randn(16, 16, generator=torch.Generator().manual_seed(0)).to(device)
    with torch.profiler.profile(record_shapes=True) as prof:
        torch.mm(a, a)
    matched = FP32MatMulPattern(prof).matched_events()
    assert not matched, (
        f"TorchTidy's FP32MatMulPattern matched {len(matched)} {device.type} matmul(s): it "
        "would tell the user to set torch.backends.cuda.matmul.allow_tf32, a cuBLAS setting"
    )


def test_collect_env_reports_the_accelerator(backend, device, monkeypatch):
    require_accelerator(backend)
    from torch.utils import collect_env

    # The package listings run pip and conda; they are not what is checked here.
    monkeypatch.setattr(collect_env, "get_pip_packages", lambda *a, **k: ("pip3", ""))
    monkeypatch.setattr(collect_env, "get_conda_packages", lambda *a, **k: "")
    info = collect_env.get_pretty_env_info()
    assert device.type in info, f"collect_env's report does not mention {device.type}:\n{info}"
    if hasattr(backend.module, "get_device_name"):
        name = backend.module.get_device_name(0)
        assert name in info, f"collect_env's report does not name the device ({name}):\n{info}"


def test_compiling_leaves_the_accelerator_rng_alone(backend, device):
    require_accelerator(backend)
    import torch._dynamo

    def drawing_backend(gm, example_inputs):
        torch.rand(64, device=device)  # what an autotuner does: benchmark on random inputs
        return gm.forward

    torch._dynamo.reset()
    try:
        torch.manual_seed(0)
        expected = torch.rand(8, device=device).cpu()
        torch.manual_seed(0)
        compiled = torch.compile(lambda x: x * 2 + 1, backend=drawing_backend, fullgraph=True)
        compiled(torch.ones(4, device=device))
        got = torch.rand(8, device=device).cpu()
    finally:
        torch._dynamo.reset()
    assert torch.equal(got, expected), (
        f"compiling advanced the {device.type} generator: a seeded draw after the first call "
        "of a compiled function differs from the same draw without compiling"
    )


def test_sending_a_device_tensor_to_another_process_names_the_device(backend, device):
    """A device tensor pickled for another process (what a multiprocessing Queue does in its
    feeder thread) either arrives as the same tensor on the same device (the backend shares
    tensors between processes, as CUDA does through IPC) or fails at once with an error that
    names the device and says to send tensor.cpu()."""
    require_accelerator(backend)
    if device.type == "cuda":
        pytest.skip("not applicable: torch.multiprocessing shares CUDA tensors (CUDA IPC)")
    import io
    import pickle
    from multiprocessing.reduction import ForkingPickler

    import torch.multiprocessing  # registers torch's reductions

    t = torch.arange(3.0, device=device)
    buffer = io.BytesIO()
    try:
        ForkingPickler(buffer).dump(t)
    except RuntimeError as error:
        message = str(error)
        assert device.type in message and "cpu()" in message, (
            f"pickling a {device.type} tensor for another process (what a multiprocessing Queue "
            f"does in its feeder thread, leaving the consumer waiting) fails with: {message!r}; "
            "the error must name the device and say to send tensor.cpu()"
        )
        return
    received = pickle.loads(buffer.getvalue())
    assert received.device == t.device and torch.equal(received.cpu(), t.cpu()), (
        f"a {device.type} tensor pickled for another process arrived as {received!r} on "
        f"{received.device}, not as the same values on {t.device}"
    )


def test_memory_timeline_html_titles_the_device_peak(backend, device):
    require_accelerator(backend)
    pytest.importorskip("matplotlib", reason="the HTML memory timeline needs matplotlib")
    import tempfile
    from pathlib import Path
    from unittest import mock

    import matplotlib.axes
    from torch.profiler import ProfilerActivity, profile

    with profile(
        activities=[ProfilerActivity.CPU], record_shapes=True, profile_memory=True, with_stack=True
    ) as prof:
        x = torch.ones(8 << 20, device=device)  # 32 MiB: 0.03 GiB in the title
        y = x * 2
        del x, y
    titles: list[str] = []
    set_title = matplotlib.axes.Axes.set_title

    def record_title(axes, label, *args, **kwargs):
        titles.append(label)
        return set_title(axes, label, *args, **kwargs)

    with (
        tempfile.TemporaryDirectory() as tmp,
        mock.patch.object(matplotlib.axes.Axes, "set_title", record_title),
        warnings.catch_warnings(),
    ):
        warnings.simplefilter("ignore", FutureWarning)  # export_memory_timeline is deprecated
        prof.export_memory_timeline(str(Path(tmp) / "timeline.html"), device=f"{device.type}:0")
    figures = re.findall(r"([0-9.]+) GiB", titles[-1])
    assert figures and float(figures[0]) >= 0.03, (
        f"the {device.type}:0 HTML memory timeline, after 32 MiB were allocated there, is "
        f"titled {titles[-1]!r}: not the device's peak"
    )


def test_compiling_leaves_the_matmul_precision_alone(backend, device):
    require_accelerator(backend)
    import torch._dynamo

    def tuning_backend(gm, example_inputs):
        # What a backend trying lower precisions while compiling does: set oneDNN's float32
        # matmul precision (the CPU's and XPU's matmuls follow it).
        torch._C._set_fp32_precision_setter("mkldnn", "matmul", "bf16")
        return gm.forward

    before = torch._C._get_fp32_precision_getter("mkldnn", "matmul")
    torch._dynamo.reset()
    try:
        compiled = torch.compile(lambda x: x * 2 + 1, backend=tuning_backend, fullgraph=True)
        compiled(torch.ones(4, device=device))
        after = torch._C._get_fp32_precision_getter("mkldnn", "matmul")
    finally:
        torch._C._set_fp32_precision_setter("mkldnn", "matmul", before)
        torch._dynamo.reset()
    assert after == before, (
        f"compiling a {device.type} function changed oneDNN's float32 matmul precision from "
        f"{before!r} to {after!r}: every later eager matmul runs at the backend's precision"
    )


def test_compiled_synchronize_waits_for_the_current_device(backend, device, monkeypatch):
    require_accelerator(backend)
    require_devices(backend, 2)
    import torch._dynamo

    # What the runtime is asked to synchronize, after the compiled graph's op has resolved the
    # device: recorded on the way to the real synchronization.
    synchronized: list[int] = []
    real = torch._C._accelerator_synchronizeDevice

    def record(index: int) -> None:
        synchronized.append(index)
        real(index)

    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        torch.accelerator.synchronize()
        return y + 1

    previous = torch.accelerator.current_device_index()
    torch._dynamo.reset()
    try:
        torch.accelerator.set_device_index(1)
        x = torch.ones(4, device=backend.device(1))
        monkeypatch.setattr(torch._C, "_accelerator_synchronizeDevice", record)
        out = torch.compile(fn, backend="eager", fullgraph=True)(x)
    finally:
        monkeypatch.undo()
        torch.accelerator.set_device_index(previous)
        torch._dynamo.reset()
    assert torch.equal(out.cpu(), torch.full((4,), 3.0))
    assert synchronized == [1], (
        f"after set_device_index(1), a compiled torch.accelerator.synchronize() synchronized "
        f"{device.type} device(s) {synchronized}; eager mode synchronizes the current device, 1"
    )


def test_tensor_device_method_passes_non_blocking_to_torch_function(backend, device):
    require_accelerator(backend)
    move = getattr(torch.Tensor, device.type, None)
    if move is None:
        pytest.skip(f"not applicable: torch.Tensor has no .{device.type}() method")
    seen: list[dict] = []

    class Recording(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func is move:
                seen.append(dict(kwargs or {}))
            with torch._C.DisableTorchFunctionSubclass():
                return func(*args, **(kwargs or {}))

    x = torch.ones(4).pin_memory().as_subclass(Recording)
    y = getattr(x, device.type)(non_blocking=True)
    assert y.device.type == device.type
    assert [kwargs.get("non_blocking") for kwargs in seen] == [True], (
        f"tensor.{device.type}(non_blocking=True) of a tensor subclass reached its "
        f"__torch_function__ with {seen}: the subclass never sees non_blocking=True (and the "
        "copy is synchronous), as it does for tensor.cuda(non_blocking=True)"
    )
