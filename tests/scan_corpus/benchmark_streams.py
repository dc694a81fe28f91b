"""Time the forward pass of a small MLP the careful way: a torch.device with an explicit index,
the model moved with .cuda(device), the device synchronized (by keyword) around the timed region,
the work checked on the current stream, and the memory in use reported."""

import argparse
import json
import time

import torch
from torch import nn


def timed(fn, device, iters):
    if torch.cuda.is_available():  # expect: DA101
        torch.cuda.synchronize(device=device)  # expect: DA101
    start = time.perf_counter()
    for _ in range(iters):
        out = fn()
    if torch.cuda.is_available():  # expect: DA101
        torch.cuda.current_stream(device=device).synchronize()  # expect: DA101
    return out, (time.perf_counter() - start) / iters


def make_inputs(batch, device="cuda"):  # expect: DA104
    generator = torch.Generator().manual_seed(10)
    return torch.randn(batch, 32, generator=generator).to(device, non_blocking=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gpu", type=int, default=0)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--batch", type=int, default=64)
    args = parser.parse_args()

    use_gpu = torch.cuda.is_available()  # expect: DA101
    device = torch.device("cuda", args.gpu) if use_gpu else torch.device("cpu")  # expect: DA103
    torch.manual_seed(9)
    model = nn.Sequential(nn.Linear(32, 128), nn.GELU(), nn.Linear(128, 32), nn.LayerNorm(32))
    if use_gpu:
        model.cuda(device)  # expect: DA102
    model.eval()

    x = make_inputs(args.batch, device=device)

    with torch.inference_mode():
        out, seconds = timed(lambda: model(x), device, args.iters)
    allocated = torch.cuda.memory_allocated(device=device) if use_gpu else 0  # expect: DA101

    print(
        json.dumps(
            {
                "device": str(device),
                "output_checksum": round(out.cpu().abs().sum().item(), 5),
                "output_std": round(out.std().item(), 5),
                "timed": seconds > 0,
                "memory_reported": allocated > 0,
                "param_device": next(model.parameters()).device.type,
            }
        )
    )


if __name__ == "__main__":
    main()
