"""One rank of tests/test_neuron_distributed.py, launched by torchrun on the loopback interface.

    torchrun --nproc-per-node 2 --master-addr 127.0.0.1 --master-port PORT \
        tests/neuron_distributed_worker.py SCENARIO

Each rank uses neuron:LOCAL_RANK. Every check compares the neuron backend's result with the same
collective on CPU tensors over a gloo group; a failed check raises, and torchrun then exits
non-zero with the rank's traceback on stderr. A rank that passes prints "PASS <scenario> <rank>".
"""

from __future__ import annotations

import os
import sys

import torch
import torch.distributed as dist


def fail(message: str) -> None:
    raise AssertionError(f"rank {dist.get_rank()}: {message}")


def assert_same(name: str, neuron: torch.Tensor, cpu: torch.Tensor) -> None:
    if neuron.device.type != "neuron":
        fail(f"{name}: the result is on {neuron.device}, not on neuron")
    if not torch.equal(neuron.cpu(), cpu):
        fail(f"{name}: neuron gave {neuron.cpu().tolist()}, CPU/gloo gave {cpu.tolist()}")


class ZeroCopy:
    """Asserts that a collective wrote into its output's own memory and allocated nothing."""

    def __init__(self, name: str, *outputs: torch.Tensor) -> None:
        self.name = name
        self.outputs = outputs

    def __enter__(self) -> ZeroCopy:
        self.pointers = [t.data_ptr() for t in self.outputs]
        # The cumulative count of allocations, not the bytes allocated: gloo's worker thread may
        # drop an earlier collective's tensors at any moment, so bytes can fall inside the block
        # (seen in CI: 7168 -> 5632 when the previous all_gather's outputs were released).
        self.allocations = self._allocations()
        return self

    def _allocations(self) -> int:
        return torch.neuron.memory_stats(self.outputs[0].device)["allocation.all.allocated"]

    def __exit__(self, *exc: object) -> None:
        if exc[0] is not None:
            return
        if [t.data_ptr() for t in self.outputs] != self.pointers:
            fail(f"{self.name}: the output moved to other memory")
        allocations = self._allocations() - self.allocations
        if allocations:
            fail(f"{self.name}: allocated device memory {allocations} time(s)")


def data(rank: int, *shape: int, offset: int = 0) -> torch.Tensor:
    """Distinct, exactly representable values per rank (sums and averages compare exactly)."""
    count = 1
    for size in shape:
        count *= size
    return (torch.arange(count, dtype=torch.float32) + 100 * rank + offset).reshape(shape)


