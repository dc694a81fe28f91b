"""The ``neuron`` backend of torch.distributed: gloo over neuron tensors' own memory.

Each scenario runs tests/neuron_distributed_worker.py on 2 processes x neuron, launched by
torchrun on the loopback interface (127.0.0.1, a free port, GLOO_SOCKET_IFNAME=lo); the worker
compares every result with the same collective on CPU tensors over gloo and checks that results
land in the neuron tensors' own memory. The zero-copy alias itself is checked in this process.
"""

from __future__ import annotations

import gc
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

WORKER = Path(__file__).with_name("neuron_distributed_worker.py")
LAUNCH_TIMEOUT_S = 240


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun(scenario: str) -> None:
    env = dict(os.environ, GLOO_SOCKET_IFNAME="lo", OMP_NUM_THREADS="1")
    env.pop("NEURON_RT_VISIBLE_CORES", None)  # the default: 2 devices, one per rank
    command = [
        sys.executable, "-m", "torch.distributed.run",
        "--nnodes", "1", "--nproc-per-node", "2",
        "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
        str(WORKER), scenario,
    ]  # fmt: skip
    result = subprocess.run(
        command, env=env, capture_output=True, text=True, timeout=LAUNCH_TIMEOUT_S
    )
    passed = {line for line in result.stdout.splitlines() if line.startswith("PASS ")}
    assert result.returncode == 0 and passed == {f"PASS {scenario} 0", f"PASS {scenario} 1"}, (
        f"torchrun {scenario} exited {result.returncode}\n"
        f"stdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-8000:]}"
    )


def test_neuron_backend_is_registered_for_neuron_tensors() -> None:
    assert "neuron" in dist.Backend.backend_list
    assert dist.Backend.default_device_backend_map["neuron"] == "neuron"
    assert dist.Backend.default_device_backend_map["cpu"] == "gloo"
    assert set(dist.Backend.backend_capability["neuron"]) == {"cpu", "neuron"}


def test_host_alias_is_the_neuron_tensors_memory_and_keeps_it_alive() -> None:
    from device_agnostic.neuron import _C

    base = torch.arange(12.0, device="neuron").reshape(3, 4)
    view = base[1:, 1:3]
    alias = _C._process_group_host_alias(view)
    assert alias.device.type == "cpu"
    assert alias.data_ptr() == view.data_ptr()
    assert (alias.shape, alias.stride()) == (view.shape, view.stride())
    alias.add_(100)  # a write through the alias is a write to the neuron tensor
    assert torch.equal(view.cpu(), alias)
    gc.collect()  # garbage of earlier tests in this process must not be freed between readings
    allocated = torch.neuron.memory_allocated()
    del base, view
    gc.collect()
    assert torch.neuron.memory_allocated() == allocated, "the alias let its storage go"
    assert alias.tolist() == [[105.0, 106.0], [109.0, 110.0]]
    del alias
    assert torch.neuron.memory_allocated() < allocated


def test_host_alias_refuses_other_devices_by_name() -> None:
    from device_agnostic.neuron import _C

    cpu = torch.ones(2)
    assert _C._process_group_host_alias(cpu) is not None
    with pytest.raises(RuntimeError, match="neuron process group .* lazy conj"):
        _C._process_group_host_alias(torch.ones(2, dtype=torch.complex64, device="neuron").conj())


def test_collectives_match_gloo_on_cpu_and_write_in_place() -> None:
    torchrun("collectives")


@pytest.mark.parametrize("spelling", ["name", "device-map", "device_id"])
def test_init_process_group_gives_neuron_tensors_the_neuron_backend(spelling: str) -> None:
    torchrun(f"init:{spelling}")


def test_ddp_training_on_neuron_matches_cpu_gloo() -> None:
    torchrun("ddp")


def test_dtensor_and_fsdp2_training_on_neuron_match_cpu_gloo() -> None:
    torchrun("dtensor_fsdp2")
