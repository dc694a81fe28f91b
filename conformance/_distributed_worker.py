"""One rank of the distributed area (test_distributed.py), run as a real process.

    python -m conformance._distributed_worker BACKEND RANK WORLD_SIZE PORT OUT_DIR

The rank joins a process group on 127.0.0.1:PORT whose device backend is the one torch.distributed
registers for BACKEND's device type (gloo for the CPU), runs every scenario in SCENARIOS against
the same computation on CPU tensors (over a gloo group, or in this process), and writes
OUT_DIR/rank<RANK>.json: {scenario: null when it passed, else the error}. A failing scenario does
not stop the others, so one launch serves the whole module.

It imports nothing of any backend's extension: ``import torch`` must load it (torch's backend
autoload), as it does for a user. Modules named in CONFORMANCE_WORKER_PLUGINS (comma-separated:
the ``-p`` plugins of the pytest run, such as a deliberately broken backend) are imported first.
"""

from __future__ import annotations

import importlib
import json
import os
import sys
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist

PLUGINS_ENV = "CONFORMANCE_WORKER_PLUGINS"
# A rank whose peer failed before a collective waits this long, then fails that scenario.
COLLECTIVE_TIMEOUT = timedelta(seconds=60)


def _data(rank: int, *shape: int, offset: int = 0) -> torch.Tensor:
    """Distinct small integers per rank, in float32: sums, products and means are exact."""
    count = 1
    for size in shape:
        count *= size
    return ((torch.arange(count) % 7) + 1 + 10 * rank + offset).float().reshape(shape)


class Scenarios:
    def __init__(self, device: torch.device, rank: int, world: int) -> None:
        self.device, self.rank, self.world = device, rank, world
        self.gloo = dist.new_group(backend="gloo", timeout=COLLECTIVE_TIMEOUT)  # the CPU reference

    def _same(self, what: str, actual: torch.Tensor, expected: torch.Tensor) -> None:
        if actual.device.type != self.device.type:
            raise AssertionError(f"{what}: the result is on {actual.device}, not {self.device}")
        if not torch.equal(actual.cpu(), expected):
            raise AssertionError(
                f"{what}: rank {self.rank} got {actual.cpu().tolist()}, gloo on CPU tensors gave "
                f"{expected.tolist()}"
            )

    def all_reduce(self) -> None:
        ops = [dist.ReduceOp.SUM, dist.ReduceOp.PRODUCT, dist.ReduceOp.MAX, dist.ReduceOp.MIN]
        for op in ops:
            cpu = _data(self.rank, 3, 4)
            tensor = cpu.to(self.device)
            dist.all_reduce(tensor, op=op)
            dist.all_reduce(cpu, op=op, group=self.gloo)
            self._same(f"all_reduce({op})", tensor, cpu)
        # A strided view: the result must land in the viewed elements only.
        cpu = _data(self.rank, 4, 6)
        tensor = cpu.to(self.device)
        dist.all_reduce(tensor[:, ::2])
        dist.all_reduce(cpu[:, ::2], group=self.gloo)
        self._same("all_reduce of a strided view", tensor, cpu)

    def async_all_reduce(self) -> None:
        cpu = _data(self.rank, 1000)
        tensor = cpu.to(self.device)
        work = dist.all_reduce(tensor, async_op=True)
        work.wait()
        dist.all_reduce(cpu, group=self.gloo)
        self._same("all_reduce(async_op=True) after wait()", tensor, cpu)

    def broadcast(self) -> None:
        for source in range(self.world):
            cpu = _data(self.rank, 5, offset=source)
            tensor = cpu.to(self.device)
            dist.broadcast(tensor, src=source)
            dist.broadcast(cpu, src=source, group=self.gloo)
            self._same(f"broadcast(src={source})", tensor, cpu)

    def all_gather(self) -> None:
        cpu = _data(self.rank, 2, 3)
        outputs = [torch.zeros(2, 3, device=self.device) for _ in range(self.world)]
        dist.all_gather(outputs, cpu.to(self.device))
        expected = [torch.zeros(2, 3) for _ in range(self.world)]
        dist.all_gather(expected, cpu, group=self.gloo)
        for index, (actual, reference) in enumerate(zip(outputs, expected, strict=True)):
            self._same(f"all_gather output {index}", actual, reference)
        flat = torch.zeros(self.world * 6, device=self.device)
        dist.all_gather_into_tensor(flat, cpu.flatten().to(self.device))
        self._same("all_gather_into_tensor", flat, torch.cat([t.flatten() for t in expected]))

    def reduce_scatter(self) -> None:
        cpu = _data(self.rank, self.world * 4)
        output = torch.zeros(4, device=self.device)
        dist.reduce_scatter_tensor(output, cpu.to(self.device))
        # The reference: all_reduce on gloo, then this rank's chunk.
        reference = cpu.clone()
        dist.all_reduce(reference, group=self.gloo)
        self._same("reduce_scatter_tensor", output, reference.chunk(self.world)[self.rank])

    def all_to_all(self) -> None:
        cpu = _data(self.rank, self.world * 3)
        output = torch.zeros(self.world * 3, device=self.device)
        dist.all_to_all_single(output, cpu.to(self.device))
        gathered = [torch.zeros_like(cpu) for _ in range(self.world)]
        dist.all_gather(gathered, cpu, group=self.gloo)
        expected = torch.cat([g.chunk(self.world)[self.rank] for g in gathered])
        self._same("all_to_all_single", output, expected)

    def send_recv(self) -> None:
        peer = (self.rank + 1) % self.world
        cpu = _data(self.rank, 6)
        received = torch.zeros(6, device=self.device)
        if self.rank == 0:
            dist.send(cpu.to(self.device), dst=peer)
            dist.recv(received, src=peer)
        else:
            dist.recv(received, src=(self.rank - 1) % self.world)
            dist.send(cpu.to(self.device), dst=peer)
        self._same("send/recv", received, _data((self.rank - 1) % self.world, 6))

    # ---- training steps: the result of one process training on every rank's batch ----

    def _model(self) -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))

    def _batch(self, rank: int) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(100 + rank)
        return torch.randn(4, 8, generator=generator), torch.randn(4, 2, generator=generator)

    def _reference_parameters(self, steps: int) -> list[torch.Tensor]:
        """Plain CPU training on the mean of the ranks' losses: what data parallelism computes."""
        model = self._model()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(steps):
            optimizer.zero_grad()
            losses = [
                torch.nn.functional.mse_loss(model(x), y)
                for x, y in map(self._batch, range(self.world))
            ]
            (sum(losses) / self.world).backward()
            optimizer.step()
        return [p.detach() for p in model.parameters()]

    def _compare_parameters(self, what: str, actual: list[torch.Tensor], steps: int) -> None:
        for index, (a, e) in enumerate(zip(actual, self._reference_parameters(steps), strict=True)):
            if a.device.type != self.device.type:
                raise AssertionError(f"{what}: parameter {index} is on {a.device}")
            torch.testing.assert_close(
                a.detach().cpu(),
                e,
                rtol=1e-5,
                atol=1e-6,
                msg=lambda m, i=index: f"{what}: parameter {i} after {steps} steps: {m}",
            )

    def ddp_training_step(self) -> None:
        from torch.nn.parallel import DistributedDataParallel

        model = DistributedDataParallel(self._model().to(self.device))
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = (t.to(self.device) for t in self._batch(self.rank))
        for _ in range(2):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        self._compare_parameters("DDP", list(model.module.parameters()), steps=2)

    def fsdp2_training_step(self) -> None:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(self.device.type, (self.world,))
        model = self._model().to(self.device)
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = (t.to(self.device) for t in self._batch(self.rank))
        for _ in range(2):
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        full = [p.full_tensor() for p in model.parameters()]
        self._compare_parameters("FSDP2 (fully_shard)", full, steps=2)