def collectives(device: torch.device) -> None:
    rank, world = dist.get_rank(), dist.get_world_size()
    cpu_group = dist.new_group(backend="gloo")
    if dist.get_backend() != "neuron":
        fail(f"the default group's backend is {dist.get_backend()!r}")

    # all_reduce, every reduce op; in place, zero-copy.
    for op in (dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MAX, dist.ReduceOp.MIN):
        cpu = data(rank, 4, 3)
        neuron = cpu.to(device)
        with ZeroCopy(f"all_reduce {op}", neuron):
            dist.all_reduce(neuron, op=op)
        dist.all_reduce(cpu, op=op, group=cpu_group)
        assert_same(f"all_reduce {op}", neuron, cpu)

    # async: a Work with wait(), result() and a future whose value is the neuron tensor.
    cpu = data(rank, 1000)
    neuron = cpu.to(device)
    work = dist.all_reduce(neuron, async_op=True)
    dist.all_reduce(cpu, group=cpu_group)
    work.wait()
    if not work.is_completed() or not work.is_success():
        fail("an all_reduce work is not completed/successful after wait()")
    if work.result()[0].data_ptr() != neuron.data_ptr():
        fail("work.result() is not the neuron tensor")
    future_value = work.get_future().wait()[0]
    if future_value.device != device or future_value.data_ptr() != neuron.data_ptr():
        fail(f"the future's value is {future_value.device}, not the neuron tensor")
    assert_same("async all_reduce", neuron, cpu)

    # broadcast from each rank.
    for src in range(world):
        cpu = data(rank, 5)
        neuron = cpu.to(device)
        with ZeroCopy("broadcast", neuron):
            dist.broadcast(neuron, src=src)
        dist.broadcast(cpu, src=src, group=cpu_group)
        assert_same(f"broadcast from {src}", neuron, cpu)

    # reduce to rank 1.
    cpu = data(rank, 6)
    neuron = cpu.to(device)
    dist.reduce(neuron, dst=1)
    dist.reduce(cpu, dst=1, group=cpu_group)
    assert_same("reduce", neuron, cpu)

    # all_gather (a list) and all_gather_into_tensor.
    cpu_in = data(rank, 3, 2)
    cpu_out = [torch.zeros(3, 2) for _ in range(world)]
    neuron_out = [t.to(device) for t in cpu_out]
    neuron_in = cpu_in.to(device)
    with ZeroCopy("all_gather", *neuron_out):
        dist.all_gather(neuron_out, neuron_in)
    dist.all_gather(cpu_out, cpu_in, group=cpu_group)
    for index in range(world):
        assert_same("all_gather", neuron_out[index], cpu_out[index])
    cpu_out = torch.zeros(world * 3, 2)
    neuron_out = cpu_out.to(device)
    neuron_in = cpu_in.to(device)
    with ZeroCopy("all_gather_into_tensor", neuron_out, neuron_in):
        dist.all_gather_into_tensor(neuron_out, neuron_in)
    dist.all_gather_into_tensor(cpu_out, cpu_in, group=cpu_group)
    assert_same("all_gather_into_tensor", neuron_out, cpu_out)

    # reduce_scatter (a list) and reduce_scatter_tensor.
    cpu_list = [data(rank, 4, offset=10 * i) for i in range(world)]
    cpu_out = torch.zeros(4)
    neuron_out = cpu_out.to(device)
    dist.reduce_scatter(neuron_out, [t.to(device) for t in cpu_list])
    dist.reduce_scatter(cpu_out, cpu_list, group=cpu_group)
    assert_same("reduce_scatter", neuron_out, cpu_out)
    cpu_in = data(rank, world * 4)
    cpu_out = torch.zeros(4)
    neuron_in, neuron_out = cpu_in.to(device), cpu_out.to(device)
    with ZeroCopy("reduce_scatter_tensor", neuron_out, neuron_in):
        dist.reduce_scatter_tensor(neuron_out, neuron_in)
    dist.reduce_scatter_tensor(cpu_out, cpu_in, group=cpu_group)
    assert_same("reduce_scatter_tensor", neuron_out, cpu_out)

    # all_to_all_single (even and uneven splits) and all_to_all (lists).
    cpu_in = data(rank, world * 2)
    cpu_out = torch.zeros(world * 2)
    neuron_in, neuron_out = cpu_in.to(device), cpu_out.to(device)
    with ZeroCopy("all_to_all_single", neuron_out, neuron_in):
        dist.all_to_all_single(neuron_out, neuron_in)
    dist.all_to_all_single(cpu_out, cpu_in, group=cpu_group)
    assert_same("all_to_all_single", neuron_out, cpu_out)
    in_splits = [1, 3] if rank == 0 else [2, 2]
    out_splits = [1, 2] if rank == 0 else [3, 2]
    cpu_in, cpu_out = data(rank, 4), torch.zeros(sum(out_splits))
    neuron_out = cpu_out.to(device)
    dist.all_to_all_single(neuron_out, cpu_in.to(device), out_splits, in_splits)
    dist.all_to_all_single(cpu_out, cpu_in, out_splits, in_splits, group=cpu_group)
    assert_same("all_to_all_single (uneven)", neuron_out, cpu_out)
    cpu_in = [data(rank, 2, offset=10 * i) for i in range(world)]
    cpu_out = [torch.zeros(2) for _ in range(world)]
    neuron_out = [t.to(device) for t in cpu_out]
    dist.all_to_all(neuron_out, [t.to(device) for t in cpu_in])
    dist.all_to_all(cpu_out, cpu_in, group=cpu_group)
    for index in range(world):
        assert_same("all_to_all", neuron_out[index], cpu_out[index])

    # gather and scatter to/from rank 0.
    cpu_in = data(rank, 3)
    cpu_gathered = [torch.zeros(3) for _ in range(world)] if rank == 0 else None
    neuron_gathered = [t.to(device) for t in cpu_gathered] if rank == 0 else None
    dist.gather(cpu_in.to(device), neuron_gathered, dst=0)
    dist.gather(cpu_in, cpu_gathered, dst=0, group=cpu_group)
    if rank == 0:
        for index in range(world):
            assert_same("gather", neuron_gathered[index], cpu_gathered[index])
    cpu_chunks = [data(0, 3, offset=10 * i) for i in range(world)] if rank == 0 else None
    cpu_out = torch.zeros(3)
    neuron_out = cpu_out.to(device)
    neuron_chunks = [t.to(device) for t in cpu_chunks] if rank == 0 else None
    dist.scatter(neuron_out, neuron_chunks, src=0)
    dist.scatter(cpu_out, cpu_chunks, src=0, group=cpu_group)
    assert_same("scatter", neuron_out, cpu_out)

    # send/recv, blocking and isend/irecv, both directions.
    for src in range(world):
        dst = 1 - src
        payload = data(src, 7)
        if rank == src:
            dist.send(payload.to(device), dst=dst)
            dist.isend(payload.to(device) * 2, dst=dst).wait()
        else:
            received = torch.zeros(7, device=device)
            with ZeroCopy("recv", received):
                dist.recv(received, src=src)
            assert_same("send/recv", received, payload)
            work = dist.irecv(received, src=src)
            work.wait()
            assert_same("isend/irecv", received, payload * 2)

    # barrier, and the object collectives (CPU tensors through the same group).
    dist.barrier()
    objects = [None] * world
    dist.all_gather_object(objects, {"rank": rank})
    if objects != [{"rank": r} for r in range(world)]:
        fail(f"all_gather_object gave {objects}")

    # bfloat16 and int64 move as they are.
    for dtype in (torch.bfloat16, torch.int64, torch.uint8):
        cpu = data(rank, 8).to(dtype)
        neuron = cpu.to(device)
        dist.all_reduce(neuron)
        dist.all_reduce(cpu, group=cpu_group)
        assert_same(f"all_reduce {dtype}", neuron, cpu)


