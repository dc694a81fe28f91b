"""Train a small MLP classifier on synthetic data, the way many CUDA-first scripts do it."""

import argparse
import json

import torch
import torch.nn as nn
import torch.nn.functional as F

from data import make_batches


class MLP(nn.Module):
    def __init__(self, features: int, hidden: int, classes: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(features, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    torch.manual_seed(0)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(0)
        torch.backends.cudnn.benchmark = False
    device = torch.device(getattr(torch.accelerator.current_accelerator(check_available=True), "type", "cpu"))

    model = MLP(16, 32, 4)
    if torch.accelerator.is_available():
        model = model.to(torch.accelerator.current_accelerator())  # move the parameters to the GPU
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    losses = []
    for inputs, targets in make_batches(args.steps):
        inputs, targets = inputs.to(device), targets.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(inputs), targets)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    if torch.accelerator.is_available():
        torch.accelerator.synchronize()
        peak = torch.accelerator.max_memory_allocated()
    else:
        peak = 0

    with open(args.out, "w") as out:
        json.dump(
            {
                "device": str(next(model.parameters()).device.type),
                "losses": losses,
                "weights": [p.detach().cpu().flatten().tolist() for p in model.parameters()],
                "peak_memory_reported": peak > 0,
            },
            out,
        )


if __name__ == "__main__":
    main()
