"""A training loop in the style of the CUDA AMP recipe: autocast, GradScaler, pinned DataLoader,
NVTX ranges and CUDA events for timing. Mixed precision is opt-in (--amp), so the default run
computes in float32 on every device and is comparable with the CPU."""

import argparse
import contextlib
import json

import torch
from torch.utils.data import DataLoader, TensorDataset


def build_loader(batch_size):
    generator = torch.Generator().manual_seed(3)
    inputs = torch.randn(256, 12, generator=generator)
    targets = (inputs[:, :3].sum(dim=1) > 0).long()
    dataset = TensorDataset(inputs, targets)
    return DataLoader(dataset, batch_size=batch_size, pin_memory=torch.accelerator.is_available())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--amp", action="store_true")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    torch.manual_seed(0)
    device = getattr(torch.accelerator.current_accelerator(check_available=True), "type", "cpu")
    model = torch.nn.Sequential(torch.nn.Linear(12, 24), torch.nn.Tanh(), torch.nn.Linear(24, 2))
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
    scaler = torch.amp.GradScaler(getattr(torch.accelerator.current_accelerator(), "type", "cuda"), enabled=args.amp)
    timed = torch.accelerator.is_available()
    # NVTX ranges for Nsight, when there is a GPU (torch.cuda.nvtx raises without CUDA).
    annotate = torch.profiler.record_function if timed else lambda name: contextlib.nullcontext()
    if timed:
        start = torch.Event(enable_timing=True)
        end = torch.Event(enable_timing=True)
        start.record()

    losses = []
    for epoch in range(3):
        with annotate(f"epoch {epoch}"):
            for inputs, targets in build_loader(32):
                inputs = inputs.to(device, non_blocking=True)
                targets = targets.to(device, non_blocking=True)
                optimizer.zero_grad(set_to_none=True)
                with torch.amp.autocast(getattr(torch.accelerator.current_accelerator(), "type", "cuda"), enabled=args.amp):
                    loss = torch.nn.functional.cross_entropy(model(inputs), targets)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                losses.append(loss.item())
    if timed:
        end.record()
        torch.accelerator.synchronize()
        print(f"{start.elapsed_time(end):.1f} ms")

    with open(args.out, "w") as out:
        json.dump(
            {
                "device": next(model.parameters()).device.type,
                "losses": losses,
                "weights": [p.detach().cpu().flatten().tolist() for p in model.parameters()],
            },
            out,
        )


if __name__ == "__main__":
    main()
