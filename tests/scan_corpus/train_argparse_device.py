"""Train an MLP on synthetic data; the device comes from a --device flag that defaults to CUDA,
falling back to the CPU when the machine has no GPU (the classic CUDA-first CLI)."""

import argparse
import json

import torch
import torch.nn as nn
import torch.nn.functional as F


def parse_args():
    parser = argparse.ArgumentParser(description="MLP on synthetic data")
    parser.add_argument("--device", type=str, default="cuda", help="cuda, cuda:N or cpu")  # expect: DA103
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    return parser.parse_args()


class Net(nn.Module):
    def __init__(self, features=20, hidden=64, classes=5):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(features, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.head(F.relu(self.body(x)))


def synthetic_data(n, seed):
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 20, generator=generator)
    w = torch.randn(20, 5, generator=generator)
    return x, (x @ w).argmax(dim=1)


def main():
    args = parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():  # expect: DA107 DA101
        print("CUDA is not available, training on the CPU")
        args.device = "cpu"
    device = torch.device(args.device)
    if device.type == "cuda":  # expect: DA107
        torch.backends.cudnn.benchmark = True

    torch.manual_seed(args.seed)
    model = Net().to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    inputs, labels = synthetic_data(256, args.seed)

    losses = []
    for _ in range(args.epochs):
        permutation = torch.randperm(len(inputs))
        epoch_loss = 0.0
        for start in range(0, len(inputs), args.batch_size):
            index = permutation[start : start + args.batch_size]
            x, y = inputs[index].to(device), labels[index].to(device)
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            epoch_loss += loss.item() * len(index)
        losses.append(round(epoch_loss / len(inputs), 6))

    model.eval()
    with torch.no_grad():
        accuracy = (model(inputs.to(device)).argmax(dim=1).cpu() == labels).float().mean().item()
    checksum = sum(p.detach().cpu().abs().sum().item() for p in model.parameters())
    print(
        json.dumps(
            {
                "device": device.type,
                "losses": losses,
                "accuracy": round(accuracy, 5),
                "checksum": round(checksum, 5),
            }
        )
    )


if __name__ == "__main__":
    main()
