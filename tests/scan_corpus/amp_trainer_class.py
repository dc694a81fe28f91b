"""A Trainer class in the style of the AMP recipe: a GradScaler and autocast that are always on
(they disable themselves, with a warning, where CUDA is missing), the cache emptied after each
epoch and the peak memory logged when there is a GPU."""

import json
import warnings

import torch
from torch import nn


class Trainer:
    def __init__(self, model, lr=5e-3):
        self.device = "cuda" if torch.cuda.is_available() else "cpu"  # expect: DA103
        self.model = model.to(self.device)
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.scaler = torch.cuda.amp.GradScaler()  # expect: DA105
        self.history = []

    def train_epoch(self, batches):
        self.model.train()
        total = 0.0
        for x, y in batches:
            x, y = x.to(self.device), y.to(self.device)
            self.optimizer.zero_grad()
            with torch.cuda.amp.autocast():  # expect: DA105
                loss = nn.functional.binary_cross_entropy_with_logits(self.model(x), y)
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
            total += loss.item()
        if torch.cuda.is_available():  # expect: DA101
            torch.cuda.empty_cache()  # expect: DA101
        self.history.append(round(total / len(batches), 6))

    def peak_memory_mb(self):
        if not torch.cuda.is_available():  # expect: DA101
            return 0.0
        return torch.cuda.max_memory_allocated() / 2**20  # expect: DA101


def make_batches(seed, count=6, size=20):
    generator = torch.Generator().manual_seed(seed)
    batches = []
    for _ in range(count):
        x = torch.randn(size, 9, generator=generator)
        y = (x[:, 0] * x[:, 1] > 0).float().unsqueeze(1)
        batches.append((x, y))
    return batches


def main():
    warnings.simplefilter("ignore")  # the deprecation / "CUDA is not available" warnings
    torch.manual_seed(2024)
    model = nn.Sequential(nn.Linear(9, 18), nn.Softplus(), nn.Linear(18, 1))
    trainer = Trainer(model)
    batches = make_batches(6)
    for _ in range(4):
        trainer.train_epoch(batches)
    with torch.no_grad():
        logits = trainer.model(batches[0][0].to(trainer.device))
    print(
        json.dumps(
            {
                "device": trainer.device,
                "used_amp": trainer.scaler.is_enabled(),
                "losses": trainer.history,
                "logits_dtype": str(logits.dtype),
                "peak_memory_reported": trainer.peak_memory_mb() > 0,
                "checksum": round(sum(p.detach().cpu().abs().sum().item() for p in model.parameters()), 5),
            }
        )
    )


if __name__ == "__main__":
    main()
