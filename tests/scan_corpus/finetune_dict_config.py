"""Fine-tune the head of a frozen encoder. Settings live in a plain dict (as loaded from YAML),
the GPU index is formatted into the device string, and an old-style --cuda flag is honoured."""

import argparse
import copy
import json
from types import SimpleNamespace

import torch
from torch import nn

DEFAULTS = {
    "device": "cuda",  # expect: any
    "gpu_id": 0,
    "lr": 0.02,
    "steps": 15,
    "freeze_encoder": True,
}


def get_device(cfg):
    if cfg.device == "cuda" and torch.cuda.is_available():  # expect: DA107 DA101
        return torch.device("cuda:{}".format(cfg.gpu_id))  # expect: DA103
    return torch.device("cpu")


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(10, 16)
        self.norm = nn.LayerNorm(16)

    def forward(self, x):
        return torch.tanh(self.norm(self.proj(x)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--cuda", action="store_true", help="enables cuda")
    parser.add_argument("--steps", type=int)
    opt = parser.parse_args()
    if torch.cuda.is_available() and not opt.cuda:  # expect: DA101
        print("WARNING: You have a CUDA device, so you should probably run with --cuda")

    settings = copy.deepcopy(DEFAULTS)
    if opt.steps is not None:
        settings["steps"] = opt.steps
    if not opt.cuda:
        settings["device"] = "cpu"
    cfg = SimpleNamespace(**settings)
    device = get_device(cfg)

    torch.manual_seed(21)
    encoder, head = Encoder(), nn.Linear(16, 2)
    if device.type == "cuda":  # expect: DA107
        encoder.cuda()  # expect: DA102
        head.cuda()  # expect: DA102
    for p in encoder.parameters():
        p.requires_grad_(not cfg.freeze_encoder)
    optimizer = torch.optim.SGD(
        [p for p in [*encoder.parameters(), *head.parameters()] if p.requires_grad], lr=cfg.lr
    )

    generator = torch.Generator().manual_seed(4)
    x = torch.randn(40, 10, generator=generator)
    y = torch.stack([x[:, 0] - x[:, 1], x[:, 2:5].sum(dim=1)], dim=1)
    x, y = x.to(device), y.to(device)
    losses = []
    for _ in range(cfg.steps):
        optimizer.zero_grad()
        loss = nn.functional.smooth_l1_loss(head(encoder(x)), y)
        loss.backward()
        optimizer.step()
        losses.append(round(loss.item(), 6))

    frozen = sum(p.detach().cpu().abs().sum().item() for p in encoder.parameters())
    print(
        json.dumps(
            {
                "device": str(device),
                "cuda_flag": opt.cuda,
                "losses": losses,
                "encoder_checksum": round(frozen, 5),
                "head_checksum": round(sum(p.detach().cpu().abs().sum().item() for p in head.parameters()), 5),
            }
        )
    )


if __name__ == "__main__":
    main()