def init_spellings(device: torch.device, spelling: str) -> None:
    """The ways to get the neuron backend for neuron tensors."""
    if spelling == "name":
        dist.init_process_group("neuron")
    elif spelling == "device-map":
        dist.init_process_group("cpu:gloo,neuron:neuron")
    elif spelling == "device_id":
        dist.init_process_group(device_id=device)
    else:
        raise ValueError(spelling)
    group = dist.group.WORLD
    backend = group._get_backend(device)
    if backend.name() != "neuron":
        fail(f"{spelling}: neuron tensors go to {backend.name()!r}")
    if spelling == "device-map" and group._get_backend(torch.device("cpu")).name() != "gloo":
        fail("cpu:gloo,neuron:neuron: CPU tensors do not go to gloo")
    tensor = torch.full((3,), float(dist.get_rank() + 1), device=device)
    dist.all_reduce(tensor)
    assert_same(f"{spelling}: all_reduce", tensor, torch.full((3,), 3.0))


def train_steps(model: torch.nn.Module, on: torch.device, seed: int, steps: int) -> list[float]:
    """SGD with momentum on batches drawn on the CPU from ``seed`` (the same on every device);
    the losses."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    generator = torch.Generator().manual_seed(seed)
    losses = []
    for _ in range(steps):
        inputs = torch.randn(16, 8, generator=generator).to(on)
        targets = torch.randn(16, 4, generator=generator).to(on)
        loss = torch.nn.functional.mse_loss(model(inputs), targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses


def ddp(device: torch.device) -> None:
    """DDP training on neuron matches the same training on the CPU over gloo."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    rank = dist.get_rank()
    cpu_group = dist.new_group(backend="gloo")

    def train(on: torch.device, group: dist.ProcessGroup | None) -> tuple[list[float], dict]:
        torch.manual_seed(0)  # the same initial model on every rank and device
        model = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)
        ).to(on)
        model = DDP(model, process_group=group, bucket_cap_mb=0.0001)  # several buckets
        losses = train_steps(model, on, seed=1000 + rank, steps=5)  # each rank its own batches
        return losses, {k: v.cpu() for k, v in model.module.state_dict().items()}

    neuron_losses, neuron_state = train(device, None)
    cpu_losses, cpu_state = train(torch.device("cpu"), cpu_group)
    torch.testing.assert_close(neuron_losses, cpu_losses, rtol=1e-6, atol=1e-7)
    for name in cpu_state:
        torch.testing.assert_close(neuron_state[name], cpu_state[name], rtol=1e-6, atol=1e-7)
    # The replicas agree with each other: the gradients were averaged.
    weights = neuron_state["0.weight"].to(device)
    gathered = [torch.zeros_like(weights) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, weights)
    if not all(torch.equal(g.cpu(), weights.cpu()) for g in gathered):
        fail("DDP replicas diverged")


