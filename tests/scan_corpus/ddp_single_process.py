"""DistributedDataParallel launch code, run here as a world of one process: NCCL on GPUs, Gloo
otherwise, one device per rank, a DistributedSampler and an all-reduced metric."""

import json
import os
import socket

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def setup(rank, world_size):
    backend = "nccl" if torch.cuda.is_available() else "gloo"  # expect: DA110 DA101
    dist.init_process_group(
        backend, init_method=f"tcp://127.0.0.1:{free_port()}", rank=rank, world_size=world_size
    )
    if torch.cuda.is_available():  # expect: DA101
        torch.cuda.set_device(rank)  # expect: DA101
        return torch.device(f"cuda:{rank}"), backend  # expect: DA103
    return torch.device("cpu"), backend


def main():
    rank = int(os.environ.get("RANK", "0"))
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    device, backend = setup(rank, world_size)

    torch.manual_seed(1234)
    model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 1)).to(device)
    ddp_model = DDP(model, device_ids=[rank] if torch.cuda.is_available() else None)  # expect: DA101
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=0.05)

    generator = torch.Generator().manual_seed(99)
    x = torch.randn(96, 12, generator=generator)
    y = x[:, :4].sum(dim=1, keepdim=True).sin()
    dataset = TensorDataset(x, y)
    sampler = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=5)
    loader = DataLoader(dataset, batch_size=24, sampler=sampler)

    losses = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        running = torch.zeros(1, device=device)
        for xb, yb in loader:
            xb, yb = xb.to(device), yb.to(device)
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(ddp_model(xb), yb)
            loss.backward()
            optimizer.step()
            running += loss.detach()
        dist.all_reduce(running, op=dist.ReduceOp.SUM)
        losses.append(round(running.item() / (len(loader) * world_size), 6))

    checksum = sum(p.detach().cpu().abs().sum().item() for p in ddp_model.module.parameters())
    result = {
        "backend": backend,
        "device": device.type,
        "world_size": dist.get_world_size(),
        "losses": losses,
        "checksum": round(checksum, 5),
    }
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
