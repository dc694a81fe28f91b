"""Distributed: torch.distributed features that must work on any accelerator without the user
naming it: DTensor random operators, the "fake" process group, a collective backend registered
without a device list, PowerSGD's gradient compression hooks, the RNG-sync debugging check,
torchrun's ``--nproc-per-node``.

Each test runs in one process (a one-rank group, or a "fake" group of several ranks) and is
written against the documented, device-generic behaviour; where stock torch still assumes CUDA,
the backend's manifest lists the test as a known failure naming the torch code at fault and the
patch of the series that fixes it (``fixed_by``), as in the integration area.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import ExitStack
from unittest import mock

import pytest
import torch
import torch.nn.functional as F

from .assertions import assert_matches_reference, assert_on_device
from .requirements import require_accelerator


@pytest.fixture
def dist(backend) -> Iterator:
    """torch.distributed, with any process group a test leaves behind destroyed."""
    require_accelerator(backend)
    if not torch.distributed.is_available():
        pytest.skip("not applicable: torch.distributed is not available")
    import torch.distributed as dist

    yield dist
    if dist.is_initialized():
        dist.destroy_process_group()


def _fake_store():
    from torch.testing._internal.distributed.fake_pg import FakeStore

    return FakeStore()


def test_dtensor_dropout_runs_on_the_device(dist, device):
    import torch.distributed.tensor._random as dtensor_random
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, distribute_tensor

    dist.init_process_group(
        f"cpu:fake,{device.type}:fake", rank=0, world_size=1, store=_fake_store()
    )
    saved_tracker, dtensor_random._rng_tracker = dtensor_random._rng_tracker, None
    try:
        mesh = init_device_mesh(device.type, (1,))
        x = torch.ones(8, 8, device=device)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "may not have complete support"
            torch.manual_seed(0)
            y = F.dropout(distribute_tensor(x, mesh, [Replicate()]), 0.5).to_local()
    finally:
        dtensor_random._rng_tracker = saved_tracker
    torch.manual_seed(0)
    assert_on_device(y, device, what="DTensor dropout")
    assert_matches_reference(y.cpu(), F.dropout(x, 0.5).cpu(), what="DTensor dropout")


def test_fake_process_group_serves_the_device(dist, device):
    dist.init_process_group("fake", rank=0, world_size=2, store=_fake_store())
    tensor = torch.ones(4, device=device)
    dist.all_reduce(tensor)
    dist.broadcast(tensor, src=0)
    assert_on_device(tensor, device, what="all_reduce over the fake process group")


def test_backend_registered_without_devices_serves_the_device(dist, device):
    from torch.testing._internal.distributed.fake_pg import _create_fake_pg

    name = "conformance_no_device_list"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Device capability of ... unspecified"
        dist.Backend.register_backend(name, _create_fake_pg, extended_api=True)
    try:
        assert device.type in dist.Backend.backend_capability[name], (
            f"register_backend without devices assumed "
            f"{dist.Backend.backend_capability[name]}, not the current accelerator"
        )
        dist.init_process_group(name, rank=0, world_size=2, store=_fake_store())
        tensor = torch.ones(4, device=device)
        dist.all_reduce(tensor)
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
        dist.Backend.backend_list.remove(name)
        dist.Backend.backend_capability.pop(name, None)
        dist.Backend.backend_type_map.pop(name, None)
        dist.Backend._plugins.pop(name.upper(), None)
        delattr(dist.Backend, name.upper())


def test_powerSGD_synchronizes_the_device(dist, device):
    # (batched_powerSGD_hook fails earlier on every device: _orthogonalize asserts a batch.)
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
    from torch.nn.parallel import DistributedDataParallel

    backend = f"cpu:gloo,{device.type}:{dist.get_default_backend_for_device(device)}"
    dist.init_process_group(backend, rank=0, world_size=1, store=dist.HashStore())
    torch.manual_seed(0)
    model = DistributedDataParallel(torch.nn.Linear(64, 64).to(device))
    state = powerSGD.PowerSGDState(
        process_group=None, matrix_approximation_rank=1, start_powerSGD_iter=2
    )
    model.register_comm_hook(state, powerSGD.powerSGD_hook)
    synchronized = []

    def spy(real):
        def synchronize(target=None):
            synchronized.append(torch.device(target).type)
            return real(target)

        return synchronize

    with ExitStack() as stack:
        stack.enter_context(
            mock.patch.object(torch.accelerator, "synchronize", spy(torch.accelerator.synchronize))
        )
        if device.type == "cuda":  # stock torch synchronizes CUDA through torch.cuda
            stack.enter_context(
                mock.patch.object(torch.cuda, "synchronize", spy(torch.cuda.synchronize))
            )
        for _ in range(4):
            model(torch.randn(8, 64, device=device)).sum().backward()
    assert synchronized and set(synchronized) == {device.type}, (
        f"powerSGD_hook synchronized {synchronized} after decompressing {device.type} gradients"
    )
    assert torch.isfinite(model.module.weight.grad).all()


def test_check_rng_sync_takes_the_device_generator(dist, device):
    from torch.distributed.collective_utils import _check_rng_sync

    dist.init_process_group("gloo", rank=0, world_size=1, store=dist.HashStore())
    generator = torch.Generator(device=device).manual_seed(1234)
    assert _check_rng_sync(generator, dist.group.WORLD) is None


def test_torchrun_nproc_per_node_gpu_points_to_auto(backend, device):
    require_accelerator(backend)
    if device.type == "cuda":
        pytest.skip("not applicable: --nproc-per-node=gpu counts CUDA devices")
    from torch.distributed.run import determine_local_world_size

    with pytest.raises(ValueError) as raised:
        determine_local_world_size("gpu")
    assert "--nproc-per-node=auto" in str(raised.value), (
        f"torchrun --nproc-per-node=gpu on {device.type} says {str(raised.value)!r}, "
        "not what to pass instead"
    )
    assert determine_local_world_size("auto") == torch.accelerator.device_count()
