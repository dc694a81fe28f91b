"""Synthetic batches, generated on the CPU so every device sees the same data."""

import torch


def make_batches(steps: int, batch: int = 64):
    generator = torch.Generator().manual_seed(1)
    centers = torch.randn(4, 16, generator=generator) * 2
    for _ in range(steps):
        targets = torch.randint(0, 4, (batch,), generator=generator)
        inputs = centers[targets] + torch.randn(batch, 16, generator=generator)
        yield inputs, targets
