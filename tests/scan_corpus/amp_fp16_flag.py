"""Mixed precision behind an --fp16 flag, with the names imported from torch.cuda.amp and the
evaluation pass under torch.autocast. Off by default, so the default run is float32."""

import argparse
import json

import torch
from torch import nn
from torch.cuda.amp import GradScaler, autocast


class Block(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)

    def forward(self, x):
        return x + self.fc(self.norm(x)).relu()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--fp16", action="store_true", help="mixed precision (GPU only)")
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()

    use_cuda = torch.cuda.is_available()  # expect: DA101
    device = torch.device("cuda" if use_cuda else "cpu")  # expect: DA103
    use_amp = args.fp16 and use_cuda

    torch.manual_seed(17)
    model = nn.Sequential(nn.Linear(6, 16), Block(16), Block(16), nn.Linear(16, 1)).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=4e-3, weight_decay=0.01)
    scaler = GradScaler(enabled=use_amp)  # expect: DA105

    generator = torch.Generator().manual_seed(8)
    x = torch.randn(48, 6, generator=generator)
    y = x.pow(2).sum(dim=1, keepdim=True)
    x, y = x.to(device), y.to(device)

    losses = []
    for _ in range(args.steps):
        optimizer.zero_grad(set_to_none=True)
        with autocast(enabled=use_amp):  # expect: DA105
            loss = nn.functional.mse_loss(model(x), y)
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        losses.append(round(loss.item(), 6))

    model.eval()
    with torch.no_grad(), torch.autocast(device_type="cuda", enabled=use_amp):  # expect: DA103
        prediction = model(x).float()
    print(
        json.dumps(
            {
                "device": device.type,
                "used_amp": scaler.is_enabled(),
                "losses": losses,
                "last_grad_norm": round(grad_norm.item(), 5),
                "eval_loss": round(nn.functional.mse_loss(prediction, y).item(), 6),
                "checksum": round(sum(p.detach().cpu().abs().sum().item() for p in model.parameters()), 5),
            }
        )
    )


if __name__ == "__main__":
    main()
