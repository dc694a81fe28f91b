"""torch.distributed: the backend's process group (the one torch.distributed registers for its
device type: nccl for cuda, xccl for xpu, gloo for the CPU, a vendor's own) gives, on 2 real
processes, the results of gloo on CPU tensors for each collective, and DDP and FSDP2
(``fully_shard``) training steps give the parameters of one process training on every rank's
batch.

The two ranks are launched once for the module (conformance/_distributed_worker.py, on
127.0.0.1 and a free port); each test reads its scenario's verdict from both ranks.

The second half holds torch.distributed features that must work on any accelerator without the
user naming it: DTensor random operators (also under LocalTensorMode), the "fake" process group,
a collective backend registered without a device list, PowerSGD's gradient compression hooks,
the RNG-sync debugging check, torchrun's ``--nproc-per-node`` and ``--virtual-local-rank``, the
runtime estimator's operator benchmark, pinned CPU state dicts for checkpoint staging. Each runs
in one process (a one-rank group, or a "fake" group of several ranks) against the documented,
device-generic behaviour; where stock torch still assumes CUDA, the backend's manifest lists the
test as a known failure naming the torch code at fault and the patch of the series that fixes it
(``fixed_by``), as in the integration area.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import subprocess
import sys
import warnings
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from unittest import mock

import pytest
import torch
import torch.nn.functional as F

from . import _distributed_worker as worker
from .assertions import assert_matches_reference, assert_on_device
from .backend import Backend
from .isolation import _plugin_arguments
from .plugin import PROFILES
from .requirements import require, require_accelerator

WORLD_SIZE = 2
# The ranks' share of the first scenario's test timeout (the launch runs in its setup, which
# pytest-timeout counts): a launch that takes longer ends as a timeout of its own, reported as
# one, instead of the test being killed with the ranks still running.
LAUNCH_SHARE = 0.8
TIMED_OUT = "did not finish in"


def launch_timeout(config: pytest.Config) -> float:
    """Seconds the two ranks may take: LAUNCH_SHARE of the test timeout (--timeout, else the
    profile's)."""
    explicit = config.getoption("timeout", None)
    limit = float(explicit) if explicit else PROFILES[config.getoption("conformance_profile")][1]
    return LAUNCH_SHARE * limit if limit > 0 else 3600.0


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _launch(
    backend: Backend, plugins: list[str], out: Path, timeout: float
) -> dict[int, dict | str]:
    """Run both ranks to completion; {rank: its verdicts, or why it wrote none}."""
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    env[worker.PLUGINS_ENV] = ",".join(plugins)
    # The ranks import this package as the test process does (an installed copy, or a checkout).
    package_parent = str(Path(worker.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_parent, env.get("PYTHONPATH")]))
    port = str(_free_port())
    command = [sys.executable, "-m", "conformance._distributed_worker", backend.name]
    processes = [
        subprocess.Popen(
            [*command, str(rank), str(WORLD_SIZE), port, str(out)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(WORLD_SIZE)
    ]
    outputs = {}
    for rank, process in enumerate(processes):
        try:
            outputs[rank] = process.communicate(timeout=timeout)[0]
        except subprocess.TimeoutExpired:
            for other in processes:
                other.kill()
            outputs[rank] = f"{TIMED_OUT} {timeout:.0f}s"
    verdicts: dict[int, dict | str] = {}
    for rank in range(WORLD_SIZE):
        path = out / f"rank{rank}.json"
        if path.exists():
            verdicts[rank] = json.loads(path.read_text())
        else:
            code = processes[rank].returncode
            verdicts[rank] = f"rank {rank} wrote no result (exit {code}):\n{outputs[rank][-3000:]}"
    return verdicts


@pytest.fixture(scope="module")
def verdicts(
    backend: Backend, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[int, dict | str]:
    """Both ranks' verdicts, from one launch for the whole module."""
    require(backend, "distributed")
    if not backend.is_cpu and backend.device_count < WORLD_SIZE:
        pytest.skip(
            f"not applicable: {WORLD_SIZE} ranks need {WORLD_SIZE} devices, {backend.name} has "
            f"{backend.device_count}"
        )
    plugins = _plugin_arguments(request.config)[1::2]
    # With pytest-xdist the module's tests are spread over the workers, each with this fixture:
    # the first worker launches the ranks, the others wait for its verdicts (the workers of one
    # run share the parent of their temporary directories; a run without xdist has its own).
    # Only a process that is itself an xdist worker shares (the environment variable
    # PYTEST_XDIST_WORKER is inherited by a pytest run started from a worker's test, whose
    # basetemp's parent is every run's). The run's uid keeps runs apart.
    base = tmp_path_factory.getbasetemp()
    workerinput = getattr(request.config, "workerinput", None)
    shared, run = (base.parent, workerinput["testrunuid"]) if workerinput else (base, "solo")
    verdicts_file = shared / f"conformance-distributed-{backend.name}-{run}.json"
    with open(shared / f"conformance-distributed-{backend.name}-{run}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not verdicts_file.exists():
            launched = _launch(
                backend,
                plugins,
                tmp_path_factory.mktemp("distributed"),
                launch_timeout(request.config),
            )
            verdicts_file.write_text(json.dumps({str(k): v for k, v in launched.items()}))
    return {int(rank): verdict for rank, verdict in json.loads(verdicts_file.read_text()).items()}


@pytest.mark.parametrize("scenario", worker.SCENARIOS)
def test_scenario_matches_gloo_on_cpu(verdicts, backend, scenario, pytestconfig):
    late = [v for v in verdicts.values() if isinstance(v, str) and TIMED_OUT in v]
    if late:  # the launch's own timeout: a timeout, not a verdict on the scenario
        pytest.fail(
            f"Timeout: the {WORLD_SIZE} ranks' launch {TIMED_OUT} "
            f"{launch_timeout(pytestconfig):.0f} s ({LAUNCH_SHARE:.0%} of the test timeout)"
        )
    problems = []
    for rank, verdict in sorted(verdicts.items()):
        if isinstance(verdict, str):
            problems.append(verdict)
        elif scenario not in verdict:
            problems.append(f"rank {rank} did not reach {scenario}")
        elif verdict[scenario] is not None:
            problems.append(f"rank {rank}: {verdict[scenario]}")
    assert not problems, (
        f"{scenario} on {backend.name}'s process group, 2 processes:\n" + "\n".join(problems)
    )


# Device-generic features (single process)


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


def test_dtensor_dropout_under_local_tensor_mode_runs_on_the_device(dist, device):
    from torch.distributed._local_tensor import LocalTensorMode
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    # LocalTensorMode simulates 4 ranks in this process; it sets each rank's RNG states around
    # every operator, also while DTensor's sharding propagation runs it under a FakeTensorMode.
    dist.init_process_group(
        f"cpu:fake,{device.type}:fake", rank=0, world_size=4, store=_fake_store()
    )
    with LocalTensorMode(4), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "may not have complete support"
        mesh = init_device_mesh(device.type, (4,))
        dtensor = distribute_tensor(torch.ones(8, 8, device=device), mesh, [Shard(0)])
        y = F.dropout(dtensor, 0.5).full_tensor()
    values = set(y.cpu().flatten().tolist())
    assert values <= {0.0, 2.0}, f"dropout(ones, 0.5) under LocalTensorMode gave values {values}"


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


def test_powerSGD_synchronizes_the_device(backend, dist, device):
    # (batched_powerSGD_hook fails earlier on every device: _orthogonalize asserts a batch.)
    # DDP needs the device's own process group: nothing to test without one.
    require(backend, "distributed")
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


def test_runtime_estimator_benchmarks_the_operator_on_the_device(backend, device):
    require_accelerator(backend)
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.distributed._tools.runtime_estimator import RuntimeEstimator

    # The benchmark runs the operator on real tensors of the fake tensors' device and times it
    # there: an estimate of 0 or an error means it timed (or tried to time) another device.
    with FakeTensorMode():
        a = torch.randn(256, 256, device=device)
        b = torch.randn(256, 256, device=device)
        estimator = RuntimeEstimator()
        with estimator("operator-level-benchmark"):
            torch.mm(a, b)
    assert estimator.total_runtime > 0, (
        f"RuntimeEstimator's benchmark of a {device.type} matmul estimated "
        f"{estimator.total_runtime} ms"
    )


@pytest.mark.parametrize("share_memory", [False, True], ids=["unshared", "shared"])
def test_cpu_state_dict_pins_where_the_device_can(backend, device, share_memory):
    require_accelerator(backend)
    from torch.distributed._state_dict_utils import _create_cpu_state_dict

    state_dict = {"weight": torch.randn(8, 8, device=device)}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cpu_state_dict = _create_cpu_state_dict(
            state_dict, pin_memory=True, share_memory=share_memory
        )
    tensor = cpu_state_dict["weight"]
    assert tensor.device.type == "cpu" and tensor.shape == (8, 8)
    assert tensor.is_shared() == share_memory
    # Only CUDA can pin memory after allocation (cudaHostRegister), which shared memory needs;
    # unshared memory is pinned through the accelerator's host allocator.
    pinned = backend.capabilities.pinned_memory and (device.type == "cuda" or not share_memory)
    assert tensor.is_pinned() == pinned, (
        f"_create_cpu_state_dict(pin_memory=True, share_memory={share_memory}) of a "
        f"{device.type} tensor gave is_pinned()={tensor.is_pinned()}"
        + "".join(f"; warned: {w.message}" for w in caught)
    )


def test_virtual_local_rank_refuses_a_device_that_ignores_cuda_visible_devices(
    backend, device, tmp_path
):
    require_accelerator(backend)
    if device.type == "cuda":
        pytest.skip("not applicable: CUDA reads CUDA_VISIBLE_DEVICES")
    from torch.distributed.elastic.agent.server.api import WorkerSpec
    from torch.distributed.elastic.agent.server.local_elastic_agent import LocalElasticAgent
    from torch.distributed.elastic.multiprocessing import DefaultLogsSpecs

    # --virtual-local-rank tells every worker it is LOCAL_RANK 0 and hides the other devices
    # through CUDA_VISIBLE_DEVICES; a device that does not read it would put every worker on
    # device 0, so the agent must refuse.
    spec = WorkerSpec(
        role="trainer",
        local_world_size=2,
        rdzv_handler=mock.Mock(),
        entrypoint="python",
        args=("-c", "pass"),
        virtual_local_rank=True,
    )
    agent = LocalElasticAgent(spec, logs_specs=DefaultLogsSpecs(log_dir=str(tmp_path)))
    worker_env: dict[str, str | None] = {}
    with pytest.raises(ValueError) as raised:
        agent._set_local_rank_env(worker_env, 1, spec)
    assert device.type in str(raised.value), (
        f"--virtual-local-rank on {device.type} refused with {str(raised.value)!r}, "
        "which does not name the device"
    )
