"""A tiny sequence regressor (1-D convolutions, Adam), written for one CUDA GPU."""

import json
import sys

import torch
from torch import nn


def get_device():
    if torch.accelerator.is_available():
        torch.accelerator.set_device_index(0)
        return getattr(torch.accelerator.current_accelerator(), "type", "cuda") + ":0"
    return "cpu"


class Regressor(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv1d(8, 16, 3, padding=1), nn.ReLU(), nn.Conv1d(16, 16, 3))
        self.head = nn.Linear(16, 1)

    def forward(self, x):
        features = self.conv(x.transpose(1, 2)).mean(dim=2)
        return self.head(features)


def train(out_path, steps=25, device=get_device()):
    torch.manual_seed(0)
    model = Regressor().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    generator = torch.Generator().manual_seed(2)
    inputs = torch.randn(32, 10, 8, generator=generator)
    targets = inputs.sum(dim=(1, 2)).unsqueeze(1) / 10
    inputs, targets = inputs.to(device), targets.to(device)
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        loss = nn.functional.mse_loss(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    model.eval()
    with torch.no_grad():
        prediction = model(inputs)
    if prediction.device.type == getattr(torch.accelerator.current_accelerator(), "type", "cuda"):
        torch.accelerator.empty_cache()
    with open(out_path, "w") as out:
        json.dump(
            {
                "device": prediction.device.type,
                "losses": losses,
                "weights": [p.detach().cpu().flatten().tolist() for p in model.parameters()],
            },
            out,
        )


if __name__ == "__main__":
    train(sys.argv[1])