def dtensor_fsdp2(device: torch.device) -> None:
    """DeviceMesh, DTensor and FSDP2 on neuron match the same on CPU tensors over gloo."""
    from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    rank, world = dist.get_rank(), dist.get_world_size()
    neuron_mesh = init_device_mesh("neuron", (world,))
    cpu_mesh = DeviceMesh.from_group(dist.new_group(backend="gloo"), "cpu")
    if neuron_mesh.get_group()._get_backend(device).name() != "neuron":
        fail("the neuron DeviceMesh does not use the neuron backend")

    # DTensor: shard, matmul against a replicated weight, redistribute, gather.
    torch.manual_seed(0)
    x, w = torch.randn(4, 6), torch.randn(6, 3)
    results = {}
    for mesh, on in ((neuron_mesh, device), (cpu_mesh, torch.device("cpu"))):
        sharded = distribute_tensor(x.to(on), mesh, [Shard(0)])
        product = sharded @ distribute_tensor(w.to(on), mesh, [Replicate()])
        if sharded.to_local().device != on:
            fail(f"a DTensor's local shard is on {sharded.to_local().device}, not {on}")
        results[on.type] = (
            product.full_tensor(),
            sharded.redistribute(mesh, [Replicate()]).to_local(),
            product.redistribute(mesh, [Shard(1)]).to_local(),
        )
    for index, name in enumerate(("matmul+full_tensor", "Shard->Replicate", "Shard(0)->Shard(1)")):
        assert_same(f"DTensor {name}", results["neuron"][index], results["cpu"][index])

    # FSDP2: each Linear and the root fully_shard-ed, 4 SGD steps, every rank its own batch.
    def train(mesh: DeviceMesh, on: torch.device) -> tuple[list[float], dict]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(
            torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)
        ).to(on)
        for layer in (model[0], model[2], model):
            fully_shard(layer, mesh=mesh)
        losses = train_steps(model, on, seed=2000 + rank, steps=4)
        state = {k: v.full_tensor().cpu() for k, v in model.state_dict().items()}
        return losses, state

    neuron_losses, neuron_state = train(neuron_mesh, device)
    cpu_losses, cpu_state = train(cpu_mesh, torch.device("cpu"))
    torch.testing.assert_close(neuron_losses, cpu_losses, rtol=1e-6, atol=1e-7)
    for name in cpu_state:
        torch.testing.assert_close(neuron_state[name], cpu_state[name], rtol=1e-6, atol=1e-7)


def main() -> None:
    scenario = sys.argv[1]
    rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("neuron", rank)
    torch.neuron.set_device(device)
    if scenario.startswith("init:"):
        init_spellings(device, scenario.split(":", 1)[1])
    else:
        dist.init_process_group("neuron")
        {"collectives": collectives, "ddp": ddp, "dtensor_fsdp2": dtensor_fsdp2}[scenario](device)
    dist.destroy_process_group()
    # One write of the whole line: both ranks share torchrun's stdout, and print() writes the
    # text and its newline separately, so two ranks' lines could run together.
    os.write(1, f"PASS {scenario} {rank}\n".encode())
    # Leave without interpreter teardown: once in a CI run, a dtensor_fsdp2 rank that had passed
    # aborted in teardown ("terminate called without an active exception", a joinable
    # std::thread destroyed at exit; not reproduced in 7 reruns). What this worker checks is
    # done; the teardown abort is a known gap of its own (docs/neuron.md).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