SCENARIOS: tuple[str, ...] = (
    "all_reduce",
    "async_all_reduce",
    "broadcast",
    "all_gather",
    "reduce_scatter",
    "all_to_all",
    "send_recv",
    "ddp_training_step",
    "fsdp2_training_step",
)


def main(argv: list[str]) -> int:
    backend, rank, world, port, out = argv[0], int(argv[1]), int(argv[2]), argv[3], Path(argv[4])
    for plugin in filter(None, os.environ.get(PLUGINS_ENV, "").split(",")):
        importlib.import_module(plugin)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
    if backend == "cpu":
        device = torch.device("cpu")
        process_group = "gloo"
    else:
        module = torch.get_device_module(backend)
        device = torch.device(backend, rank % module.device_count())
        module.set_device(device)
        process_group = dist.get_default_backend_for_device(device)
        process_group = f"cpu:gloo,{backend}:{process_group}"
    results: dict[str, str | None] = {}
    dist.init_process_group(process_group, rank=rank, world_size=world, timeout=COLLECTIVE_TIMEOUT)
    try:
        scenarios = Scenarios(device, rank, world)
        for name in SCENARIOS:
            run: Callable[[], None] = getattr(scenarios, name)
            try:
                run()
                results[name] = None
            except Exception as error:
                results[name] = f"{type(error).__name__}: {error}\n" + "".join(
                    traceback.format_exception(error)[-6:]
                )
            dist.barrier(group=scenarios.gloo)  # a failed rank must not leave the other waiting
    finally:
        (out / f"rank{rank}.json").write_text(json.dumps(results))
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
