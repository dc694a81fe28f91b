"""A small CNN on random 8x8 images. The --device default is picked when the parser is built,
and the TF32/cuDNN switches are flipped at import time, as many vision training scripts do."""

import argparse
import json

import torch
from torch import nn

# Faster matmuls and convolutions on Ampere and later; only CUDA reads these switches.
torch.backends.cuda.matmul.allow_tf32 = True  # expect: DA112
torch.backends.cudnn.allow_tf32 = True  # expect: DA112
torch.backends.cudnn.benchmark = True


def build_parser():
    parser = argparse.ArgumentParser()
    parser.add_argument(
        "--device",
        default="cuda" if torch.cuda.is_available() else "cpu",  # expect: DA103
    )
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--channels", type=int, default=8)
    return parser


def make_model(channels):
    return nn.Sequential(
        nn.Conv2d(1, channels, kernel_size=3, padding=1),
        nn.BatchNorm2d(channels),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(channels, channels, kernel_size=3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(channels, 3),
    )


def main():
    args = build_parser().parse_args()
    device = torch.device(args.device)
    torch.manual_seed(7)
    model = make_model(args.channels).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(11)
    images = torch.randn(64, 1, 8, 8, generator=generator)
    labels = (images.mean(dim=(1, 2, 3)) * 40).long().clamp(-1, 1) + 1

    losses = []
    model.train()
    for step in range(args.steps):
        batch = slice((step * 16) % 64, (step * 16) % 64 + 16)
        x = images[batch].to(device, non_blocking=True)
        y = labels[batch].to(device, non_blocking=True)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        losses.append(round(loss.item(), 6))

    model.eval()
    with torch.no_grad():
        logits = model(images.to(device)).cpu()
    state = model.state_dict()
    print(
        json.dumps(
            {
                "device": device.type,
                "losses": losses,
                "running_mean": round(state["1.running_mean"].abs().sum().item(), 5),
                "logits_checksum": round(logits.abs().sum().item(), 5),
                "checksum": round(sum(p.detach().cpu().abs().sum().item() for p in model.parameters()), 5),
            }
        )
    )


if __name__ == "__main__":
    main()
